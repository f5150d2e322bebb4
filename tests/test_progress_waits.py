"""Progress waits (STORE-014): the runtime's park/wake latch, the wait's
order of operations, the ``progress-waits`` oracle on hand-made histories,
and the watchers in a short agent-conversations run on both stores."""
from __future__ import annotations

import pytest

from model.conversation.records import NotMaterialized
from model.progress import NotifyingLog, ProgressNotifier, wait_for_progress
from scenarios import registry
from scenarios.invariants.progress_waits import ProgressWaits
from sim.clock import parse_duration_ms
from sim.node import Node
from sim.runner import run
from sim.runtime import SimRuntime
from sim.scenario import ScenarioOptions
from sim.trace import Trace

# -- the primitive (sim.runtime.SimEvent) ------------------------------------------------


def _runtime_and_node():
    runtime = SimRuntime()
    return runtime, Node("n1")


def test_a_set_before_the_wait_is_latched_and_the_wait_returns_at_once():
    runtime, node = _runtime_and_node()
    event = runtime.event()
    seen = []

    async def waiter():
        event.set()
        seen.append((await event.wait_until_ms(60_000), runtime.now_ms()))

    runtime.spawn_on(node, "w", waiter())
    runtime.run(120_000)
    assert seen == [(True, 0)]


def test_a_set_wakes_the_parked_task_now_and_its_deadline_entry_is_gone():
    runtime, node = _runtime_and_node()
    event = runtime.event()
    seen = []

    async def waiter():
        seen.append((await event.wait_until_ms(60_000), runtime.now_ms()))

    async def waker():
        await runtime.sleep_ms(1_000)
        event.set()
        event.set()  # idempotent

    runtime.spawn_on(node, "w", waiter())
    runtime.spawn_on(Node("n2"), "k", waker())
    runtime.run(120_000)
    assert seen == [(True, 1_000)]
    assert runtime.idle() and not runtime._heap


def test_the_deadline_ends_an_unset_wait():
    runtime, node = _runtime_and_node()
    event = runtime.event()
    seen = []

    async def waiter():
        seen.append((await event.wait_until_ms(5_000), runtime.now_ms()))
        seen.append((await event.wait_until_ms(4_000), runtime.now_ms()))  # past: no park at all

    runtime.spawn_on(node, "w", waiter())
    runtime.run(120_000)
    assert seen == [(False, 5_000), (False, 5_000)] and not event.is_set()


def test_a_crash_drops_the_parked_task_and_a_later_set_wakes_nothing():
    runtime, node = _runtime_and_node()
    event = runtime.event()
    closed = []

    async def waiter():
        try:
            await event.wait_until_ms(10 * 60_000)
        finally:
            closed.append(runtime.now_ms())

    task = runtime.spawn_on(node, "w", waiter())
    runtime.run(1_000)
    assert task.parked_on is event and len(runtime._heap) == 1
    runtime.crash_node(node)
    assert closed == [1_000] and task.parked_on is None and not runtime._heap  # dropped, not left to its deadline
    event.set()
    assert not runtime._heap and not task.alive
    runtime.run(20 * 60_000)
    assert closed == [1_000]


def test_two_waiters_on_one_event_are_refused():
    runtime, node = _runtime_and_node()
    event = runtime.event()

    async def waiter():
        await event.wait_until_ms(1_000)

    runtime.spawn_on(node, "a", waiter())
    runtime.spawn_on(node, "b", waiter())
    with pytest.raises(Exception, match="one waiter"):
        runtime.run(2_000)


# -- the wait's order of operations (fake log, real notifier) ---------------------------------


class _Record:
    def __init__(self, seq):
        self.seq = seq


class FakeLog:
    """A log whose reads are recorded in ``calls`` with the order log's length."""

    def __init__(self, calls, records=0, materialized=True):
        self.calls = calls
        self.records = records
        self.materialized = materialized
        self.on_read = None

    async def read(self, conversation_id, after_seq, limit):
        self.calls.append(("read", after_seq, limit))
        if not self.materialized:
            raise NotMaterialized(conversation_id)
        found = tuple(_Record(seq) for seq in range(after_seq + 1, min(self.records, after_seq + limit) + 1))
        if self.on_read is not None:
            hook, self.on_read = self.on_read, None
            hook()
        return found

    async def append(self, request):
        self.records += len(request.records)

        class Result:
            last_seq = self.records
        return Result()


class _Traced:
    """A registration whose park, resume and close land in ``calls``."""

    def __init__(self, inner, calls):
        self._inner = inner
        self._calls = calls
        self.registration_id = inner.registration_id

    @property
    def notified_seq(self):
        return self._inner.notified_seq

    async def park_until_ms(self, deadline_ms):
        self._calls.append(("park", deadline_ms))
        woken = await self._inner.park_until_ms(deadline_ms)
        self._calls.append(("resume", woken))
        return woken

    def rearm(self):
        self._inner.rearm()

    def close(self):
        self._calls.append(("close",))
        self._inner.close()


class RecordingNotifier(ProgressNotifier):
    def __init__(self, runtime, calls):
        super().__init__(runtime)
        self.calls = calls

    async def register(self, conversation_id):
        self.calls.append(("register", conversation_id))
        return _Traced(await super().register(conversation_id), self.calls)


def _wait(runtime, log, notifier, after_seq, **kwargs):
    out = []

    async def go():
        out.append(await wait_for_progress(log, notifier, runtime, "c", after_seq, reconnect_ms=300_000, **kwargs))
        out.append(runtime.now_ms())  # when it returned

    runtime.spawn_on(Node("watcher"), "wait", go())
    return out


def test_a_record_already_there_returns_at_once_after_register_then_read():
    runtime, calls = SimRuntime(), []
    out = _wait(runtime, FakeLog(calls, records=3), RecordingNotifier(runtime, calls), 1)
    runtime.run(10_000_000)
    assert calls == [("register", "c"), ("read", 1, 1), ("close",)]
    assert [r.seq for r in out[0].records] == [2] and out[0].immediate and out[0].reconnects == 0


def test_a_notification_between_the_read_and_the_park_is_latched():
    """The check/park race: the notify lands after the read, before the park."""
    runtime, calls = SimRuntime(), []
    log = FakeLog(calls, records=1)
    notifier = RecordingNotifier(runtime, calls)

    def append_and_notify():
        log.records = 2
        notifier.notify("c", 2)

    log.on_read = append_and_notify
    out = _wait(runtime, log, notifier, 1)
    runtime.run(10_000_000)
    assert calls == [("register", "c"), ("read", 1, 1), ("park", 300_000), ("resume", True), ("read", 1, 1),
                     ("close",)]
    assert out[1] == 0 and [r.seq for r in out[0].records] == [2] and out[0].wakes == 1


def test_a_dropped_notification_is_found_by_the_reconnects_authoritative_read():
    runtime, calls = SimRuntime(), []
    log = FakeLog(calls, records=0, materialized=False)
    notifier = RecordingNotifier(runtime, calls)

    async def appender():
        await runtime.sleep_ms(1_000)
        log.materialized, log.records = True, 1  # committed; its notification never arrives

    runtime.spawn_on(Node("appender"), "append", appender())
    out = _wait(runtime, log, notifier, 0)
    runtime.run(10_000_000)
    assert calls == [("register", "c"), ("read", 0, 1), ("park", 300_000), ("resume", False), ("close",),
                     ("register", "c"), ("read", 0, 1), ("close",)]
    assert out[0].reconnects == 1 and [r.seq for r in out[0].records] == [1] and notifier.registrations == 0


def test_a_false_wake_rereads_once_and_parks_again_on_a_fresh_latch():
    runtime, calls = SimRuntime(), []
    log = FakeLog(calls, records=1)
    notifier = RecordingNotifier(runtime, calls)

    async def notifier_task():
        await runtime.sleep_ms(1_000)
        notifier.notify("c", 1)  # a replayed append: nothing after the caller's seq
        await runtime.sleep_ms(1_000)
        log.records = 2
        notifier.notify("c", 2)

    runtime.spawn_on(Node("appender"), "append", notifier_task())
    out = _wait(runtime, log, notifier, 1)
    runtime.run(10_000_000)
    assert [c[0] for c in calls] == ["register", "read", "park", "resume", "read", "park", "resume", "read", "close"]
    assert out[0].false_wakes == 1 and out[0].wakes == 2 and out[1] == 2_000


def test_until_ms_ends_the_wait_empty_and_the_notifying_log_notifies_after_the_append():
    runtime, calls = SimRuntime(), []
    log = FakeLog(calls, records=0)
    notifier = RecordingNotifier(runtime, calls)
    out = _wait(runtime, log, notifier, 0, until_ms=60_000)
    runtime.run(10_000_000)
    assert out[0].records == () and notifier.registrations == 0

    class Request:
        conversation_id = "c"
        records = ("r",)

    notified = []

    class Spy:
        def notify(self, conversation_id, seq):
            notified.append((conversation_id, seq, log.records))

    async def append():
        await NotifyingLog(log, Spy()).append(Request())

    runtime.spawn_on(Node("w"), "append", append())
    runtime.run(10_000_001)
    assert notified == [("c", 1, 1)]  # after the append committed


# -- the oracle on hand-made histories ------------------------------------------------------


class _View:
    def __init__(self, records):
        self._records = records

    def log_records(self, conversation_id):
        return self._records


def _checker(records=()):
    trace = Trace(lambda: clock[0])
    clock = [0]
    violations = []
    checker = ProgressWaits(reconnect_ms=300_000)
    checker.attach(trace, lambda: clock[0], violations.append, _View(records))
    return trace, clock, checker, violations


def _emit(trace, clock, t, node, kind, **fields):
    clock[0] = t
    trace.emit(node, kind, fields)


def _append(trace, clock, t, last_seq):
    _emit(trace, clock, t, "worker-0", "log.append", conversation="c", batch="b", producer="p", epoch=1,
          expected_tail_seq=last_seq - 1, record_ids=("r",), envelopes=(), first_seq=last_seq, last_seq=last_seq,
          tail_digest="d", replayed=False)


def _read(trace, clock, t, after_seq, seqs=()):
    _emit(trace, clock, t, "watcher-0", "log.read", conversation="c", after_seq=after_seq, limit=1, seqs=seqs)


def test_the_oracle_catches_a_park_after_a_commit_before_the_registration():
    trace, clock, checker, violations = _checker()
    _read(trace, clock, 0, 0)  # the read-before-register bug: its read comes first...
    _append(trace, clock, 5, 1)
    _emit(trace, clock, 10, "watcher-0", "progress.register", registration=1, conversation="c")
    _emit(trace, clock, 10, "watcher-0", "progress.park", registration=1, conversation="c", deadline_ms=300_010)
    assert violations and "subscribe/check race" in violations[0].message


def test_the_oracle_catches_a_lost_notification_between_the_read_and_the_park():
    trace, clock, checker, violations = _checker()
    _emit(trace, clock, 0, "watcher-0", "progress.register", registration=1, conversation="c")
    _read(trace, clock, 0, 0)
    _append(trace, clock, 5, 1)
    _emit(trace, clock, 5, "worker-0", "progress.notify", conversation="c", seq=1, woken=1, dropped=False)
    _emit(trace, clock, 9, "watcher-0", "progress.park", registration=1, conversation="c", deadline_ms=300_000)
    assert not violations
    _emit(trace, clock, 7_000, "watcher-0", "progress.resume", registration=1, conversation="c", woken=True)
    assert [v.invariant for v in violations] == ["progress-waits"] and "check/park race" in violations[0].message


def test_the_oracle_catches_polling_and_a_gap():
    trace, clock, checker, violations = _checker()
    _emit(trace, clock, 0, "watcher-0", "progress.register", registration=1, conversation="c")
    _read(trace, clock, 0, 0)
    _read(trace, clock, 1_000, 0)
    assert "polling" in violations[-1].message
    _emit(trace, clock, 1_000, "watcher-0", "watch.started", watcher="watcher-0", conversation="c", from_seq=0,
          until_ms=10**9)
    _emit(trace, clock, 1_000, "watcher-0", "watch.delivered", watcher="watcher-0", conversation="c", seq=2,
          record_id="r2", fingerprint="f")
    assert "a gap" in violations[-1].message


def test_the_oracle_passes_a_clean_history_and_counts_its_checks():
    trace, clock, checker, violations = _checker()
    _emit(trace, clock, 0, "watcher-0", "progress.register", registration=1, conversation="c")
    _read(trace, clock, 0, 0)
    _emit(trace, clock, 0, "watcher-0", "progress.park", registration=1, conversation="c", deadline_ms=300_000)
    _append(trace, clock, 5, 1)
    _emit(trace, clock, 5, "worker-0", "progress.notify", conversation="c", seq=1, woken=1, dropped=False)
    _emit(trace, clock, 5, "watcher-0", "progress.resume", registration=1, conversation="c", woken=True)
    _read(trace, clock, 6, 0, (1,))
    _emit(trace, clock, 6, "watcher-0", "progress.close", registration=1, conversation="c")
    assert not violations and checker.checks == 4


def test_a_follow_whose_window_closes_while_its_watcher_is_down_is_owed_nothing():
    """A restart reopens only the conversations still in their follow window:
    a follow that ends while its watcher is down ends with the process (the
    audit once failed it as 'missed for good': agent-conversations seeds at
    6h). One still in its window when the watcher comes back is owed the
    whole log."""
    for until_ms, restart_after_ms, owed in ((1_000, 200, False), (5_000, 200, True), (5_000, None, False)):
        trace, clock, checker, violations = _checker(records=("r1", "r2"))
        _emit(trace, clock, 0, "watcher-0#1", "watch.started", watcher="watcher-0", conversation="c", from_seq=0,
              until_ms=until_ms)
        _append(trace, clock, 5, 1)
        _append(trace, clock, 6, 2)
        _emit(trace, clock, 900, "watcher-0#1", "node.crash", restart_after_ms=restart_after_ms)
        clock[0] = 10 * 60_000
        checker.audit(_View(("r1", "r2")))
        assert bool(violations) == owed, (until_ms, restart_after_ms, violations)
        if owed:
            assert "missed for good" in violations[0].message


# -- the watchers in a short agent-conversations run ----------------------------------------------


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_watchers_follow_every_conversation_through_dropped_notifications(store):
    from scenarios.stacks.agent_conversations import RATES

    rates = {**RATES, "dropped-notification": 0.3}
    result = run(registry.get("agent-conversations"), ScenarioOptions(
        seed=3, duration_ms=parse_duration_ms("10m"), store=store, rates=rates))
    assert result.passed, result.violations
    stats = result.stats
    assert result.faults.get("dropped-notification", 0) > 0, result.faults
    assert stats["progress_records_delivered"] > 100 and stats["progress_wait_woken"] > 0, stats
    assert stats["progress_waits_immediate"] > 0 and stats["progress_reconnects"] > 0, stats
    assert result.invariants["progress-waits"] > 0


def test_dropped_notifications_are_recorded_and_replay_from_the_script():
    """A ``dropped-notification`` is a fault like any other: in the run's
    script, replayed at its hit of ``progress.notify`` to the same trace."""
    import attrs

    from scenarios.stacks.agent_conversations import RATES

    opts = ScenarioOptions(seed=2, duration_ms=parse_duration_ms("5m"),
                           rates={**RATES, "dropped-notification": 0.3})
    first = run(registry.get("agent-conversations"), opts)
    assert first.passed, first.violations
    dropped = [e for e in first.fault_script if getattr(e, "kind", None) == "dropped-notification"]
    assert dropped and all(e.site == "progress.notify" and e.hit for e in dropped)
    again = run(registry.get("agent-conversations"), attrs.evolve(opts, fault_script=tuple(first.fault_script)))
    assert again.passed and again.trace_digest == first.trace_digest and again.faults == first.faults
