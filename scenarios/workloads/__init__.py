"""The application workloads (sentinels, submission workers, agents,
watchers) and what they need: the sentinel application, the pager, and the
sentinel wakes driven by direct calls."""
