"""``cold-reopen``: the run's SQLite file, opened afresh by a new process,
verifies and answers what the live stores answer.

A process that restarts after a crash has nothing but the file: what a
store acknowledged must be *in the file*, not in a connection's cache, a
transaction left open or an adapter's memory. At audit, every adapter opens
the file itself, on a connection of its own, through its own ``open`` (as a
user's service does at boot: the conversation store with
``verify_on_open``, which recomputes every digest chain from its rows), and
its answers are compared with the live audit view's: every conversation's
tail, every durable-state record, every submission the run admitted, the
non-terminal scan, and the row counts of the kernel, pin and findings
tables. Then each closes its connection. And the file is what its
adapters declare it is: when the reopened ledger's ``capabilities()``
declare ``encryption_at_rest``, no conversation id the run used may be in
the file's bytes (the database and its write-ahead log) in plain text.

The built-in scenarios register it on SQLite runs only: in memory (or on a
user's adapters) there is no file to reopen, and it would check nothing.
"""
from __future__ import annotations

from typing import Any

from sim.invariants import Checker


class ColdReopen(Checker):
    name = "cold-reopen"
    kinds = ()

    def audit(self, view: Any) -> None:
        cold_stores = getattr(view, "cold_stores", None)
        if cold_stores is None:
            return
        try:
            opened = cold_stores()
        except Exception as error:  # noqa: BLE001 - a file that refuses to open is the finding
            self.checks += 1
            self.fail(f"the run's database does not reopen: {_named(error)}")
            return
        if opened is None:
            return  # not SQLite: no file to reopen
        try:
            if self._compare(view, opened):
                self._at_rest(view, opened)
        finally:
            for store in opened.values():
                store.close()

    def _compare(self, view: Any, cold: dict[str, Any]) -> bool:
        """True when the reopened file answers as the live stores do."""
        from scenarios.storage import run_sync

        for conversation_id in view.conversation_ids():
            self.checks += 1
            live_tail = view.log_tail(conversation_id)
            try:
                cold_tail = run_sync(cold["log"].inspect_tail(conversation_id))
            except Exception as error:  # noqa: BLE001 - NotMaterialized, or a typed refusal
                cold_tail = None if _named(error).startswith("NotMaterialized") else _named(error)
            if cold_tail != live_tail:
                self.fail(f"{conversation_id}: reopened, the log's tail is {_short(cold_tail)}; "
                          f"the live store says {_short(live_tail)}", (conversation_id,))
                return
            for live in view.submissions(conversation_id):
                self.checks += 1
                got = run_sync(cold["ledger"].get(live.submission_id))
                if got != live:
                    self.fail(f"{live.submission_id}: reopened, the ledger holds {_short(got)}; "
                              f"the live store says {_short(live)}", (live.submission_id, conversation_id))
                    return
        self.checks += 1
        live_scan = sorted(view.nonterminal_submissions())
        cold_scan = sorted(r.submission_id for r in run_sync(cold["ledger"].scan_nonterminal()))
        if cold_scan != live_scan:
            self.fail(f"reopened, the ledger's non-terminal scan is {cold_scan[:5]}; live: {live_scan[:5]}")
            return
        self.checks += 1
        live_state, cold_state = view.ds.snapshot(), cold["ds"].snapshot()
        if cold_state != live_state or len(cold["ds"]) != len(live_state):
            keys = sorted(set(live_state) ^ set(cold_state)) or sorted(
                k for k in live_state if live_state[k] != cold_state.get(k))
            self.fail(f"reopened, durable state differs at {keys[:5]}", tuple(keys[:5]))
            return
        for name in ("log", "kernel", "pins", "findings"):
            self.checks += 1
            live_counts, cold_counts = getattr(view, name).counts(), cold[name].counts()
            if cold_counts != live_counts:
                self.fail(f"reopened, the {name} store counts {cold_counts}; live: {live_counts}")
                return False
        return True


    def _at_rest(self, view: Any, cold: dict[str, Any]) -> None:
        """A file whose adapter declares encryption at rest shows no row's text."""
        if cold["ledger"].capabilities().get("encryption_at_rest") is not True:
            return
        self.checks += 1
        stored = b"".join(view.database_bytes())
        for conversation_id in view.conversation_ids():
            if conversation_id.encode("utf-8") in stored:
                self.fail(f"the ledger declares encryption_at_rest, but the run's database file holds "
                          f"{conversation_id!r} in plain text", (conversation_id,))
                return


def _named(error: BaseException) -> str:
    name = getattr(type(error), "name", None)
    return f"{name if isinstance(name, str) and name else type(error).__name__}: {error}"


def _short(value: Any) -> str:
    return f"{value!r:.160}"
