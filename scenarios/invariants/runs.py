"""An agent's runs as the log tells them: their clock and their canonical events.

``run-clock``: one ``run-started`` per run, and its clock is never reset.
Online, from what the stores committed and the agent's step probes:

- a run's start (family ``run-started``, batch ``run-start:{runId}``) is
  appended once: a second start of an open run fails, whatever its batch;
- execution history (a model request or turn, a tool call, a subagent, a
  step's output) of a run is appended only after its start: history without
  start evidence fails;
- a step begins (``agent.step``) no later than the start's ``createdAt``
  plus its ``maxDurationMillis``, taken from the log's start record, not from
  the agent (a resumed attempt that measured from its own claim fails here);
- a run that settles failed for its duration (``RunDurationExceeded``) does
  so only after that deadline.

``canonical-events``: what reaches the log is canonical (persistence §5).
Partial tool-argument deltas, queue depth, heartbeats and debug spans never
are; a model delta is text or reasoning. A completed run's aggregate usage is
the sum of its model turns' usage as the log holds them; a compaction covers
exactly the tail it was appended after (sequence and digest). The peer
implementation's records, in its order: a settlement record carries the run
that settled it (``runId``: its own ``run:{sid}``, or a joined follower's
host's; a queued abort's, its abort record before it, none: no run
started), a completed run's own settlement comes after its ``run-completed``
record in the same batch, a call the reconciler resolved is settled
only after its ``tool-call`` ``resolved`` record, and a run's n-th model
turn (its ``model-completed`` record) is the batch ``turn:{runId}:{n}``
(n from 1, in the order the turns reach the log). It counts
every family (by phase, channel or kind of input): the run's JSON stats carry
the counts.

Memory: the open runs (their start, usage so far), the tail digest of each
open conversation (dropped when it closes).
"""
from __future__ import annotations

from typing import Any

from faults.clocks import CLOCK_FAULT_KINDS, CLOCK_TOLERANCE_MS
from faults.events import ERROR, AgentStep, Fault, LedgerFinalizeSettlement, LogAppend
from model.ledger.records import settlement_of
from sim.invariants import Checker, RecentlySettled


# The families of persistence §5, as this oracle reads them (its own list).
CANONICAL_FAMILIES = frozenset({
    "conversation-created", "conversation-closed", "input", "run-started", "run-completed", "model-request",
    "model-delta", "model-completed", "model-output", "tool-call", "compaction", "subagent", "run-warning", "run-failure",
    "abort-requested", "submission-settled", "repair-annotation"})
NON_CANONICAL = frozenset({"tool-argument-delta", "queue-depth", "heartbeat", "debug-span"})
DELTA_CHANNELS = frozenset({"text", "reasoning"})
# Families that are a run's execution: they need its start first.
EXECUTION_FAMILIES = frozenset({"model-request", "model-completed", "model-output", "tool-call", "subagent"})
USAGE_FIELDS = ("inputTokens", "outputTokens", "costMicros")
SETTLED_MEMORY_MS = 60 * 60 * 1000  # longer than any pause of an owner that lost its claim


def _submission_of_run(run: str) -> str:
    """A run id ``run:{submissionId}`` as the submission it runs (the key
    this oracle keeps runs by: steps and settlements name the submission)."""
    return run[4:] if run.startswith("run:") else run


def _run_of(payload: dict) -> str | None:
    run = payload.get("runId", payload.get("submissionId"))
    return _submission_of_run(run) if isinstance(run, str) else None


class RunClock(Checker):
    name = "run-clock"
    kinds = (LogAppend.kind, AgentStep.kind, LedgerFinalizeSettlement.kind, Fault.kind)

    def __init__(self) -> None:
        super().__init__()
        # The run's deadline is its start's ``createdAt`` (its starter's
        # clock) plus its allowance, and the owner that begins a step reads
        # it on its own clock: once a node's clock is off true time (a
        # clock fault traced, ``faults.clocks``), a step may begin up to the
        # claimed tolerance after it in true time, and no later.
        self.clock_slack_ms = 0
        self._started: dict[str, int] = {}  # open run -> its deadline (start createdAt + allowance)
        # Runs settled in the last SETTLED_MEMORY_MS (oldest first): a paused
        # owner that lost its claim may still begin a step of one (its writes
        # are fenced; ``fencing`` judges them).
        self._settled = RecentlySettled(SETTLED_MEMORY_MS)
        self.runs_started = 0
        self.run_duration_exceeded = 0
        self.run_start_conflicts = 0

    def metrics(self) -> dict:
        return {"runs_started": self.runs_started, "run_duration_exceeded": self.run_duration_exceeded,
                "run_start_conflicts": self.run_start_conflicts}

    def on_event(self, event: tuple) -> None:
        kind = event.kind
        fields = event.fields
        if ERROR in fields:
            return
        if kind == Fault.kind:
            if fields.get("kind") in CLOCK_FAULT_KINDS:
                self.clock_slack_ms = CLOCK_TOLERANCE_MS
            return
        if kind == AgentStep.kind:
            self.checks += 1
            run = fields[AgentStep.submission]
            deadline_ms = self._started.get(run)
            if deadline_ms is None and run in self._settled:
                return
            if deadline_ms is None:
                self.fail(f"{run}: step {fields[AgentStep.index]} began with no start in the log", (run,))
            elif event.time_ms > deadline_ms + self.clock_slack_ms:
                slack = f" (+{self.clock_slack_ms} ms of clock tolerance)" if self.clock_slack_ms else ""
                self.fail(f"{run}: step {fields[AgentStep.index]} began at {event.time_ms} ms, after the deadline "
                          f"{deadline_ms} ms its logged start set{slack} (its clock was reset)", (run,))
        elif kind == LedgerFinalizeSettlement.kind:
            run = fields[LedgerFinalizeSettlement.submission]
            if self._started.pop(run, None) is not None:
                self._settled.add(run, event.time_ms)
        elif kind == LogAppend.kind and not fields.get(LogAppend.replayed):
            for envelope in fields[LogAppend.envelopes]:
                self._on_record(event.time_ms, envelope)

    def _on_record(self, time_ms: int, envelope: dict) -> None:
        family = envelope["family"]
        payload = envelope["payload"]
        if not isinstance(payload, dict):
            return
        if family == "run-started":
            self.checks += 1
            run = _submission_of_run(payload["runId"])
            if run in self._started:
                self.fail(f"{run}: a second run-started for an open run (its clock starts once)", (run,))
                return
            self._started[run] = envelope["createdAt"] + payload["maxDurationMillis"]
            self.runs_started += 1
        elif family in EXECUTION_FAMILIES:
            self.checks += 1
            run = _run_of(payload)
            if run is not None and run not in self._started:
                self.fail(f"{run}: {family} appended with no run-started before it (execution history without "
                          f"start evidence)", (run,))
        elif family == "submission-settled":
            # Counted per run: a joined follower's record repeats its host's
            # diagnostic, and a follower starts no run of its own.
            run = payload["submissionId"]
            diagnostic = settlement_of(envelope).get("diagnostic")
            tag = diagnostic.get("errorTag") if isinstance(diagnostic, dict) and run in self._started else None
            if tag == "RunStartConflict":
                self.run_start_conflicts += 1
            elif tag == "RunDurationExceeded":
                self.checks += 1
                deadline_ms = self._started[run]
                if time_ms <= deadline_ms:
                    self.fail(f"{run}: settled failed for its duration at {time_ms} ms, before its deadline "
                              f"{deadline_ms} ms", (run,))
                self.run_duration_exceeded += 1


class CanonicalEvents(Checker):
    name = "canonical-events"
    kinds = (LogAppend.kind, LedgerFinalizeSettlement.kind)

    def __init__(self, *, opener: Any = None) -> None:
        """``opener``: opens a sealed field of an append (an agent's records
        whose sensitive fields are sealed); None: nothing is sealed."""
        super().__init__()
        self.opener = opener
        self.counts: dict[str, int] = {}  # family[/phase|channel|kind] -> records appended
        self._usage: dict[str, dict[str, int]] = {}  # open run -> its model turns' usage so far
        self._tails: dict[str, str] = {}  # open conversation -> its tail digest
        self._resolved: dict[str, set[str]] = {}  # open submission -> its calls with a resolved record
        self._turns: dict[str, int] = {}  # open submission -> its run's model turns logged so far

    def metrics(self) -> dict:
        return {"canonical_events": dict(sorted(self.counts.items())),
                "compactions_selected": self.counts.get("compaction/selected", 0)}

    def on_event(self, event: tuple) -> None:
        kind = event.kind
        fields = event.fields
        if ERROR in fields:
            return
        if kind == LedgerFinalizeSettlement.kind:
            self._usage.pop(fields[LedgerFinalizeSettlement.submission], None)
            self._resolved.pop(fields[LedgerFinalizeSettlement.submission], None)
            self._turns.pop(fields[LedgerFinalizeSettlement.submission], None)
            return
        if fields.get(LogAppend.replayed):
            return
        conversation = fields[LogAppend.conversation]
        previous_tail = self._tails.get(conversation)
        for envelope in fields[LogAppend.envelopes]:
            self._on_record(conversation, fields[LogAppend.expected_tail_seq], previous_tail, envelope)
        self._peer_order(conversation, fields[LogAppend.batch], fields[LogAppend.envelopes])
        self._turn_ids(conversation, fields[LogAppend.batch], fields[LogAppend.envelopes])
        if conversation in self._tails or fields[LogAppend.first_seq] == 1:
            self._tails[conversation] = fields[LogAppend.tail_digest]
        if any(envelope["family"] == "conversation-closed" for envelope in fields[LogAppend.envelopes]):
            self._tails.pop(conversation, None)

    def _peer_order(self, conversation: str, batch: str, envelopes) -> None:
        """The peer's records and order within one batch (module docstring)."""
        completed: set = set()
        aborted: set = set()
        host_run = None
        for index, envelope in enumerate(envelopes):
            family, payload = envelope["family"], envelope["payload"]
            if not isinstance(payload, dict):
                continue
            if family == "abort-requested":
                aborted.add(payload.get("submissionId"))
            elif family == "run-completed":
                completed.add(payload.get("runId"))
            elif family == "tool-call" and payload.get("phase") == "resolved":
                self._resolved.setdefault(payload["submissionId"], set()).add(payload["call"])
            elif family == "tool-call" and payload.get("phase") == "settled":
                output = payload.get("output")
                if self.opener is not None and isinstance(output, dict) and "$sealed" in output:
                    output = self.opener(self.view, conversation, batch, index, family, "output", output)
                if isinstance(output, dict) and output.get("reconciled"):
                    self.checks += 1
                    if payload["call"] not in self._resolved.get(payload["submissionId"], ()):
                        self.fail(f"{payload['submissionId']}: call {payload['call']} settled from its "
                                  f"resolution with no tool-call resolved record before it", (conversation,))
            elif family == "submission-settled":
                self.checks += 1
                sid, run = payload["submissionId"], payload.get("runId")
                record = settlement_of({"payload": payload})
                if host_run is None:
                    host_run = f"run:{sid}"
                    if run is None and sid in aborted and isinstance(record, dict) and \
                            record.get("outcome") == "aborted":
                        continue  # a queued abort: no run ever started (the peer's "no runId")
                    if run != host_run:
                        self.fail(f"{sid}: its settlement carries run {run!r}, not its run {host_run!r}", (sid,))
                    elif isinstance(record, dict) and record.get("outcome") == "completed" and run not in completed:
                        self.fail(f"{sid}: a completed run settled with no run-completed record before it",
                                  (sid,))
                elif run != host_run:
                    self.fail(f"{sid}: joined to {host_run}, its settlement carries run {run!r}", (sid,))

    def _turn_ids(self, conversation: str, batch: str, envelopes) -> None:
        """A run's n-th model turn is the batch ``turn:{runId}:{n}`` (the peer's id)."""
        for envelope in envelopes:
            payload = envelope["payload"]
            if envelope["family"] != "model-completed" or not isinstance(payload, dict):
                continue
            self.checks += 1
            run = payload["runId"]
            sid = _submission_of_run(run)
            n = self._turns.get(sid, 0) + 1
            self._turns[sid] = n
            if batch != f"turn:{run}:{n}":
                self.fail(f"{sid}: its model turn {n} is the batch {batch!r}, not 'turn:{run}:{n}'", (conversation,))

    def _on_record(self, conversation: str, expected_tail_seq: int, previous_tail: str | None,
                   envelope: dict) -> None:
        family = envelope["family"]
        payload = envelope["payload"]
        self.checks += 1
        if family in NON_CANONICAL or family not in CANONICAL_FAMILIES:
            self.fail(f"{conversation}: a {family!r} record reached the log (never canonical)", (conversation,))
            return
        detail = payload.get("phase") or payload.get("channel") if isinstance(payload, dict) else None
        if family == "input" and isinstance(payload, dict):
            request = payload.get("input")
            if not isinstance(request, dict) or "followUp" not in request:
                detail = "user"
            else:
                detail = "steering" if request.get("steering") else "follow-up"
        key = f"{family}/{detail}" if detail else family
        self.counts[key] = self.counts.get(key, 0) + 1
        if family == "model-delta" and payload.get("channel") not in DELTA_CHANNELS:
            self.fail(f"{conversation}: a model delta of channel {payload.get('channel')!r} reached the log "
                      f"(only text and reasoning deltas are canonical)", (conversation,))
        elif family == "model-completed":
            usage = self._usage.setdefault(_submission_of_run(payload["runId"]), dict.fromkeys(USAGE_FIELDS, 0))
            for field in USAGE_FIELDS:
                usage[field] += payload["usage"][field]
        elif family == "compaction" and payload.get("phase") == "created":
            if payload["coversSeq"] != expected_tail_seq or (previous_tail is not None
                                                             and payload["tailDigest"] != previous_tail):
                self.fail(f"{conversation}: a compaction claims to cover seq {payload['coversSeq']} "
                          f"({payload['tailDigest'][:12]}), appended after seq {expected_tail_seq} "
                          f"({(previous_tail or '?')[:12]})", (conversation,))
        elif family == "submission-settled":
            record = settlement_of({"payload": payload})
            if "usage" in record:
                run = payload["submissionId"]
                turns = self._usage.get(run, dict.fromkeys(USAGE_FIELDS, 0))
                if {field: record["usage"][field] for field in USAGE_FIELDS} != turns:
                    self.fail(f"{run}: settled with usage {record['usage']}, but its logged model turns add up to "
                              f"{turns}", (run,))
