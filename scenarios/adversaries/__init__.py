"""Adversarial clients: processes that call the ports and the kernel
directly, at the edges of their contracts, under faults."""
