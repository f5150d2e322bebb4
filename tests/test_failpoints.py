"""The peer implementation's coordinator failpoint locations (issue 29) as
the model's named failpoints, and the typed cause a fired failpoint carries
(the location).

Covered: each of the peer's 29 locations is a declared failpoint or is
listed not applicable with its reason; a clean agent run (model turns,
tools, an approval, a subagent, follow-ups joined, a compaction, an aborted
parent with a waiting child) reaches every declared point of the submission
lifecycle and of an agent's steps; a process that dies at any of them is
recovered by a successor (every submission settles, each step's effect at
most once where it is not idempotent); a fired failpoint's cause is
``FailpointFired`` naming the location.
"""
from __future__ import annotations

import pytest

from model import failpoints as fp
from model.agent import APPROVAL, MODEL, SUBAGENT, TOOL, TOOL_ONCE, AgentWorker
from model.conversation.memory_store import InMemoryConversationStore
from model.conversation.sqlite_store import SqliteConversationStore
from model.ledger.memory_store import InMemorySubmissionLedger
from model.ledger.records import UnreadableSubmission
from model.ledger.sqlite_store import SqliteSubmissionLedger
from model.sqlite_db import open_database
from model.submissions import SubmissionClient
from scenarios.storage import run_sync as drive

LEASE_MS = 30_000

PEER_LOCATIONS = (
    "submit:after-admit", "submit:after-materialize", "claim:after-claim", "input:after-canonical-append",
    "turn:after-canonical-append", "turn:after-response-append", "turn:after-results-append",
    "compaction:after-canonical-append", "tools:after-prepared-append", "step:after-step-append",
    "approval:after-request-append", "approval:after-suspend", "join:after-claim", "join:after-canonical-append",
    "resolve:after-intent", "terminalize:after-reserve", "terminalize:after-canonical-append", "abort:after-intent",
    *(f"subagent:{name}" for name in (
        "after-reserve", "after-request-append", "after-admit", "after-child-ready", "after-start-append",
        "after-sibling-settle", "after-suspend", "after-child-abort-intent", "after-join-append",
        "after-release-pending", "after-release")),
)
# Points a sentinel's runs pass and an agent's never do.
SENTINEL_ONLY = (fp.DURABLE_STATE_SAVE_AFTER_STORE_WRITE, fp.KERNEL_EFFECT_DONE_BEFORE_RECORD)
AGENT_POINTS = tuple(p for p in fp.ALL_FAILPOINTS if p not in SENTINEL_ONLY)


def test_every_peer_location_is_a_failpoint_or_not_applicable_with_a_reason():
    assert len(PEER_LOCATIONS) == len(set(PEER_LOCATIONS)) == 29
    for location in PEER_LOCATIONS:
        assert (location in fp.ALL_FAILPOINTS) != (location in fp.PEER_NOT_APPLICABLE), location
    assert set(fp.PEER_NOT_APPLICABLE) <= set(PEER_LOCATIONS)
    assert all(reason for reason in fp.PEER_NOT_APPLICABLE.values())
    assert len(set(fp.ALL_FAILPOINTS)) == len(fp.ALL_FAILPOINTS)  # one name per place


def test_a_fired_failpoint_is_typed_and_names_its_location():
    error = fp.FailpointFired("turn:after-response-append")
    assert isinstance(error, Exception) and error.name == "FailpointFired"
    assert error.location == "turn:after-response-append" and "turn:after-response-append" in str(error)


# --- a small world: agents carried to settlement, crash or not ---------------------------


class Died(BaseException):
    """The process died at a failpoint (a BaseException: nothing swallows it)."""

    def __init__(self, cause: fp.FailpointFired) -> None:
        super().__init__(cause.location)
        self.cause = cause


class Recording:
    def __init__(self) -> None:
        self.reached: list[str] = []

    def hit(self, name: str) -> None:
        self.reached.append(name)


class DieAt(Recording):
    """Dies at the ``nth`` hit of ``point``, once."""

    def __init__(self, point: str, nth: int = 1) -> None:
        super().__init__()
        self.point, self.nth, self.fired = point, nth, False

    def hit(self, name: str) -> None:
        super().hit(name)
        if name == self.point and not self.fired and self.reached.count(name) == self.nth:
            self.fired = True
            raise Died(fp.FailpointFired(name))


class Tools:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def invoke(self, call_id, tool, args, key, deadline_ms):
        self.calls.append(call_id)
        return {"tool": tool, "call": call_id}


class Model:
    async def stream(self, call, request):
        return [{"kind": "text", "text": f"answer to {call}"},
                {"kind": "completed", "usage": {"inputTokens": 1, "outputTokens": 1, "costMicros": 1}}]


class World:
    def __init__(self, kind, tmp_path, failpoints) -> None:
        self.conn = None
        if kind == "memory":
            self.ledger, self.log = InMemorySubmissionLedger(), InMemoryConversationStore()
        else:
            self.conn = open_database(str(tmp_path / "fp.db"))
            self.ledger, self.log = SqliteSubmissionLedger(self.conn), SqliteConversationStore(self.conn)
        self.failpoints = failpoints
        self.ms = 1_000
        self.tools = Tools()
        self.deaths = 0
        self.workers = 0
        self.conversations: set[str] = set()

    def now(self) -> int:
        self.ms += 1
        return self.ms

    def worker(self) -> AgentWorker:
        self.workers += 1
        return AgentWorker(self.ledger, self.log, f"w{self.workers}", lease_ms=LEASE_MS, now_ms=self.now,
                           tools=self.tools, model=Model(), model_profile={"provider": "p", "model": "m", "tier": "t"},
                           child_plan=lambda record, index: [MODEL], work=None, failpoints=self.failpoints)

    def submit(self, conversation, key, plan, **extra) -> str:
        self.conversations.add(conversation)
        client = SubmissionClient(self.ledger, self.log, now_ms=self.now, failpoints=self.failpoints)
        request = {"n": 1, "plan": plan, "maxDurationMs": 10 ** 9, **extra}
        for _ in range(3):  # at least once: a client that died retries under its key
            try:
                return drive(client.submit(conversation, "p", key, request)).submission_id
            except Died:
                self.deaths += 1
        raise AssertionError("the client never got its receipt")

    def abort(self, submission_id: str) -> None:
        """A client's abort; one that died after its intent is not retried
        (the intent is durable: a worker's scan or a recovery pass finishes it)."""
        client = SubmissionClient(self.ledger, self.log, now_ms=self.now, failpoints=self.failpoints)
        try:
            drive(client.abort(submission_id, "client", "no longer needed"))
        except Died:
            self.deaths += 1

    def open_rows(self) -> list:
        return [r for r in drive(self.ledger.scan_nonterminal()) if not isinstance(r, UnreadableSubmission)]

    def settle_all(self, rounds: int = 60) -> None:
        """Workers (one per round: a dead one's successor claims after its
        lease) and an approver that approves what waits, until nothing is open."""
        for _ in range(rounds):
            rows = self.open_rows()
            if not rows:
                return
            for row in rows:
                self.conversations.add(row.conversation_id)
                for call, decision in (row.approvals or {}).items():
                    if decision is None:
                        drive(self.ledger.decide_approval(row.submission_id, call, "approved", "operator", "ok",
                                                          self.now()))
            worker = self.worker()
            try:
                drive(worker.tend(tuple(drive(self.ledger.scan_nonterminal()))))
                for conversation in sorted(self.conversations):
                    drive(worker.process_next(conversation))
            except Died:
                self.deaths += 1
                self.ms += LEASE_MS + 1  # the dead owner's lease runs out
        raise AssertionError(f"still open: {self.open_rows()}")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


def workload(world: World) -> None:
    """Every step kind, follow-ups joined, a long conversation (compaction)
    and an aborted parent whose child waits."""
    world.submit("c1", "k1", [MODEL, TOOL, TOOL_ONCE, APPROVAL, SUBAGENT, MODEL], joins=True)
    world.submit("c1", "k2", [MODEL])  # a follow-up, joined by k1's run
    world.submit("c2", "k1", [MODEL] * 14)  # past a compaction bucket
    world.settle_all()
    parent = world.submit("c3", "k1", [SUBAGENT, MODEL])
    worker = world.worker()
    try:
        drive(worker.process_next("c3"))  # parked on its child
    except Died:
        world.deaths += 1
        world.ms += LEASE_MS + 1
    drive(world.ledger.request_abort(parent, "operator", "stop it", world.now()))
    world.settle_all()
    # A queued submission aborted while its lane's head runs.
    world.submit("c4", "k1", [MODEL, MODEL])
    queued = world.submit("c4", "k2", [MODEL])
    head = world.worker()
    claim = drive(world.ledger.claim("c4", head.owner_id, LEASE_MS, world.now()))
    drive(head.lifecycle.take_over("c4", claim))
    world.abort(queued)
    world.ms += LEASE_MS + 1  # the head's owner went away
    world.settle_all()


@pytest.fixture(params=["memory", "sqlite"])
def kind(request):
    return request.param


def test_a_clean_agent_run_reaches_every_declared_point(kind, tmp_path):
    recording = Recording()
    world = World(kind, tmp_path, recording)
    try:
        workload(world)
    finally:
        world.close()
    assert world.deaths == 0
    missing = [p for p in AGENT_POINTS if p not in recording.reached]
    assert not missing, missing


@pytest.mark.parametrize("point", AGENT_POINTS)
def test_a_process_that_dies_at_a_point_is_recovered(point, kind, tmp_path):
    dying = DieAt(point)
    world = World(kind, tmp_path, dying)
    try:
        workload(world)
        assert dying.fired and world.deaths == 1, (point, world.deaths)
        assert not world.open_rows()
        # A non-idempotent tool call is never made twice on a guess.
        once = [c for c in world.tools.calls if c.count("/s2.") and c.endswith(".0")]
        assert len(once) == len(set(once))
    finally:
        world.close()


# --- in simulation: a failpoint kills its node, and says where ------------------------------


def test_a_simulated_failpoint_crash_carries_its_location():
    """A failpoint only ever kills its process in loomsim: the crash's cause
    is ``FailpointFired`` naming the location, and the recorded fault event's
    site is that location."""
    from faults.kinds import FAILPOINT_CRASH
    from faults.plan import FaultPlan
    from faults.ports import SimFailpoints
    from sim.node import NodeCrashed
    from sim.world import World as SimWorld

    world = SimWorld(0)
    plan = FaultPlan(world, rates={FAILPOINT_CRASH: 1.0}, heal_at_ms=10 ** 9)
    seen: list = []

    def start(node):
        failpoints = SimFailpoints(world, node, plan, lambda: 1_000)

        async def task():
            try:
                failpoints.hit(fp.TURN_RESPONSE_APPENDED)
            except NodeCrashed as crashed:
                seen.append(crashed.__cause__)
                raise

        world.runtime.spawn_on(node, "agent", task())

    node = world.add_node("w", start)
    world.run_until(10)
    assert not node.alive or seen
    (cause,) = seen
    assert isinstance(cause, fp.FailpointFired) and cause.location == fp.TURN_RESPONSE_APPENDED
    (event,) = [e for e in world.fault_events if e.kind == FAILPOINT_CRASH]
    assert event.site == fp.TURN_RESPONSE_APPENDED
