"""``clock-tolerance``: no node acts on a belief about time its clock cannot support.

The system claims to tolerate node clocks within ``CLOCK_TOLERANCE_MS`` of
the true time (``faults.clocks``), and its safety rests on the epoch fence,
not on clocks. This oracle holds the claim to account in *true* time, from
the store calls alone (``faults.ports.PortCall``: the call's true instant,
its node and its arguments), never from the model's bookkeeping:

- **timestamps**: the ``now_ms`` a node hands the ledger (admit, claim,
  renew, settle) and the ``started_at_ms`` of a schedule's run are what the
  rest of the deployment reads as when things happened; one further than
  the tolerance ahead of the true instant of the call is a clock the system
  claims never to run on (one a little behind it may be a slow call: a
  request's timestamp is read before it sets out; one further behind than
  any call is held, ``STALE_MS_MAX``, is a clock again) (CockroachDB's clock-offset monitor, with the
  simulation's true time for the peers' median);
- **takeovers**: a claim by another owner of a submission whose owner's
  lease (the expiry the ledger granted or last renewed) runs on past the
  true instant of the claim by more than the tolerance (two nodes each
  believing they own the lane: the new one because its clock says the
  lease expired);
- **occurrences**: a schedule's run started (true time) more than the
  tolerance before its occurrence is due.

Within the tolerance none of these can happen (the clocks are built so);
past it (``clock-jump-beyond``) the first act of a stepped node trips one,
and the run ends DETECTED. Its memory is one entry per conversation with a
live claim.
"""
from __future__ import annotations

from typing import Any, Callable

from faults.clocks import CLOCK_TOLERANCE_MS
from sim.clock import MS_PER_MINUTE
from sim.invariants import Checker

# No call is held longer than this between reading its timestamp and
# committing (the longest pause is four leases, 4 minutes; the longest
# latency 45 s): a timestamp further behind is a clock, not a delay.
STALE_MS_MAX = 15 * MS_PER_MINUTE
# ledger method -> the position of its ``now_ms`` argument.
_LEDGER_NOW = {"admit": 4, "claim": 3, "renew_ownership": 2, "mark_ready": 1, "request_abort": 3,
               "finalize_settlement": 1}
# Ledger calls after which the token's owner no longer owns its submission.
_RELEASING = ("release_ownership", "suspend", "mark_unknown")


def _arg(call: Any, index: int, name: str) -> Any:
    if name in call.kwargs:
        return call.kwargs[name]
    return call.args[index] if len(call.args) > index else None


class ClockTolerance(Checker):
    name = "clock-tolerance"

    def __init__(self, tolerance_ms: int = CLOCK_TOLERANCE_MS, *, chosen: Callable[[Any, Any], bool] | None = None,
                 occurrences: bool = True) -> None:
        super().__init__()
        assert tolerance_ms > 0, tolerance_ms
        self.tolerance_ms = tolerance_ms
        # ``chosen(call, timestamp)``: a timestamp a client handed the store on
        # purpose (an adversary's replay at another instant), not a reading
        # of its clock: not judged. ``occurrences``: whether a run's
        # occurrences are due by a schedule at all (off where clients make
        # them up and no scheduler decides by its clock that one is due).
        self._chosen = chosen
        self.occurrences = occurrences
        # conversation -> (submission, owner, the lease expiry the ledger holds for it)
        self._leases: dict[str, tuple[str, str, int]] = {}
        self.worst_offset_ms = 0
        # node name -> the true time of the latest reading of its clock a
        # store call carried (``faults.clocks.ClockJumps.check`` reads it).
        self.last_reading_ms: dict[str, int] = {}

    def metrics(self) -> dict[str, Any]:
        return {"clock_worst_offset_ms": self.worst_offset_ms}

    def on_port_call(self, call: Any) -> None:
        if call.error is not None:
            return
        if call.port == "ledger":
            self._ledger(call)
        elif call.port == "kernel" and call.method == "start_execution":
            self._timestamp(call, call.kwargs.get("started_at_ms"), "started_at_ms")
            occurrence_ms = call.kwargs.get("occurrence_ms") if self.occurrences else None
            if type(occurrence_ms) is int and call.time_ms < occurrence_ms - self.tolerance_ms:
                self.fail(f"{call.node} started {_arg(call, 0, 'run_id')} at {call.time_ms} ms (true time), "
                          f"{occurrence_ms - call.time_ms} ms before its occurrence is due: further than the "
                          f"clocks' tolerance ({self.tolerance_ms} ms)", (call.node,))

    def _timestamp(self, call: Any, now_ms: Any, what: str) -> None:
        if type(now_ms) is not int or self._chosen is not None and self._chosen(call, now_ms):
            return
        self.checks += 1
        self.last_reading_ms[call.node.split("#", 1)[0]] = call.time_ms
        # Read before the call set out: a slow call (latency, a pause) lands
        # with a timestamp behind the true instant of its commit, as any
        # request does; only one *ahead* of it is a clock, not a delay.
        # One behind by more than any call can be held (``STALE_MS_MAX``) is
        # a clock again.
        ahead_ms = now_ms - call.time_ms
        self.worst_offset_ms = max(self.worst_offset_ms, ahead_ms)
        if ahead_ms > self.tolerance_ms:
            self.fail(f"{call.node} handed {call.port}.{call.method} {what}={now_ms} at {call.time_ms} ms (true "
                      f"time): its clock is {ahead_ms} ms ahead, past the claimed tolerance "
                      f"({self.tolerance_ms} ms)", (call.node,))
        elif -ahead_ms > STALE_MS_MAX:
            self.fail(f"{call.node} handed {call.port}.{call.method} {what}={now_ms} at {call.time_ms} ms (true "
                      f"time): {-ahead_ms} ms behind, more than any call is held ({STALE_MS_MAX} ms): its clock "
                      f"is off past the claimed tolerance ({self.tolerance_ms} ms)", (call.node,))

    def _ledger(self, call: Any) -> None:
        method = call.method
        index = _LEDGER_NOW.get(method)
        if index is not None:
            self._timestamp(call, _arg(call, index, "now_ms"), "now_ms")
        if method == "claim":
            claim = call.result
            if claim is None:
                return
            conversation = _arg(call, 0, "conversation_id")
            held = self._leases.get(conversation)
            if held is not None and held[0] == claim.submission_id and held[1] != claim.owner_id:
                # The owner's lease runs to ``held[2]`` on the clocks' common
                # scale; a claimer within the tolerance reaches it no sooner
                # than the tolerance before it in true time.
                self.checks += 1
                live_ms = held[2] - call.time_ms
                if live_ms > self.tolerance_ms:
                    self.fail(f"{call.node} took over {claim.submission_id} from {held[1]} at {call.time_ms} ms "
                              f"(true time), {live_ms} ms before that owner's lease runs out: two nodes each "
                              f"believe they own the lane, further apart than the clocks' tolerance allows",
                              (claim.submission_id, call.node))
            self._leases[conversation] = (claim.submission_id, claim.owner_id, claim.lease_expires_ms)
        elif method == "renew_ownership":
            token = _arg(call, 0, "token")
            conversation = _conversation_of(token.submission_id)
            held = self._leases.get(conversation)
            if held is not None and held[0] == token.submission_id and held[1] == token.owner_id:
                self._leases[conversation] = (held[0], held[1], max(held[2], call.result.lease_expires_ms))
        elif method in _RELEASING:
            token = _arg(call, 0, "token")
            submission_id = getattr(token, "submission_id", None)
            if submission_id is None:
                return
            conversation = _conversation_of(submission_id)
            held = self._leases.get(conversation)
            if held is not None and held[0] == submission_id:
                del self._leases[conversation]
        elif method == "purge_conversation":
            self._leases.pop(_arg(call, 0, "conversation_id"), None)


def _conversation_of(submission_id: str) -> str:
    """``sub-{conversation}-{seq}`` -> ``conversation``."""
    return submission_id[4:].rsplit("-", 1)[0]


def clock_checks(run: Any, **options: Any) -> list[Checker]:
    """The oracle (``options``: ``ClockTolerance``'s), in a run whose nodes
    have clocks of their own (skew, jumps or a run beyond the contract);
    none otherwise (no port call pays for it)."""
    from faults.clocks import clocks_wanted

    return [ClockTolerance(**options)] if any(clocks_wanted(run.opts, run.choices)) else []
