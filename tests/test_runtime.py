"""SimRuntime and nodes: ordering, virtual time, crashes, restarts, pauses, errors."""
from __future__ import annotations

import pytest

import sim.runtime as runtime_module
from faults.ports import BoundPort, PortStats
from sim.clock import MS_PER_DAY, MS_PER_MINUTE
from sim.node import Node, NodeCrashed, NodeDeadError
from sim.rng import Stream, derive_seed64
from sim.runtime import SimRuntime, TaskFailed
from sim.world import World


def _rt_with_node(name: str = "a") -> tuple[SimRuntime, Node]:
    return SimRuntime(), Node(name)


# -- ordering and virtual time -------------------------------------------------


def test_equal_wake_times_run_fifo_by_spawn_order():
    rt = SimRuntime()
    node = Node("a")
    order = []

    async def task(i: int) -> None:
        await rt.sleep_ms(100)
        order.append(i)

    for i in range(10):
        rt.spawn_on(node, f"t{i}", task(i))
    rt.run(1_000)
    assert order == list(range(10))


def test_checkpoint_interleaves_fifo_at_one_instant():
    rt = SimRuntime()
    node = Node("a")
    log = []

    async def task(name: str) -> None:
        for i in range(3):
            log.append((name, i, rt.now_ms()))
            await rt.checkpoint()

    rt.spawn_on(node, "A", task("A"))
    rt.spawn_on(node, "B", task("B"))
    rt.run(10)
    assert log == [("A", 0, 0), ("B", 0, 0), ("A", 1, 0), ("B", 1, 0), ("A", 2, 0), ("B", 2, 0)]


def test_earlier_wake_runs_first_regardless_of_spawn_order():
    rt = SimRuntime()
    node = Node("a")
    order = []

    async def task(name: str, delay_ms: int) -> None:
        await rt.sleep_ms(delay_ms)
        order.append((name, rt.now_ms()))

    rt.spawn_on(node, "late", task("late", 300))
    rt.spawn_on(node, "early", task("early", 100))
    rt.spawn_on(node, "mid", task("mid", 200))
    rt.run(1_000)
    assert order == [("early", 100), ("mid", 200), ("late", 300)]


def test_time_jumps_to_next_timer_and_now_is_exact():
    rt = SimRuntime()
    node = Node("a")
    seen = []

    async def sleeper() -> None:
        seen.append(rt.now_ms())
        await rt.sleep_ms(5 * MS_PER_MINUTE)
        seen.append(rt.now_ms())
        # A simulated year: only finishes if time is virtual.
        await rt.sleep_ms(365 * MS_PER_DAY)
        seen.append(rt.now_ms())

    rt.spawn_on(node, "sleeper", sleeper())
    rt.run(400 * MS_PER_DAY)
    assert seen == [0, 300_000, 300_000 + 365 * MS_PER_DAY]
    assert isinstance(seen[-1], int)
    assert rt.idle()


def test_sleep_until_in_the_past_does_not_go_back_in_time():
    rt = SimRuntime()
    node = Node("a")
    seen = []

    async def task() -> None:
        await rt.sleep_ms(1_000)
        seen.append(rt.now_ms())
        await rt.sleep_until_ms(500)
        seen.append(rt.now_ms())
        await rt.sleep_until_ms(1_000)  # exactly now
        seen.append(rt.now_ms())
        await rt.sleep_until_ms(2_500)
        seen.append(rt.now_ms())

    rt.spawn_on(node, "t", task())
    rt.run(10_000)
    assert seen == [1_000, 1_000, 1_000, 2_500]


def test_run_until_leaves_clock_there_and_later_tasks_pending():
    rt = SimRuntime()
    node = Node("a")
    done = []

    async def task(name: str, wake_ms: int) -> None:
        await rt.sleep_until_ms(wake_ms)
        done.append((name, rt.now_ms()))

    rt.spawn_on(node, "soon", task("soon", 1_000))
    rt.spawn_on(node, "boundary", task("boundary", 2_000))
    rt.spawn_on(node, "later", task("later", 5_000))
    rt.run(2_000)
    assert rt.now_ms() == 2_000
    assert done == [("soon", 1_000), ("boundary", 2_000)]  # wake == until_ms runs
    assert not rt.idle()

    rt.run(3_000)
    assert rt.now_ms() == 3_000
    assert len(done) == 2

    rt.run(1_000)  # an earlier horizon never moves the clock back
    assert rt.now_ms() == 3_000

    rt.run(6_000)
    assert done[-1] == ("later", 5_000)
    assert rt.now_ms() == 6_000
    assert rt.idle()


def test_run_with_nothing_to_do_advances_clock():
    rt = SimRuntime()
    rt.run(12_345)
    assert rt.now_ms() == 12_345


def test_spawn_at_ms_in_the_past_starts_now():
    rt = SimRuntime()
    node = Node("a")
    seen = []

    async def task() -> None:
        seen.append(rt.now_ms())

    rt.run(1_000)
    rt.spawn_on(node, "t", task(), at_ms=10)
    rt.run(2_000)
    assert seen == [1_000]


def test_spawn_from_a_task_lands_on_the_callers_node():
    rt = SimRuntime()
    node = Node("a")
    seen = []

    async def child() -> None:
        seen.append((rt.current_task.name, rt.current_task.node.label))

    async def parent() -> None:
        await rt.sleep_ms(5)
        rt.spawn("child", child())

    rt.spawn_on(node, "parent", parent())
    rt.run(100)
    assert seen == [("child", "a")]


def test_livelock_at_one_instant_is_caught(monkeypatch):
    monkeypatch.setattr(runtime_module, "STEPS_PER_INSTANT_MAX", 50)
    rt = SimRuntime()
    node = Node("a")

    async def spinner() -> None:
        while True:
            await rt.checkpoint()

    rt.spawn_on(node, "spin", spinner())
    with pytest.raises(AssertionError, match="livelock"):
        rt.run(10)


# -- crashes -----------------------------------------------------------------


class _FakeStore:
    """A tiny store: records every call that reaches it."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    async def put(self, key: str, value: str) -> str:
        self.calls.append((key, value))
        return value


_FAKE_DESCRIBERS = {"put": lambda args, kwargs, result: {"key": args[0], "value": args[1]}}


def test_crash_kills_all_tasks_at_once_and_finally_blocks_are_refused_by_the_port():
    world = World(7)
    rt = world.runtime
    store = _FakeStore()
    log: list[tuple] = []

    def start(node: Node) -> None:
        port = BoundPort(world, node, "fake", store, None, _FAKE_DESCRIBERS, PortStats(), lambda: 0)

        async def worker(i: int) -> None:
            try:
                if i == 0:
                    await port.put("k", "before-crash")
                while True:
                    await rt.sleep_ms(50)
                    log.append(("tick", i, rt.now_ms()))
            finally:
                log.append(("finally", i, rt.now_ms(), node.alive))
                try:
                    await port.put("k", f"from-finally-{i}")
                except NodeDeadError as error:
                    log.append(("refused", i, error.node_name, error.port))

        for i in range(3):
            rt.spawn_on(node, f"worker-{i}", worker(i))

    node = world.add_node("w", start)
    world.at(100, lambda: world.crash(node, restart_after_ms=None), label="crash w")
    world.run_until(1_000)

    assert not node.alive
    assert node.tasks == {}
    # The only call that reached the store is the one made while alive.
    assert store.calls == [("k", "before-crash")]
    ticks = [e for e in log if e[0] == "tick"]
    assert ticks and all(t_ms < 100 for _, _, t_ms in ticks)
    assert [e for e in log if e[0] == "finally"] == [
        ("finally", 0, 100, False), ("finally", 1, 100, False), ("finally", 2, 100, False)]
    assert [e for e in log if e[0] == "refused"] == [
        ("refused", 0, "w", "fake.put"), ("refused", 1, "w", "fake.put"), ("refused", 2, "w", "fake.put")]
    # Finally blocks ran at the crash, in spawn order, each right after the other.
    assert [e[1] for e in log if e[0] in ("finally", "refused")] == [0, 0, 1, 1, 2, 2]
    assert world.trace.counts.get("fake.put") == 1
    assert world.trace.counts.get("node.crash") == 1


def test_a_dying_task_whose_finally_awaits_ends_at_the_crash_not_at_the_garbage_collector():
    """A finally block that awaits (a cleanup sleep) gets GeneratorExit at
    that await too: the coroutine ends at the crash, never left suspended
    for the garbage collector to close later, outside simulated time."""
    rt, node = _rt_with_node()
    log: list[tuple] = []
    coros = []

    async def task() -> None:
        try:
            await rt.sleep_ms(1_000)
        finally:
            log.append(("finally", rt.now_ms()))
            try:
                await rt.sleep_ms(5)
                log.append(("after the cleanup sleep", rt.now_ms()))
            finally:
                log.append(("inner finally", rt.now_ms()))

    coro = task()
    coros.append(coro)
    rt.spawn_on(node, "t", coro)
    rt.run(10)
    rt.crash_node(node)
    assert coro.cr_frame is None  # ended, not suspended in its finally block
    assert log == [("finally", 10), ("inner finally", 10)]
    rt.run(2_000)
    assert log == [("finally", 10), ("inner finally", 10)] and rt.idle()


def test_a_dying_task_that_awaits_forever_in_its_finally_is_an_assertion():
    rt, node = _rt_with_node()

    released: list[bool] = []

    async def stubborn() -> None:
        try:
            await rt.sleep_ms(1_000)
        finally:
            while not released:
                try:
                    await rt.sleep_ms(1)
                except GeneratorExit:
                    pass

    coro = stubborn()
    with pytest.raises(AssertionError, match="still awaits after"):
        runtime_module.close_coroutine(_started(coro))
    released.append(True)
    coro.close()  # let it end, so the test leaves no suspended coroutine behind


def _started(coro):
    coro.send(None)  # to its first await
    return coro


def test_crash_of_an_unstarted_task_never_runs_it():
    rt, node = _rt_with_node()
    ran = []

    async def task() -> None:
        ran.append(True)

    rt.spawn_on(node, "t", task(), at_ms=50)
    rt.crash_node(node)
    rt.run(100)
    assert ran == []
    assert rt.idle()


def test_spawn_on_a_dead_node_is_refused():
    rt, node = _rt_with_node()
    rt.crash_node(node)

    async def task() -> None:  # pragma: no cover - must never run
        raise AssertionError("ran on a dead node")

    coro = task()
    with pytest.raises(NodeDeadError):
        rt.spawn_on(node, "t", coro)
    assert coro.cr_frame is None  # closed, not left for the garbage collector
    rt.run(10)


def test_crash_from_own_task_unwinds_with_node_crashed_through_except_exception():
    rt = SimRuntime()
    victim = Node("victim")
    bystander = Node("bystander")
    log: list = []

    async def suicidal() -> None:
        try:
            await rt.sleep_ms(10)
            try:
                rt.crash_node(victim)
                log.append("after-crash")  # must never run
            except Exception:  # noqa: BLE001 - the point: must not catch a crash
                log.append("swallowed")
            log.append("continued")
        except BaseException as error:
            log.append(("unwound", type(error).__name__, victim.alive))
            raise
        finally:
            log.append(("finally", rt.now_ms()))

    async def sibling() -> None:
        try:
            await rt.sleep_ms(1_000)
            log.append("sibling-ran")
        finally:
            log.append(("sibling-finally", rt.now_ms(), victim.alive))

    ticks = []

    async def other() -> None:
        while True:
            await rt.sleep_ms(5)
            ticks.append(rt.now_ms())

    rt.spawn_on(victim, "suicidal", suicidal())
    rt.spawn_on(victim, "sibling", sibling())
    rt.spawn_on(bystander, "other", other())
    rt.run(100)  # no TaskFailed: a crash is not a bug

    assert log == [("sibling-finally", 10, False), ("unwound", "NodeCrashed", False), ("finally", 10)]
    assert not victim.alive and bystander.alive
    assert ticks == list(range(5, 101, 5))  # the other node never noticed


def test_node_crashed_is_a_base_exception_not_an_exception():
    assert issubclass(NodeCrashed, BaseException)
    assert not issubclass(NodeCrashed, Exception)


def test_task_that_swallows_node_crashed_never_runs_again():
    rt, node = _rt_with_node()
    log = []

    async def stubborn() -> None:
        try:
            rt.crash_node(node)
        except BaseException:  # noqa: BLE001 - model code must not, but if it does
            log.append("swallowed")
        while True:
            await rt.sleep_ms(10)
            log.append(("ran-after-crash", rt.now_ms()))

    rt.spawn_on(node, "stubborn", stubborn())
    rt.run(100)
    assert log == ["swallowed"]


def test_crash_of_another_node_from_a_task_does_not_unwind_the_caller():
    rt = SimRuntime()
    a, b = Node("a"), Node("b")
    log = []

    async def killer() -> None:
        await rt.sleep_ms(10)
        rt.crash_node(b)
        log.append("killer-continues")
        await rt.sleep_ms(10)
        log.append(("killer-again", rt.now_ms()))

    async def victim() -> None:
        while True:
            await rt.sleep_ms(3)
            log.append(("victim", rt.now_ms()))

    rt.spawn_on(a, "killer", killer())
    rt.spawn_on(b, "victim", victim())
    rt.run(50)
    assert log == [("victim", 3), ("victim", 6), ("victim", 9), "killer-continues", ("killer-again", 20)]
    rt.crash_node(b)  # crashing a dead node again is a no-op
    assert a.alive


def test_dying_finally_block_cannot_spawn_new_work():
    # Regression: dying tasks were closed while the *crashing* task was
    # current, so spawn() in a finally block landed on the crasher's node
    # (here the harness) and the dead node's code ran on.
    rt = SimRuntime()
    worker, harness = Node("worker"), Node("harness", role="harness")
    ran = []

    async def orphan() -> None:
        ran.append(rt.current_task.node.label)

    async def victim() -> None:
        try:
            await rt.sleep_ms(1_000)
        finally:
            rt.spawn("orphan", orphan())

    async def killer() -> None:
        await rt.sleep_ms(10)
        rt.crash_node(worker)

    rt.spawn_on(worker, "victim", victim())
    rt.spawn_on(harness, "killer", killer())
    rt.run(2_000)
    assert ran == []


# -- restart and pause ----------------------------------------------------------


def test_world_restart_makes_a_new_incarnation_that_runs_start_again():
    world = World(11)
    rt = world.runtime
    starts = []
    ticks = []

    def start(node: Node) -> None:
        starts.append((node.label, node.incarnation, rt.now_ms()))

        async def loop() -> None:
            while True:
                await rt.sleep_ms(100)
                ticks.append((node.label, rt.now_ms()))

        rt.spawn_on(node, "loop", loop())

    first = world.add_node("w", start)
    world.at(250, lambda: world.crash(first, restart_after_ms=1_000), label="crash")
    world.run_until(1_500)

    second = world.nodes["w"]
    assert second is not first
    assert (first.alive, second.alive) == (False, True)
    assert second.label == "w#2" and second.incarnation == 2 and second.name == "w"
    assert starts == [("w", 1, 0), ("w#2", 2, 1_250)]
    assert [t for t in ticks if t[0] == "w"] == [("w", 100), ("w", 200)]
    assert [t for t in ticks if t[0] == "w#2"] == [("w#2", 1_350), ("w#2", 1_450)]
    assert world.counters == {"node.crashes": 1, "node.restarts": 1}
    assert world.trace.counts["node.start"] == 2

    with pytest.raises(AssertionError):
        world.restart("w")  # a live node is never restarted


def test_pause_delays_the_nodes_tasks_while_others_proceed():
    rt = SimRuntime()
    frozen, free = Node("frozen"), Node("free")
    ticks: dict[str, list[int]] = {"frozen": [], "free": []}

    async def ticker(name: str) -> None:
        while True:
            await rt.sleep_ms(10)
            ticks[name].append(rt.now_ms())

    rt.spawn_on(frozen, "tick", ticker("frozen"))
    rt.spawn_on(free, "tick", ticker("free"))
    rt.run(105)
    rt.pause_node(frozen, 500)
    rt.pause_node(frozen, 300)  # a shorter pause never shortens the current one
    rt.run(540)
    assert ticks["frozen"] == [10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 500, 510, 520, 530, 540]
    assert ticks["free"] == list(range(10, 541, 10))


# -- errors ----------------------------------------------------------------------


def test_uncaught_exception_is_task_failed_naming_the_task():
    rt = SimRuntime()
    node = Node("w", incarnation=3)

    async def buggy() -> None:
        await rt.sleep_ms(42)
        raise ValueError("boom")

    rt.spawn_on(node, "buggy-task", buggy())
    with pytest.raises(TaskFailed) as info:
        rt.run(100)
    failure = info.value
    assert failure.task_name == "buggy-task"
    assert failure.node_name == "w#3"
    assert failure.time_ms == 42
    assert isinstance(failure.error, ValueError)
    assert isinstance(failure.__cause__, ValueError)
    assert "w#3/buggy-task" in str(failure) and "ValueError" in str(failure) and "boom" in str(failure)


class _YieldsString:
    def __await__(self):
        yield "not a trap"


class _FutureLike:
    """Shaped like an asyncio.Future: yields itself to its event loop."""

    def __await__(self):
        yield self
        return None


class _BareYield:
    """Like asyncio.sleep(0): yields None."""

    def __await__(self):
        yield


@pytest.mark.parametrize("awaitable", [_YieldsString, _FutureLike, _BareYield])
def test_awaiting_a_foreign_awaitable_is_task_failed(awaitable):
    rt = SimRuntime()
    node = Node("w")

    async def confused() -> None:
        await rt.sleep_ms(7)
        await awaitable()

    rt.spawn_on(node, "confused", confused())
    with pytest.raises(TaskFailed) as info:
        rt.run(100)
    assert info.value.task_name == "confused"
    assert info.value.time_ms == 7
    assert isinstance(info.value.error, TypeError)
    assert "foreign awaitable" in str(info.value)


# -- shuffled ties -----------------------------------------------------------------


def _tie_order(seed: int | None, *, shuffle: bool = True, n: int = 8) -> list[int]:
    stream = None if seed is None else Stream(derive_seed64(seed, "scheduling"), "scheduling")
    rt = SimRuntime(stream, shuffle_ties=shuffle)
    node = Node("a")
    order = []

    async def task(i: int) -> None:
        await rt.sleep_ms(100)
        order.append(i)

    for i in range(n):
        rt.spawn_on(node, f"t{i}", task(i))
    rt.run(1_000)
    return order


def test_shuffle_ties_permutes_by_seed_and_is_reproducible():
    orders = {seed: _tie_order(seed) for seed in range(6)}
    for seed, order in orders.items():
        assert sorted(order) == list(range(8))
        assert _tie_order(seed) == order  # same seed, same permutation
    assert len({tuple(o) for o in orders.values()}) >= 3  # different seeds explore
    assert any(o != list(range(8)) for o in orders.values())


def test_shuffle_ties_never_reorders_different_instants():
    stream = Stream(derive_seed64(5, "scheduling"), "scheduling")
    rt = SimRuntime(stream, shuffle_ties=True)
    node = Node("a")
    order = []

    async def task(i: int) -> None:
        await rt.sleep_ms(10 * (i // 4 + 1))
        order.append((rt.now_ms(), i))

    for i in range(12):
        rt.spawn_on(node, f"t{i}", task(i))
    rt.run(1_000)
    assert [t for t, _ in order] == [10] * 4 + [20] * 4 + [30] * 4
    assert sorted(i for t, i in order if t == 20) == [4, 5, 6, 7]


def test_without_shuffle_or_stream_ties_stay_fifo():
    assert _tie_order(3, shuffle=False) == list(range(8))
    assert _tie_order(None, shuffle=True) == list(range(8))
