"""``checkpoint-consistency``: a checkpoint never lies about the log.

Checkpoints are derived and disposable (persistence §8): a recovery may
skip the records a checkpoint covers only if the checkpoint is exactly what
a full read would give, made under the configuration the reader runs (its
agent definition, model configuration and tool set). Online, every committed checkpoint must sit on a
batch boundary the log acknowledged with that very tail digest (the oracle
follows the log's commits, not the store's answers). Audit: every
conversation's latest checkpoint holds the fold of the log prefix it
covers, recomputed from the stored records.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from faults.events import ERROR, CheckpointSave, LogAppend, LogDeleteConversation, RecoveryRead
from model.submissions import NO_CONFIGURATION, RECOVERY_DEFINITION, recovery_snapshot
from sim.invariants import Checker

if TYPE_CHECKING:
    from scenarios.system import AuditView


class CheckpointConsistency(Checker):
    name = "checkpoint-consistency"
    kinds = (LogAppend.kind, CheckpointSave.kind, RecoveryRead.kind, LogDeleteConversation.kind)

    def __init__(self) -> None:
        super().__init__()
        # conversation -> {last_seq of a committed batch: tail digest after it};
        # a conversation's log is short (it lives an hour), so is this.
        self._boundaries: dict[str, dict[int, str]] = {}

    def _latest(self, conversation_id: str) -> Any:
        """The store's latest checkpoint of the conversation, or None."""
        return self.view.latest_checkpoint(conversation_id)

    def on_event(self, event: tuple) -> None:
        fields = event.fields
        if ERROR in fields:
            return
        if event.kind == LogAppend.kind:
            if not fields.get(LogAppend.replayed):
                self._boundaries.setdefault(fields[LogAppend.conversation], {})[
                    fields[LogAppend.last_seq]] = fields[LogAppend.tail_digest]
            return
        if event.kind == LogDeleteConversation.kind:
            if fields.get(LogDeleteConversation.deleted):
                # Deleted whole (retention): a log created again under its id acknowledges anew.
                self._boundaries.pop(fields[LogDeleteConversation.conversation], None)
            return
        if event.kind == RecoveryRead.kind:
            self._on_recovery(fields)
            return
        self.checks += 1
        conversation = fields[CheckpointSave.conversation]
        seq = fields[CheckpointSave.covered_seq]
        tail_digest = fields[CheckpointSave.tail_digest]
        acknowledged = self._boundaries.get(conversation, {}).get(seq)
        if acknowledged != tail_digest:
            self.fail(f"{conversation}: checkpoint at seq {seq} carries digest {tail_digest:.12}…, "
                      f"the log acknowledged {acknowledged!r:.16} there", (conversation,))

    def _on_recovery(self, fields: dict) -> None:
        """A recovery that started after a checkpoint used one of the
        configuration its reader runs (the store's latest, read now: when it
        is the one at that position, its definition, model configuration and
        tool set digests must be the reader's)."""
        covered_seq = fields.get(RecoveryRead.from_checkpoint)
        if not covered_seq:
            return
        conversation = fields[RecoveryRead.conversation]
        try:
            checkpoint = self._latest(conversation)
        except Exception:  # an unusable checkpoint now (the log moved on): nothing to compare
            return
        if checkpoint is None or checkpoint.covered_seq != covered_seq:
            return
        self.checks += 1
        reader = (fields.get(RecoveryRead.definition, RECOVERY_DEFINITION),
                  fields.get(RecoveryRead.model, NO_CONFIGURATION), fields.get(RecoveryRead.tools, NO_CONFIGURATION))
        made = (checkpoint.definition_digest, checkpoint.model_digest, checkpoint.tool_digest)
        for what, theirs, ours in zip(("configuration", "model configuration", "tool set"), made, reader):
            if theirs != ours:
                self.fail(f"{conversation}: a recovery started after the checkpoint at seq {covered_seq}, made under "
                          f"{what} {theirs!r:.30}, by a reader of {ours!r:.30} (a checkpoint of another "
                          f"{what} is never used)", (conversation,))
                return

    def audit(self, view: AuditView) -> None:
        for conversation_id in view.conversation_ids():
            checkpoint = self._latest(conversation_id)
            if checkpoint is None:
                continue
            self.checks += 1
            records = view.log_records(conversation_id)[:checkpoint.covered_seq]
            expected = recovery_snapshot(records)
            if len(records) != checkpoint.covered_seq or checkpoint.snapshot != expected:
                self.fail(f"{conversation_id}: checkpoint at seq {checkpoint.covered_seq} holds "
                          f"{checkpoint.snapshot}, the log's prefix folds to {expected}", (conversation_id,))

    # Conversation by conversation: what retention deletes is audited first.
    audit_retiring = audit

