"""A concurrent history judged from the outside: linearizability per object,
and a dependency graph across objects.

Why: the ``reference-model`` oracle is told every store call as the store
committed it — a privileged view no client has. This module judges only
what the clients themselves saw: each operation's process, object key,
name, arguments, the instant it was invoked, the instant its answer came
back, and the answer (a value, a typed error by name, or ``UNKNOWN`` when
the caller never saw one: a lost reply, a killed process — such an
operation may or may not have taken effect, at any instant after its
invocation). A store whose committed answers look right can still be
wrong to its clients (a stale read served from a cache, an ack for a write
that was never applied); only this view sees that.

- A **sequential model** is a small class per object kind:
  ``init()`` the initial state, ``step(state, op)`` the state after ``op``
  when ``op`` with its observed answer is possible there, else ``None``
  (with ``UNKNOWN`` the answer is not checked). States are hashable
  (tuples) so the search can remember them. The two here —
  ``RegisterModel`` (a durable-state key: read, compare-and-set by
  revision, clear), ``LogModel`` (the conversation log: append by
  expected tail, read a page, the tail) and ``LeaseModel`` (one
  submission's ownership in the ledger: claim, renew, release, settle by
  epoch) — are written apart from the stores and from the reference models
  beside this module. Two more follow the ports' own answers where those
  differ from the small models' (``scenarios.invariants.
  history_linearizable`` translates the port calls into them):
  ``FencedLogModel`` (epoch fencing, batch replays, record identity,
  deletion; its entries interned in a trie, so a state is small) and
  ``SubmissionLeaseModel`` (a lane's shared epoch counter, renewals that
  never shorten, idempotent release, unfenced settlement), with
  ``LaneEpochModel`` beside it (a lane's claims grant growing epochs).
- ``check_history`` partitions the history by object key (linearizability
  is local: the whole is linearizable when each object is) and decides each
  object with the Wing–Gong–Lowe search, remembering every (set of
  operations linearized, state) pair it has been in, as Porcupine does. The
  search is bounded by a step budget per object; past it the object's
  verdict is ``unknown`` ("too costly"), never ``ok``. A violation names
  its window: the shortest prefix of the object's history, by completion
  order, that is already not linearizable (the operations still running at
  its end counted as unknown), and the operations in it.
- ``find_anomalies`` builds an Elle-style dependency graph (a networkx
  ``DiGraph``) over the objects whose versions are totally ordered and
  observable — a durable-state key's revisions, a log's sequence numbers:
  ``ww`` (a write to the write that replaced its version), ``wr`` (a write
  to a read that saw its version), ``rw`` (a read to the write that
  replaced the version it saw), plus real-time edges ``rt`` (an operation
  to those invoked after it completed, transitively reduced), and names
  each cycle by Adya's classes: ``G0`` (write edges only), ``G1c`` (with
  a write-read edge), ``G-single`` (one anti-dependency), ``G2`` (more),
  suffixed ``-realtime`` when the cycle needs a real-time edge. Operations
  here touch one object each, so every cycle across objects passes through
  a real-time edge, and (linearizability being local) every such cycle
  also shows as a violation of some object: the graph explains, in the
  vocabulary of isolation anomalies, what the per-object search found. Two
  writes that installed the same version are a ``lost-update``; a read of
  a version no write installed is an ``unwritten-read``. A key that was
  cleared (its revisions start again) is left out of the graph.
"""
from __future__ import annotations

import bisect
import math
from typing import Callable, Hashable, Iterable, Mapping, Protocol, Sequence

import attrs
from sim.lazy import lazy_import

nx = lazy_import("networkx")  # imported at first use: only the dependency graphs need it

__all__ = [
    "BUDGET_STEPS_DEFAULT",
    "UNKNOWN",
    "Anomaly",
    "Failed",
    "FencedLogModel",
    "HistoryVerdict",
    "LaneEpochModel",
    "LeaseModel",
    "LogModel",
    "ObjectVerdict",
    "Op",
    "RegisterModel",
    "SequentialModel",
    "SubmissionLeaseModel",
    "anomalies_in",
    "check_history",
    "check_object",
    "dependency_graph",
    "find_anomalies",
]

# Steps of the search per object before its verdict is "unknown: too costly".
BUDGET_STEPS_DEFAULT = 200_000
# Operations named in one violation's or anomaly's message; the rest are counted.
DESCRIBED_OPS_MAX = 12
# Shortest-path searches per anomaly class when naming the graph's cycles.
CYCLE_SEARCHES_MAX = 10_000


class _Unknown:
    """The answer of an operation whose caller never saw one."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNKNOWN"

    def __reduce__(self) -> str:
        return "UNKNOWN"


UNKNOWN = _Unknown()


@attrs.frozen
class Failed:
    """A typed error the caller saw, by name. ``actual``: the version the
    error reported (a conflict's stored revision or tail), when it did. An
    error other than the one a model's rule names (a conflict, a lost
    ownership) is a refusal: the call changed nothing and saw nothing."""

    error: str
    actual: int | None = None


@attrs.frozen
class Op:
    """One operation as its caller saw it. ``complete_ms`` is None exactly
    when the answer is ``UNKNOWN`` (its completion is at +infinity)."""

    op_id: int
    process: str
    key: str
    name: str
    args: tuple
    invoke_ms: int
    complete_ms: int | None
    answer: object

    def __attrs_post_init__(self) -> None:
        assert (self.complete_ms is None) == (self.answer is UNKNOWN), self
        assert self.complete_ms is None or self.complete_ms >= self.invoke_ms, self

    @property
    def end_ms(self) -> float:
        return math.inf if self.complete_ms is None else self.complete_ms

    def describe(self) -> str:
        args = ", ".join(repr(arg) for arg in self.args)
        end = "?" if self.complete_ms is None else str(self.complete_ms)
        return f"#{self.op_id} {self.process} {self.key}.{self.name}({args}) -> {self.answer!r} [{self.invoke_ms}, {end}]"


def _describe_ops(ops: Iterable[Op]) -> str:
    ops = list(ops)
    lines = [f"  {o.describe()}" for o in ops[:DESCRIBED_OPS_MAX]]
    if len(ops) > DESCRIBED_OPS_MAX:
        lines.append(f"  ... and {len(ops) - DESCRIBED_OPS_MAX} more")
    return "\n".join(lines)


class SequentialModel(Protocol):
    """One object kind's sequential model (see the module docstring).

    ``installs(op)``: the versions ``(before, after]`` a write installed as
    its caller saw it (None: not a write, or it did not take effect);
    ``could_install(op)``: the same for an ``UNKNOWN`` write had it taken
    effect; ``observes(op)``: ``(version, exact)`` a read saw (exact: it saw
    the latest version, not only a prefix); ``resets``: operation names
    after which versions start again (the graph leaves such keys out)."""

    kind: str
    resets: frozenset

    def init(self) -> Hashable: ...

    def step(self, state: Hashable, op: Op) -> Hashable | None: ...

    def installs(self, op: Op) -> tuple[int, int] | None: ...

    def could_install(self, op: Op) -> tuple[int, int] | None: ...

    def observes(self, op: Op) -> tuple[int, bool] | None: ...


class RegisterModel:
    """A durable-state key: ``(revision, value)``, revision 0 when absent.

    ``read()`` answers None (absent) or ``(revision, value)``;
    ``cas(expected_revision, value)`` answers the new revision
    ``expected_revision + 1`` when the stored one is ``expected_revision``,
    else ``Failed("RevisionConflictError", actual)`` and changes nothing;
    ``clear()`` answers None and the key is absent again."""

    kind = "durable-state"
    CONFLICT = "RevisionConflictError"
    resets = frozenset({"clear"})

    def init(self) -> tuple:
        return (0, None)

    def step(self, state: tuple, op: Op) -> tuple | None:
        revision, value = state
        answer = op.answer
        if isinstance(answer, Failed) and answer.error != self.CONFLICT:
            return state  # refused (a typed error not the rule's own): changed nothing, saw nothing
        if op.name == "read":
            if answer is UNKNOWN:
                return state
            return state if answer == (None if revision == 0 else (revision, value)) else None
        if op.name == "cas":
            expected, new_value = op.args
            if answer is UNKNOWN:
                return (expected + 1, new_value) if expected == revision else state
            if isinstance(answer, Failed):
                if expected == revision or answer.actual not in (None, revision):
                    return None
                return state
            return (expected + 1, new_value) if expected == revision and answer == expected + 1 else None
        if op.name == "clear":
            return (0, None) if answer is UNKNOWN or answer is None else None
        raise ValueError(f"durable-state has no operation {op.name!r}")

    def installs(self, op: Op) -> tuple[int, int] | None:
        if op.name == "cas" and isinstance(op.answer, int) and not isinstance(op.answer, bool):
            return (op.answer - 1, op.answer)
        return None

    def could_install(self, op: Op) -> tuple[int, int] | None:
        if op.name == "cas" and op.answer is UNKNOWN:
            return (op.args[0], op.args[0] + 1)
        return None

    def observes(self, op: Op) -> tuple[int, bool] | None:
        if op.name == "read" and op.answer is not UNKNOWN:
            return (0, True) if op.answer is None else (op.answer[0], True)
        if op.name == "cas" and isinstance(op.answer, Failed) and op.answer.actual is not None:
            return (op.answer.actual, True)
        return None


class LogModel:
    """A conversation log: the tuple of its entries (seq n is entry n-1).

    ``append(expected_tail_seq, entries)`` answers the first seq
    ``expected_tail_seq + 1`` when the tail is ``expected_tail_seq``, else
    ``Failed("AppendConflict", actual)`` and changes nothing;
    ``read(after_seq, limit)`` answers the entries after ``after_seq``, at
    most ``limit``; ``tail()`` answers the tail seq."""

    kind = "conversation-log"
    CONFLICT = "AppendConflict"
    resets = frozenset()

    def init(self) -> tuple:
        return ()

    def step(self, state: tuple, op: Op) -> tuple | None:
        answer = op.answer
        if isinstance(answer, Failed) and answer.error != self.CONFLICT:
            return state  # refused: changed nothing, saw nothing
        if op.name == "read":
            after_seq, limit = op.args
            if answer is UNKNOWN:
                return state
            return state if answer == state[after_seq:after_seq + limit] else None
        if op.name == "tail":
            return state if answer is UNKNOWN or answer == len(state) else None
        if op.name == "append":
            expected, entries = op.args
            assert entries, op
            if answer is UNKNOWN:
                return state + tuple(entries) if expected == len(state) else state
            if isinstance(answer, Failed):
                if expected == len(state) or answer.actual not in (None, len(state)):
                    return None
                return state
            return state + tuple(entries) if expected == len(state) and answer == expected + 1 else None
        raise ValueError(f"conversation-log has no operation {op.name!r}")

    def installs(self, op: Op) -> tuple[int, int] | None:
        if op.name == "append" and isinstance(op.answer, int) and not isinstance(op.answer, bool):
            return (op.answer - 1, op.answer - 1 + len(op.args[1]))
        return None

    def could_install(self, op: Op) -> tuple[int, int] | None:
        if op.name == "append" and op.answer is UNKNOWN:
            return (op.args[0], op.args[0] + len(op.args[1]))
        return None

    def observes(self, op: Op) -> tuple[int, bool] | None:
        if op.answer is UNKNOWN:
            return None
        if op.name == "read":
            after_seq, limit = op.args
            if not op.answer:
                # nothing after after_seq: the tail is at most there, which
                # names a version only when the read began at the start
                return (0, True) if after_seq == 0 else None
            return (after_seq + len(op.answer), len(op.answer) < limit)
        if op.name == "tail":
            return (op.answer, True)
        if op.name == "append" and isinstance(op.answer, Failed) and op.answer.actual is not None:
            return (op.answer.actual, True)
        return None


class LeaseModel:
    """One submission's ownership in the ledger: ``(epoch, owner,
    lease_expires_ms, released, settled)``, epoch 0 before any claim.

    ``claim(owner, lease_ms, now_ms)`` answers the new epoch when the
    submission is claimable — unsettled, and never claimed, released, its
    lease lapsed (live while ``now_ms < lease_expires_ms``), or held by the
    same owner — else None (nothing claimable). ``renew(owner, epoch,
    lease_ms, now_ms)``, ``release(owner, epoch)`` and ``settle(owner,
    epoch)`` are fenced by the token alone, not by the clock: with the
    current owner and epoch, not released, they answer None (renew extends
    the lease; settle marks it settled, and settling again replays), else
    ``Failed("OwnershipLost", actual)`` and change nothing. The clock is
    the caller's ``now_ms`` argument, so the model stays a function of
    its operations."""

    kind = "submission-lease"
    LOST = "OwnershipLost"
    resets = frozenset()

    def init(self) -> tuple:
        return (0, None, 0, False, False)

    def step(self, state: tuple, op: Op) -> tuple | None:
        epoch, owner, expires_ms, released, settled = state
        answer = op.answer
        if isinstance(answer, Failed) and answer.error != self.LOST:
            return state  # refused: changed nothing, saw nothing
        if op.name == "claim":
            claimer, lease_ms, now_ms = op.args
            claimable = not settled and (owner is None or released or now_ms >= expires_ms or owner == claimer)
            after = (epoch + 1, claimer, now_ms + lease_ms, False, False) if claimable else state
            if answer is UNKNOWN:
                return after
            if answer is None:
                return state if not claimable else None
            return after if claimable and answer == epoch + 1 else None
        if op.name in ("renew", "release", "settle"):
            holder, held_epoch = op.args[:2]
            current = holder == owner and held_epoch == epoch and epoch > 0 and not released
            if op.name == "renew":
                after = (epoch, owner, op.args[3] + op.args[2], False, settled)
            elif op.name == "release":
                after = (epoch, owner, expires_ms, True, settled)
            else:
                after = (epoch, owner, expires_ms, False, True)
            if answer is UNKNOWN:
                return after if current else state
            if isinstance(answer, Failed):
                return state if not current and answer.actual in (None, epoch) else None
            return after if current and answer is None else None
        raise ValueError(f"submission-lease has no operation {op.name!r}")

    def installs(self, op: Op) -> tuple[int, int] | None:
        if op.name == "claim" and isinstance(op.answer, int) and not isinstance(op.answer, bool):
            return (op.answer - 1, op.answer)
        return None

    def could_install(self, op: Op) -> tuple[int, int] | None:
        return None  # an unanswered claim's epoch is unknown

    def observes(self, op: Op) -> tuple[int, bool] | None:
        if op.name in ("renew", "release", "settle") and op.answer is not UNKNOWN:
            if op.answer is None:
                return (op.args[1], True)  # the token's epoch was the current one
            if isinstance(op.answer, Failed) and op.answer.actual is not None:
                return (op.answer.actual, True)
        return None


class FencedLogModel:
    """The conversation log as its port answers (``FencedLogModel`` beside
    the simpler ``LogModel``): a producer's epoch fences every append, a
    batch id names one batch for good (an exact retry replays it), record
    ids are unique, and the conversation can be deleted whole.

    State ``(producer, epoch, node)``: ``producer`` None while the
    conversation does not exist; ``node`` the log's entries, interned in
    this model instance's trie (node 0 is the empty log; each node is one
    entry ``(batch_id, record_id, value)`` on its parent), so that a state
    is a small tuple whatever the log's length and two branches of the
    search share their common prefix. Build one instance per object.

    - ``materialize(producer, epoch)`` answers None: creates the log, or
      a higher epoch takes it over, or the same producer and epoch is a
      no-op; else ``Failed("FenceRejected", current epoch)``.
    - ``append(epoch, expected_tail_seq, batch_id, entries)`` answers the
      first seq: ``Failed("NotMaterialized")`` with no log;
      ``Failed("FenceRejected", epoch)`` for another epoch; a batch id
      already in the log replays its first seq when the request is the
      same batch from the same expected tail, else is
      ``Failed("AppendConflict:batch-digest")`` (which is accepted for
      what looks like a replay too: the model keeps no digests, and the
      digest decides); ``Failed("AppendConflict:tail", tail)`` when
      the expected tail is not the tail (or, at the tail's seq, when its
      digest was not: accepted with the tail unchanged);
      ``Failed("AppendConflict:record-identity")`` for a record id twice
      in the batch or already in the log; else ``tail + 1``.
    - ``read(after_seq, limit)`` answers the entries after ``after_seq``,
      at most ``limit`` (``Failed("NotMaterialized")`` with no log).
    - ``tail()`` answers ``(tail_seq, epoch)``.
    - ``delete()`` answers whether there was a log; there is none after.

    Any other ``Failed`` is a refusal: nothing changed, nothing seen."""

    kind = "conversation-log"
    NOT_MATERIALIZED = "NotMaterialized"
    FENCED = "FenceRejected"
    BATCH_CONFLICT = "AppendConflict:batch-digest"
    TAIL_CONFLICT = "AppendConflict:tail"
    IDENTITY_CONFLICT = "AppendConflict:record-identity"
    CHECKED = frozenset({NOT_MATERIALIZED, FENCED, BATCH_CONFLICT, TAIL_CONFLICT, IDENTITY_CONFLICT})
    resets = frozenset({"delete"})

    def __init__(self) -> None:
        # node -> (parent, entry, depth, jump): ``jump`` a skew-binary
        # ancestor pointer, so the ancestor at a depth is O(log n) away.
        self._nodes: list[tuple[int, tuple, int, int]] = [(0, (), 0, 0)]
        self._child: dict[tuple[int, tuple], int] = {}
        self._batch_nodes: dict[str, list[int]] = {}  # batch id -> the nodes of its first entry
        self._record_nodes: dict[str, list[int]] = {}  # record id -> the nodes holding it

    def _extend(self, node: int, entry: tuple) -> int:
        found = self._child.get((node, entry))
        if found is not None:
            return found
        _, _, depth, jump = self._nodes[node]
        jump_depth = self._nodes[jump][2]
        if node and depth - jump_depth == jump_depth - self._nodes[self._nodes[jump][3]][2]:
            jump = self._nodes[jump][3]
        else:
            jump = node
        new = len(self._nodes)
        self._nodes.append((node, entry, depth + 1, jump))
        self._child[(node, entry)] = new
        batch_id, record_id, _ = entry
        if self._nodes[node][1][:1] != (batch_id,):
            self._batch_nodes.setdefault(batch_id, []).append(new)
        self._record_nodes.setdefault(record_id, []).append(new)
        return new

    def _ancestor(self, node: int, depth: int) -> int:
        """The ancestor of ``node`` at ``depth`` (<= its own)."""
        while self._nodes[node][2] > depth:
            _, _, _, jump = self._nodes[node]
            node = jump if self._nodes[jump][2] >= depth else self._nodes[node][0]
        return node

    def _holds(self, node: int, candidate: int) -> bool:
        depth = self._nodes[candidate][2]
        return depth <= self._nodes[node][2] and self._ancestor(node, depth) == candidate

    def entries(self, node: int, after_seq: int, limit: int) -> tuple:
        """The entries after ``after_seq`` in the log at ``node``, at most ``limit``."""
        depth = self._nodes[node][2]
        if after_seq >= depth:
            return ()
        node = self._ancestor(node, min(depth, after_seq + limit))
        out = []
        while self._nodes[node][2] > after_seq:
            out.append(self._nodes[node][1])
            node = self._nodes[node][0]
        return tuple(reversed(out))

    def init(self) -> tuple:
        return (None, 0, 0)

    def step(self, state: tuple, op: Op) -> tuple | None:
        producer, epoch, node = state
        answer = op.answer
        if isinstance(answer, Failed) and answer.error not in self.CHECKED:
            return state  # refused: changed nothing, saw nothing
        tail = self._nodes[node][2]
        name = op.name
        if name == "read":
            after_seq, limit = op.args
            if answer is UNKNOWN:
                return state
            if producer is None:
                return state if answer == Failed(self.NOT_MATERIALIZED) else None
            return state if answer == self.entries(node, after_seq, limit) else None
        if name == "tail":
            if answer is UNKNOWN:
                return state
            if producer is None:
                return state if answer == Failed(self.NOT_MATERIALIZED) else None
            return state if answer == (tail, epoch) else None
        if name == "delete":
            if answer is UNKNOWN or answer == (producer is not None):
                return (None, 0, 0)
            return None
        if name == "materialize":
            claimer, claimed = op.args
            if producer is None or claimed > epoch:
                after = (claimer, claimed, node if producer is not None else 0)
            elif claimed == epoch and claimer == producer:
                after = state
            else:
                after = None  # fenced
            if answer is UNKNOWN:
                return state if after is None else after
            if isinstance(answer, Failed):
                return state if after is None and answer.error == self.FENCED and answer.actual in (
                    None, epoch) else None
            return after if after is not None and answer is None else None
        if name == "append":
            claimed, expected, batch_id, entries = op.args
            assert entries, op
            verdict, after = self._append(state, claimed, expected, batch_id, entries)
            if answer is UNKNOWN:
                return after if verdict == "fresh" else state
            if verdict == "batch":
                replay = self._replay(node, expected, batch_id, entries)
                if answer == Failed(self.BATCH_CONFLICT) or (replay is not None and answer == replay):
                    return state
                return None
            if isinstance(answer, Failed):
                if answer.error == self.TAIL_CONFLICT and verdict == "fresh" and answer.actual == tail:
                    return state  # at the tail's seq, but not its digest
                if isinstance(verdict, Failed) and answer.error == verdict.error and answer.actual in (
                        None, verdict.actual):
                    return state
                return None
            return after if verdict == "fresh" and answer == tail + 1 else None
        raise ValueError(f"conversation-log has no operation {name!r}")

    def _append(self, state: tuple, claimed: int, expected: int, batch_id: str, entries: tuple
                ) -> tuple[object, tuple | None]:
        """(``"fresh"`` and the state after, ``"batch"`` (the batch id is
        there) and None, or the refusal it must be and None)."""
        producer, epoch, node = state
        if producer is None:
            return Failed(self.NOT_MATERIALIZED), None
        if claimed != epoch:
            return Failed(self.FENCED, epoch), None
        if any(self._holds(node, first) for first in self._batch_nodes.get(batch_id, ())):
            return "batch", None
        tail = self._nodes[node][2]
        if expected != tail:
            return Failed(self.TAIL_CONFLICT, tail), None
        ids = [entry[1] for entry in entries]
        if len(set(ids)) != len(ids) or any(self._holds(node, held) for record_id in ids
                                            for held in self._record_nodes.get(record_id, ())):
            return Failed(self.IDENTITY_CONFLICT), None
        after = node
        for entry in entries:
            after = self._extend(after, entry)
        return "fresh", (producer, epoch, after)

    def _replay(self, node: int, expected: int, batch_id: str, entries: tuple) -> int | None:
        """The first seq a replay of this batch answers, or None when the
        request is not the batch in the log (its content or its tail)."""
        for first in self._batch_nodes.get(batch_id, ()):
            if not self._holds(node, first):
                continue
            first_seq = self._nodes[first][2]
            if first_seq != expected + 1 or self.entries(node, expected, len(entries)) != tuple(entries):
                return None
            following = self.entries(node, expected + len(entries), 1)
            return first_seq if not following or following[0][0] != batch_id else None
        return None

    def installs(self, op: Op) -> tuple[int, int] | None:
        if op.name == "append" and isinstance(op.answer, int) and not isinstance(op.answer, bool):
            return (op.answer - 1, op.answer - 1 + len(op.args[3]))
        return None

    def could_install(self, op: Op) -> tuple[int, int] | None:
        if op.name == "append" and op.answer is UNKNOWN:
            return (op.args[1], op.args[1] + len(op.args[3]))
        return None

    def observes(self, op: Op) -> tuple[int, bool] | None:
        if op.answer is UNKNOWN or isinstance(op.answer, Failed) and op.answer.actual is None:
            return None
        if op.name == "read" and not isinstance(op.answer, Failed):
            after_seq, limit = op.args
            if not op.answer:
                return (0, True) if after_seq == 0 else None
            return (after_seq + len(op.answer), len(op.answer) < limit)
        if op.name == "tail" and not isinstance(op.answer, Failed):
            return (op.answer[0], True)
        if op.name == "append" and isinstance(op.answer, Failed) and op.answer.error == self.TAIL_CONFLICT:
            return (op.answer.actual, True)
        return None


class SubmissionLeaseModel:
    """One submission's ownership as the ledger port answers
    (``SubmissionLeaseModel`` beside the simpler ``LeaseModel``): state
    ``(epoch, owner, lease_expires_ms, settled, ready)``, epoch 0 and owner
    None before any claim; owner None after a release or anything else that
    ends ownership; ``ready`` once its receipt went out.

    Differences from ``LeaseModel``, each the ledger contract's: the epoch
    counter is the submission's lane's, shared by its submissions, so a
    claim answers *some* higher epoch, not exactly the next; a renewal
    never shortens the lease (``max``); a release by the token that
    released already is an idempotent no-op; settling is not fenced (the
    fence is on the reservation before it) and nothing claims a settled
    submission.

    - ``ready()`` answers None: the submission may be claimed from now on
      (a repeat replays).
    - ``claim(owner, lease_ms, now_ms, epoch_if_taken)`` answers the new
      epoch; it is granted only when the submission is ready, unsettled and
      its owner is none, the claimer, or one whose lease lapsed (``now_ms >=
      lease_expires_ms``). ``epoch_if_taken``: for an UNKNOWN claim, the
      epoch it took had it taken effect (None for an answered one).
    - ``renew(owner, epoch, lease_ms, now_ms)``, ``fenced(owner, epoch)``
      (a call fenced by the token that changes no ownership) answer None
      when the token is current (its owner and epoch are the state's), else
      ``Failed("OwnershipLost", current epoch)``; renew extends the lease to
      ``max(lease_expires_ms, now_ms + lease_ms)``. No fenced call looks at
      the clock. ``fenced`` on a submission never claimed is not judged
      (an aborted queued submission's reservation needs no ownership).
    - ``release(owner, epoch)`` and ``end(owner, epoch)`` (a call that ends
      ownership: suspend, mark unknown) answer None when the token is
      current or was the last one and ownership ended already (a replay);
      they leave no owner.
    - ``settle()`` answers None; the submission is settled for good."""

    kind = "submission-lease"
    LOST = "OwnershipLost"
    resets = frozenset()

    def init(self) -> tuple:
        return (0, None, 0, False, False)

    def step(self, state: tuple, op: Op) -> tuple | None:
        epoch, owner, expires_ms, settled, ready = state
        answer = op.answer
        if isinstance(answer, Failed) and answer.error != self.LOST:
            return state  # refused: changed nothing, saw nothing
        name = op.name
        if name == "claim":
            claimer, lease_ms, now_ms, epoch_if_taken = op.args
            claimable = ready and not settled and (owner is None or owner == claimer or now_ms >= expires_ms)
            if answer is UNKNOWN:
                return (epoch_if_taken, claimer, now_ms + lease_ms, False, True) if (
                    claimable and epoch_if_taken is not None and epoch_if_taken > epoch) else state
            if isinstance(answer, Failed):
                return None  # a claim answers an epoch or nothing, never a lost ownership
            return (answer, claimer, now_ms + lease_ms, False, True) if claimable and answer > epoch else None
        if name == "settle":
            return (epoch, owner, expires_ms, True, ready) if answer is UNKNOWN or answer is None else None
        if name == "ready":
            return (epoch, owner, expires_ms, settled, True) if answer is UNKNOWN or answer is None else None
        if name not in ("renew", "fenced", "release", "end"):
            raise ValueError(f"submission-lease has no operation {name!r}")
        holder, held_epoch = op.args[:2]
        if name == "fenced" and epoch == 0:
            return state  # never claimed: granted or not by what the call asked (not ownership), unchecked
        current = owner is not None and holder == owner and held_epoch == epoch and epoch > 0
        granted = current
        if name == "end" and owner is None and held_epoch == epoch:
            return state  # ended already: a repeat replays or is refused by what it names, unchecked
        if name in ("release", "end"):
            granted = current or (owner is None and held_epoch == epoch and epoch > 0)
            after = (epoch, None, 0, settled, ready)
        elif name == "fenced":
            after = state
        else:
            lease_ms, now_ms = op.args[2:4]
            after = (epoch, owner, max(expires_ms, now_ms + lease_ms), settled, ready) if current else state
        if answer is UNKNOWN:
            return after if granted else state
        if isinstance(answer, Failed):
            return state if not granted and answer.actual in (None, epoch) else None
        return after if granted and answer is None else None

    def installs(self, op: Op) -> tuple[int, int] | None:
        return None  # a lane's epochs skip: no total order of versions per submission to draw

    def could_install(self, op: Op) -> tuple[int, int] | None:
        return None

    def observes(self, op: Op) -> tuple[int, bool] | None:
        return None


class LaneEpochModel:
    """A conversation's lane in the ledger: the epochs its claims grant,
    whichever submission each claim grants. State: the last epoch granted
    (0 before any). ``claim(epoch_if_taken)`` answers an epoch above every
    one granted before (the lane's counter only grows, so no two claims of
    a lane ever hold one epoch: the fence the log relies on);
    ``epoch_if_taken``: for an UNKNOWN claim, the epoch it took had it
    taken effect."""

    kind = "lane-epoch"
    resets = frozenset()

    def init(self) -> int:
        return 0

    def step(self, state: int, op: Op) -> int | None:
        if op.name != "claim":
            raise ValueError(f"lane-epoch has no operation {op.name!r}")
        answer = op.answer
        if isinstance(answer, Failed):
            return state  # refused: changed nothing
        if answer is UNKNOWN:
            taken = op.args[0]
            return taken if taken is not None and taken > state else state
        return answer if answer > state else None

    def installs(self, op: Op) -> tuple[int, int] | None:
        return None  # epochs skip (one per claim of any submission): no versions to chain

    def could_install(self, op: Op) -> tuple[int, int] | None:
        return None

    def observes(self, op: Op) -> tuple[int, bool] | None:
        return None


# --- the per-object search --------------------------------------------------------


@attrs.frozen
class ObjectVerdict:
    """``outcome``: ``ok``, ``violation`` or ``unknown`` (the search ran out
    of its step budget). ``window``: a violation's operations, invocation
    order; ``order``: an ok verdict's linearization (op ids)."""

    key: str
    kind: str
    outcome: str
    ops: int
    steps: int
    window: tuple[Op, ...] = ()
    order: tuple[int, ...] = ()

    def describe(self) -> str:
        if self.outcome == "ok":
            return f"{self.kind} {self.key!r}: linearizable ({self.ops} ops, {self.steps} steps)"
        if self.outcome == "unknown":
            return (f"{self.kind} {self.key!r}: unknown: too costly ({self.ops} ops, the search passed its "
                    f"budget of {self.steps} steps)")
        last = max(self.window, key=lambda o: (o.end_ms, o.op_id))
        return (f"{self.kind} {self.key!r} is not linearizable: the shortest prefix that is not ends with "
                f"#{last.op_id}'s answer; its {len(self.window)} operations:\n{_describe_ops(self.window)}")


_CALL, _RETURN = 0, 1


def _search(ops: Sequence[Op], model: SequentialModel, budget_steps: int) -> tuple[str, int, tuple[int, ...]]:
    """Wing–Gong–Lowe over the call/return entries in time order, kept in a
    doubly linked list so that linearizing an operation lifts its two
    entries out and backtracking puts them back (dancing links). Returns
    (outcome, steps, linearization as op ids)."""
    events = sorted((o.invoke_ms, _CALL, i) if half == 0 else (o.end_ms, _RETURN, i)
                    for i, o in enumerate(ops) for half in (0, 1))
    # node 0 is the head; node k (1..m) is events[k-1]; node m+1 the end.
    m = len(events)
    end = m + 1
    nxt = list(range(1, m + 2)) + [end]
    prv = [0] + list(range(0, m + 1))
    call_node = [0] * len(ops)
    return_node = [0] * len(ops)
    for node, (_, half, i) in enumerate(events, start=1):
        if half == _CALL:
            call_node[i] = node
        else:
            return_node[i] = node
    known = [o.answer is not UNKNOWN for o in ops]
    known_left = sum(known)
    state = model.init()
    linearized = 0
    seen: set[tuple[int, Hashable]] = set()
    stack: list[tuple[int, Hashable]] = []
    steps = 0
    node = nxt[0]
    while known_left:
        steps += 1
        if steps > budget_steps:
            return "unknown", budget_steps, ()
        assert node != end, "a known operation's return is always ahead of the end"
        _, half, i = events[node - 1]
        if half == _CALL:
            after = model.step(state, ops[i])
            if after is not None:
                bits = linearized | (1 << i)
                if (bits, after) not in seen:
                    seen.add((bits, after))
                    stack.append((i, state))
                    state, linearized = after, bits
                    for lift in (call_node[i], return_node[i]):
                        nxt[prv[lift]] = nxt[lift]
                        prv[nxt[lift]] = prv[lift]
                    known_left -= known[i]
                    node = nxt[0]
                    continue
            node = nxt[node]
            continue
        # The return of an operation not yet linearized: nothing later can
        # go before it, so undo the last choice and try the next one.
        if not known[i] or not stack:
            return "violation", steps, ()
        i, state = stack.pop()
        linearized &= ~(1 << i)
        known_left += known[i]
        for lift in (return_node[i], call_node[i]):
            nxt[prv[lift]] = lift
            prv[nxt[lift]] = lift
        node = nxt[call_node[i]]
    return "ok", steps, tuple(ops[i].op_id for i, _ in stack)


def _prefix(ops: Sequence[Op], by_completion: Sequence[Op], count: int) -> list[Op]:
    """The history as it stood when the ``count``-th answer came back: the
    answers seen so far, every other operation already invoked as UNKNOWN."""
    cutoff_ms = by_completion[count - 1].complete_ms
    answered = {o.op_id for o in by_completion[:count]}
    prefix = []
    for o in ops:
        if o.op_id in answered:
            prefix.append(o)
        elif o.invoke_ms <= cutoff_ms:
            prefix.append(attrs.evolve(o, complete_ms=None, answer=UNKNOWN))
    return prefix


def check_object(ops: Sequence[Op], model: SequentialModel, key: str,
                 budget_steps: int = BUDGET_STEPS_DEFAULT) -> ObjectVerdict:
    """One object's verdict. A violation's window is found by bisecting on
    the prefixes (a prefix that is not linearizable stays so as answers
    are added), each search within the same budget."""
    assert budget_steps > 0, budget_steps
    ops = sorted(ops, key=lambda o: (o.invoke_ms, o.op_id))
    outcome, steps, order = _search(ops, model, budget_steps)
    if outcome != "violation":
        return ObjectVerdict(key, model.kind, outcome, len(ops), steps, order=order)
    by_completion = sorted((o for o in ops if o.complete_ms is not None), key=lambda o: (o.complete_ms, o.op_id))
    low, high = 1, len(by_completion)  # the whole history fails; find the first prefix that does
    while low < high:
        middle = (low + high) // 2
        if _search(_prefix(ops, by_completion, middle), model, budget_steps)[0] == "violation":
            high = middle
        else:
            low = middle + 1
    answered = {o.op_id for o in by_completion[:low]}
    window = tuple(o for o in ops if o.op_id in answered)
    return ObjectVerdict(key, model.kind, "violation", len(ops), steps, window=window)


@attrs.frozen
class HistoryVerdict:
    """Every object's verdict (by key) and the dependency graph's anomalies.
    ``outcome``: ``violation`` when any object is not linearizable, else
    ``unknown`` when any object's search ran out, else ``ok``."""

    objects: tuple[ObjectVerdict, ...]
    anomalies: tuple[Anomaly, ...] = ()

    @property
    def outcome(self) -> str:
        outcomes = {v.outcome for v in self.objects}
        if "violation" in outcomes:
            return "violation"
        return "unknown" if "unknown" in outcomes else "ok"

    def describe(self) -> str:
        lines = [v.describe() for v in self.objects if v.outcome != "ok"]
        lines += [a.describe() for a in self.anomalies]
        return "\n".join(lines) if lines else f"linearizable ({len(self.objects)} objects)"


ModelOf = Callable[[str], SequentialModel]


def _model_lookup(models: ModelOf | Mapping[str, SequentialModel]) -> ModelOf:
    return models.__getitem__ if isinstance(models, Mapping) else models


def _by_key(history: Iterable[Op]) -> dict[str, list[Op]]:
    groups: dict[str, list[Op]] = {}
    for o in history:
        groups.setdefault(o.key, []).append(o)
    return {key: groups[key] for key in sorted(groups)}


def check_history(history: Sequence[Op], models: ModelOf | Mapping[str, SequentialModel],
                  budget_steps: int = BUDGET_STEPS_DEFAULT, anomalies: bool = False) -> HistoryVerdict:
    """Each object alone (by key, in key order); ``anomalies``: also the
    dependency graph's."""
    ids = [o.op_id for o in history]
    assert len(set(ids)) == len(ids), "op ids are unique"
    model_of = _model_lookup(models)
    verdicts = tuple(check_object(ops, model_of(key), key, budget_steps) for key, ops in _by_key(history).items())
    found = tuple(find_anomalies(history, model_of)) if anomalies else ()
    return HistoryVerdict(verdicts, found)


# --- the dependency graph -------------------------------------------------------------

_WW, _WR, _RW, _RT = "ww", "wr", "rw", "rt"
# The weakest kind first: a pair joined by several kinds counts as the first.
_KIND_ORDER = (_WW, _WR, _RT, _RW)


@attrs.frozen
class Anomaly:
    """One anomaly the graph shows: its class, its operations and, for a
    cycle, its edges ``(from op id, to op id, kind)`` in cycle order."""

    name: str
    ops: tuple[Op, ...]
    edges: tuple[tuple[int, int, str], ...] = ()

    def describe(self) -> str:
        path = ""
        if self.edges:
            path = f" #{self.edges[0][0]}" + "".join(f" -{kind}-> #{b}" for _, b, kind in self.edges)
        return f"{self.name}:{path}\n{_describe_ops(self.ops)}"


def _add(graph: nx.DiGraph, a: int, b: int, kind: str) -> None:
    if a == b:
        return
    if graph.has_edge(a, b):
        graph[a][b]["kinds"] = graph[a][b]["kinds"] | {kind}
    else:
        graph.add_edge(a, b, kinds=frozenset({kind}))


def dependency_graph(history: Sequence[Op], models: ModelOf | Mapping[str, SequentialModel]
                     ) -> tuple[nx.DiGraph, list[Anomaly]]:
    """The graph over op ids (edge attribute ``kinds``), and the anomalies
    seen while building it (``lost-update``, ``unwritten-read``)."""
    model_of = _model_lookup(models)
    graph = nx.DiGraph()
    found: list[Anomaly] = []
    for o in history:
        graph.add_node(o.op_id)
    for key, ops in _by_key(history).items():
        model = model_of(key)
        if any(o.name in model.resets for o in ops):
            continue
        writers: dict[int, list[Op]] = {}  # the version before -> the writes that installed from it
        ranges: list[tuple[int, int, Op]] = []
        for o in ops:
            span = model.installs(o)
            if span is not None:
                writers.setdefault(span[0], []).append(o)
                ranges.append((span[0], span[1], o))
        for before in sorted(writers):
            if len(writers[before]) > 1:
                found.append(Anomaly("lost-update", tuple(writers[before])))
        for before, after, o in ranges:  # ww: the write whose version this one replaced
            for previous in (w for w in ranges if w[1] == before):
                _add(graph, previous[2].op_id, o.op_id, _WW)
        possible = [(span[0], span[1], o) for o in ops if (span := model.could_install(o)) is not None]
        for o in ops:
            seen = model.observes(o)
            if seen is None:
                continue
            version, exact = seen
            if version > 0:
                covering = [w for w in ranges if w[0] < version <= w[1]]
                if not covering:
                    covering = [w for w in possible if w[0] < version <= w[1]]
                    if not covering:
                        found.append(Anomaly("unwritten-read", (o,)))
                    elif len(covering) > 1:
                        covering = []  # which unknown write it saw is ambiguous: no edge
                for w in covering:
                    _add(graph, w[2].op_id, o.op_id, _WR)
            if exact:
                for w in writers.get(version, ()):
                    _add(graph, o.op_id, w.op_id, _RW)
    _add_real_time(graph, history)
    return graph, found


def _add_real_time(graph: nx.DiGraph, history: Sequence[Op]) -> None:
    """``a -> b`` when ``b`` was invoked after ``a`` completed, reduced: only
    to the ``b`` invoked before every such operation's completion (any later
    one follows one of those, transitively)."""
    by_invoke = sorted(history, key=lambda o: (o.invoke_ms, o.op_id))
    invokes = [o.invoke_ms for o in by_invoke]
    # the earliest completion among the operations invoked at or after position k
    earliest_end = [math.inf] * (len(by_invoke) + 1)
    for k in range(len(by_invoke) - 1, -1, -1):
        earliest_end[k] = min(earliest_end[k + 1], by_invoke[k].end_ms)
    for a in history:
        if a.complete_ms is None:
            continue
        start = bisect.bisect_right(invokes, a.complete_ms)
        frontier = earliest_end[start]
        for b in by_invoke[start:]:
            if b.invoke_ms > frontier:
                break
            _add(graph, a.op_id, b.op_id, _RT)


def _weakest(kinds: frozenset, allowed: frozenset) -> str | None:
    for kind in _KIND_ORDER:
        if kind in kinds and kind in allowed:
            return kind
    return None


def _restricted(graph: nx.DiGraph, allowed: frozenset) -> nx.DiGraph:
    sub = nx.DiGraph()
    for a, b, kinds in graph.edges(data="kinds"):
        if kinds & allowed:
            sub.add_edge(a, b)
    return sub


def _cycle_name(kinds: list[str]) -> str:
    rw = kinds.count(_RW)
    if rw == 0:
        base = "G1c" if _WR in kinds else "G0"
    else:
        base = "G-single" if rw == 1 else "G2"
    return base + ("-realtime" if _RT in kinds else "")


def anomalies_in(graph: nx.DiGraph, ops: Mapping[int, Op],
                 searches_max: int = CYCLE_SEARCHES_MAX) -> list[Anomaly]:
    """The cycles of ``graph``, each named by the fewest anti-dependencies
    it needs: through each write edge the shortest way back by write edges
    (``G0``), through each write-read edge and each anti-dependency the
    shortest way back without anti-dependencies (``G1c``, ``G-single``);
    ``G2`` a cycle in each strongly connected component none of those
    touched. First without
    real-time edges, then with them. Bounded: at most ``searches_max``
    path searches per class and pass, so the cost is polynomial."""
    assert searches_max > 0, searches_max
    found: list[Anomaly] = []
    named: set[tuple[frozenset, str]] = set()

    def report(cycle: list[tuple[int, int]], allowed: frozenset) -> frozenset:
        kinds = [_weakest(graph[a][b]["kinds"], allowed) for a, b in cycle]
        assert None not in kinds, cycle
        name = _cycle_name(kinds)
        nodes = frozenset(a for a, _ in cycle)
        if (nodes, name) not in named:
            named.add((nodes, name))
            found.append(Anomaly(name, tuple(ops[a] for a, _ in cycle),
                                 tuple((a, b, k) for (a, b), k in zip(cycle, kinds))))
        return nodes

    for with_rt in (False, True):
        extra = frozenset({_RT}) if with_rt else frozenset()
        write_only = frozenset({_WW}) | extra
        no_anti = frozenset({_WW, _WR}) | extra
        everything = no_anti | {_RW}
        covered: set[int] = set()
        for kind, back_kinds in ((_WW, write_only), (_WR, no_anti), (_RW, no_anti)):
            back_graph = _restricted(graph, back_kinds)
            allowed = back_kinds | {kind}
            searches = 0
            for a, b, kinds in sorted(graph.edges(data="kinds")):
                if _weakest(kinds, allowed) != kind or a not in back_graph or b not in back_graph:
                    continue
                searches += 1
                if searches > searches_max:
                    break
                try:
                    back = nx.shortest_path(back_graph, b, a)
                except nx.NetworkXNoPath:
                    continue
                covered |= report([(a, b)] + list(zip(back, back[1:])), allowed)
        full = _restricted(graph, everything)
        for component in sorted((c for c in nx.strongly_connected_components(full) if len(c) > 1), key=min):
            if component & covered:
                continue
            cycle = nx.find_cycle(full.subgraph(component), source=min(component))
            report(list(cycle), everything)
    return found


def find_anomalies(history: Sequence[Op], models: ModelOf | Mapping[str, SequentialModel]) -> list[Anomaly]:
    """The dependency graph's anomalies: version anomalies, then cycles."""
    graph, found = dependency_graph(history, models)
    ops = {o.op_id: o for o in history}
    return found + anomalies_in(graph, ops)
