"""``joined-settles-once``: a follow-up joined to a running submission
settles exactly once, through its host, with its host's outcome.

Online, from what the stores committed: a follower is marked joined only at
the log position that holds its input, applied to its host's run; a host
never settles with a follower whose input it applied left unjoined (it
would run a second time on its own); a joined follower is never claimed. Audit, from the stores: every settled
follower's host is settled with the same outcome, and the follower's one
settlement record in the log sits in its host's settlement batch.

Memory: the followers of open hosts.
"""
from __future__ import annotations

from faults.events import ERROR, LedgerBeginJoin, LedgerClaim, LedgerFinalizeSettlement, LedgerMarkJoined, LogAppend
from model.lifecycle import settle_batch_id
from sim.invariants import Checker


class JoinedSettlesOnce(Checker):
    name = "joined-settles-once"
    kinds = (LedgerBeginJoin.kind, LedgerMarkJoined.kind, LedgerClaim.kind, LedgerFinalizeSettlement.kind,
             LogAppend.kind)

    def __init__(self) -> None:
        super().__init__()
        self._applied: dict[str, tuple[str, str, int]] = {}  # follower -> (host, record id, seq) of its input
        self._joined: dict[str, str] = {}  # follower -> its host, once marked joined
        self._hosts: dict[str, int] = {}  # host -> followers marked joined
        self.join_settled = 0

    def metrics(self) -> dict:
        return {"join_settled": self.join_settled}

    def on_event(self, event: tuple) -> None:
        kind = event.kind
        fields = event.fields
        if ERROR in fields:
            return
        if kind == LedgerMarkJoined.kind:
            self.checks += 1
            follower, host = fields[LedgerMarkJoined.submission], fields[LedgerMarkJoined.host]
            position = (host, fields[LedgerMarkJoined.record_id], fields[LedgerMarkJoined.seq])
            if self._applied.get(follower) != position:
                self.fail(f"{follower}: marked joined to {host} at {position[1:]}, but its input applied to a run "
                          f"is at {self._applied.get(follower)}", (follower,))
            if not fields[LedgerMarkJoined.replayed] and self._joined.get(follower) != host:
                self._joined[follower] = host
                self._hosts[host] = self._hosts.get(host, 0) + 1
        elif kind == LedgerClaim.kind:
            follower = fields.get(LedgerClaim.submission)
            if follower in self._joined:
                self.checks += 1
                self.fail(f"{follower}: claimed on its own although joined to {self._joined[follower]}", (follower,))
        elif kind == LedgerFinalizeSettlement.kind:
            host = fields[LedgerFinalizeSettlement.submission]
            for follower, (applied_to, _, _) in list(self._applied.items()):
                if applied_to == host and self._joined.get(follower) != host:
                    self.checks += 1
                    self.fail(f"{follower}: its input was applied to {host}'s run, which settled without it joined "
                              f"(it goes back to the queue and runs again on its own)", (follower,))
                    del self._applied[follower]
            joined = self._hosts.pop(host, 0)
            if joined:
                self.join_settled += joined
                for follower in [f for f, h in self._joined.items() if h == host]:
                    del self._joined[follower]
                    self._applied.pop(follower, None)
        elif kind == LogAppend.kind and not fields.get(LogAppend.replayed):
            first_seq = fields.get(LogAppend.first_seq)
            for index, envelope in enumerate(fields[LogAppend.envelopes]):
                payload = envelope["payload"]
                if envelope["family"] == "input" and isinstance(payload, dict) and "hostSubmissionId" in payload:
                    self._applied[payload["submissionId"]] = (payload["hostSubmissionId"],
                                                              fields[LogAppend.record_ids][index], first_seq + index)

    def audit(self, view) -> None:
        for conversation_id in view.conversation_ids():
            rows = {row.submission_id: row for row in view.submissions(conversation_id)}
            followers = [row for row in rows.values() if row.join_host is not None and row.outcome is not None]
            if not followers:
                continue
            batches: dict[str, list[str]] = {}  # submission -> batch ids of its settlement records
            for record in view.log_records(conversation_id):
                if record.envelope.family == "submission-settled":
                    batches.setdefault(record.envelope.payload["submissionId"], []).append(record.batch_id)
            for follower in followers:
                self.checks += 1
                host = rows.get(follower.join_host)
                if host is None or host.outcome != follower.outcome:
                    self.fail(f"{follower.submission_id}: settled {follower.outcome!r}, its host "
                              f"{follower.join_host} {'is gone' if host is None else repr(host.outcome)}",
                              (follower.submission_id,))
                    continue
                where = batches.get(follower.submission_id, [])
                if len(where) != 1 or where[0] != settle_batch_id(host.submission_id):
                    self.fail(f"{follower.submission_id}: its settlement records {where} are not one record in "
                              f"its host's settlement batch", (follower.submission_id,))
