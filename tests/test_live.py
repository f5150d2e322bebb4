"""Live mode: the model's code on trio and real time, against one SQLite
WAL file (``sim.face.live_runtime``, ``loomsim live``).

The runtime's tests run on trio's ``MockClock`` (autojump): fast and
deterministic. The end-to-end run is real time and real threads: it
asserts the verdict and the counts, never a trace.
"""
from __future__ import annotations

import trio
import trio.testing

from sim.face.live_runtime import LiveClock, LiveRuntime


def _run(main, *, scale: float = 1.0):
    """``main(runtime)`` in a nursery on a mock clock that jumps when idle."""
    clock = trio.testing.MockClock(autojump_threshold=0)
    found = {}

    async def top():
        async with trio.open_nursery() as nursery:
            runtime = LiveRuntime(LiveClock(scale), nursery)
            found["value"] = await main(runtime)

    trio.run(top, clock=clock)
    return found["value"]


def test_now_starts_at_zero_and_sleep_ms_advances_it_by_at_least_the_duration():
    async def main(runtime):
        start = runtime.now_ms()
        await runtime.sleep_ms(1_500)
        return start, runtime.now_ms()

    start, after = _run(main)
    assert start == 0
    assert 1_500 <= after <= 1_501


def test_time_scale_makes_a_real_second_that_many_simulated_seconds():
    async def main(runtime):
        start_s = trio.current_time()
        await runtime.sleep_ms(60_000)  # a simulated minute
        return runtime.now_ms(), trio.current_time() - start_s

    now_ms, real_s = _run(main, scale=60.0)
    assert 60_000 <= now_ms <= 60_001
    assert abs(real_s - 1.0) < 1e-3  # one (mock) real second


def test_sleep_until_ms_returns_at_or_after_the_deadline_and_never_before():
    async def main(runtime):
        seen = []
        for deadline_ms in (1, 7, 7, 333, 1_000):
            await runtime.sleep_until_ms(deadline_ms)
            seen.append((deadline_ms, runtime.now_ms()))
        return seen

    for deadline_ms, now_ms in _run(main, scale=7.3):
        assert now_ms >= deadline_ms
        assert now_ms <= max(deadline_ms, 1) + 2


def test_a_deadline_in_the_past_returns_at_once():
    async def main(runtime):
        await runtime.sleep_ms(500)
        before = runtime.now_ms()
        await runtime.sleep_until_ms(10)
        return before, runtime.now_ms()

    before, after = _run(main)
    assert before == after


def test_spawn_runs_the_coroutine_as_its_own_task_and_checkpoint_keeps_the_time():
    async def main(runtime):
        done = runtime.event()
        names = []

        async def child():
            names.append(trio.lowlevel.current_task().name)
            done.set()

        runtime.spawn("child", child())
        before = runtime.now_ms()
        await runtime.checkpoint()
        assert runtime.now_ms() == before  # a checkpoint yields, time does not move
        assert await done.wait_until_ms(1_000)
        return names

    assert _run(main) == ["child"]


def test_an_event_wakes_its_waiter_when_set():
    async def main(runtime):
        event = runtime.event()

        async def setter():
            await runtime.sleep_ms(200)
            event.set()

        runtime.spawn("setter", setter())
        woken = await event.wait_until_ms(10_000)
        return woken, runtime.now_ms(), event.is_set()

    woken, now_ms, is_set = _run(main)
    assert woken is True and is_set is True
    assert 200 <= now_ms < 10_000


def test_an_event_times_out_at_its_deadline():
    async def main(runtime):
        event = runtime.event()
        woken = await event.wait_until_ms(750)
        return woken, runtime.now_ms(), event.is_set()

    woken, now_ms, is_set = _run(main)
    assert (woken, is_set) == (False, False)
    assert now_ms >= 750


def test_a_set_before_the_wait_is_latched_and_a_past_deadline_answers_false():
    async def main(runtime):
        latched = runtime.event()
        latched.set()
        latched.set()  # idempotent
        first = await latched.wait_until_ms(0)
        await runtime.sleep_ms(100)
        unset = runtime.event()
        second = await unset.wait_until_ms(50)
        return first, second, runtime.now_ms()

    first, second, now_ms = _run(main)
    assert first is True and second is False
    assert now_ms == 100  # the past deadline did not wait


def test_the_live_runtime_matches_the_model_runtime_protocol_exactly():
    import inspect

    from model.runtime import Event, Runtime
    from sim.face.live_runtime import LiveEvent

    for protocol, implementation in ((Runtime, LiveRuntime), (Event, LiveEvent)):
        wanted = {name for name in vars(protocol) if not name.startswith("_")}
        for name in wanted:
            ours = getattr(implementation, name)
            theirs = getattr(protocol, name)
            assert inspect.iscoroutinefunction(ours) == inspect.iscoroutinefunction(theirs), name
            assert list(inspect.signature(ours).parameters) == list(inspect.signature(theirs).parameters), name


def test_a_port_call_runs_in_a_thread_on_its_own_connection_and_counts_busy_answers(tmp_path):
    from model.retry import is_retryable
    from model.sqlite_db import open_database
    from sim.face.live_runtime import StoreCounts, is_busy_answer, open_process_stores

    path = str(tmp_path / "live.db")
    counts = StoreCounts()
    stores = open_process_stores(path, busy_timeout_ms=50, counts=counts)
    other = open_database(path)
    found = {}

    async def main():
        admitted = await stores.ledger.admit("c-1", "p", "k-1", {"n": 1}, 0)
        found["admitted"] = admitted.submission_id
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        try:
            await stores.ledger.admit("c-1", "p", "k-2", {"n": 2}, 0)
        except Exception as error:  # the ledger's own error, the contention its cause
            found["busy"] = error
        finally:
            other.execute("ROLLBACK")
        found["read"] = await stores.ledger.get(found["admitted"])

    try:
        trio.run(main)
    finally:
        stores.close()
        other.close()
    assert found["read"] is not None and found["read"].submission_id == found["admitted"]
    assert is_busy_answer(found["busy"]) and is_retryable(found["busy"])
    assert (counts.busy_answers, counts.store_calls) == (1, 3)


# -- loomsim live ----------------------------------------------------------------

import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402

from sim.face.cli import main  # noqa: E402


def _loomsim(*argv: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sim", *argv], capture_output=True, text=True, timeout=timeout_s)


def test_a_short_live_ledger_storm_run_passes_and_reports_its_counts(tmp_path, capsys):
    db = tmp_path / "live.db"
    code = main(["live", "ledger-storm", "--duration", "5s", "--workers", "3", "--time-scale", "60",
                 "--db", str(db), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    result = json.loads(out)
    assert result["status"] == "pass" and result["mode"] == "live"
    assert result["deterministic"] is False and result["trace_digest"] is None
    stats = result["stats"]
    assert 1 <= stats["settled"] <= stats["submitted"]
    for count in ("submitted", "settled", "busy_answers_retried", "worker_restarts", "store_calls"):
        assert isinstance(stats[count], int) and stats[count] >= 0, count
    assert stats["store_calls"] > stats["settled"]
    # The audit ran over what the file holds.
    assert result["invariants"]["exactly-once-settlement"] >= stats["settled"]
    assert result["invariants"]["log-chain"] >= 1
    assert result["violations"] == []
    assert result["config"]["workers"] == 3 and result["config"]["time_scale"] == 60.0
    assert db.exists()  # --db names the file the run kept


def test_the_text_result_says_pass_and_that_a_live_run_is_not_deterministic(capsys):
    code = main(["live", "ledger-storm", "--duration", "2s", "--workers", "2", "--time-scale", "60"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "not deterministic" in out and "trace digest" not in out.lower().replace("no trace digest", "")
    assert "PASS" in out.splitlines()[-1]
    for count in ("submitted=", "settled=", "busy_answers_retried=", "worker_restarts="):
        assert count in out, count


@pytest.mark.parametrize("argv, words", [
    (["live", "sentinel-year"], "live mode supports: ledger-storm"),
    (["live", "no-such-scenario"], "live mode supports: ledger-storm"),
    (["live", "ledger-storm", "--workers", "0"], "--workers"),
    (["live", "ledger-storm", "--duration", "soon"], "duration"),
    (["live", "ledger-storm", "--duration", "0s"], "--duration"),
    (["live", "ledger-storm", "--time-scale", "0"], "--time-scale"),
    (["live", "ledger-storm", "--time-scale", "-3"], "--time-scale"),
    (["live", "ledger-storm", "--time-scale", "fast"], "--time-scale"),
    (["live", "ledger-storm", "--db", "/no/such/dir/live.db"], "does not exist"),
    (["live", "ledger-storm", "--processes", "0"], "--processes"),
    (["live", "ledger-storm", "--workers", "2", "--processes", "2"], "not both"),
    (["live", "ledger-storm", "--kill-every", "1s"], "--kill-every needs --processes"),
    (["live", "ledger-storm", "--processes", "2", "--kill-every", "0s"], "--kill-every"),
    (["live", "ledger-storm", "--processes", "2", "--kill-every", "often"], "duration"),
])
def test_bad_live_input_is_one_usage_line_and_exit_2(argv, words, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("loomsim: error: ") and words in lines[0], captured.err
    assert captured.out == ""


def test_a_used_database_file_is_refused_and_kept_as_it_was(tmp_path, capsys):
    import sqlite3

    db = tmp_path / "used.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE mine (x)")
    conn.commit()
    conn.close()
    before = db.read_bytes()
    assert main(["live", "ledger-storm", "--db", str(db)]) == 2
    assert "already holds tables" in capsys.readouterr().err
    assert db.read_bytes() == before and not os.path.exists(str(db) + "-wal")


def test_real_contention_is_met_answered_busy_and_retried_by_the_model(tmp_path):
    # Another writer (this test) holds the file's write lock for a second of
    # the run: longer than the busy timeout (50 ms) and than the client's
    # longest gap between requests (40 model s: 0.67 s at 60x), so SQLite
    # answers "database is locked" for real; the model retries, and every
    # submission still settles.
    import sqlite3
    import time

    db = tmp_path / "live.db"
    run = subprocess.Popen([sys.executable, "-m", "sim", "live", "ledger-storm", "--duration", "5s", "--workers", "3",
                            "--time-scale", "60", "--busy-timeout-ms", "50", "--db", str(db), "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(200):  # until the run made its tables (at most 10 s)
            if db.exists():
                with sqlite3.connect(db, timeout=5.0) as probe:
                    if probe.execute("SELECT count(*) FROM sqlite_master WHERE name = 'ledger_submissions'"
                                     ).fetchone()[0]:
                        break
            time.sleep(0.05)
        else:
            raise AssertionError("the live run made no tables")
        holder = sqlite3.connect(db, timeout=5.0, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        time.sleep(1.0)
        holder.execute("ROLLBACK")
        holder.close()
        out, err = run.communicate(timeout=30.0)
    finally:
        run.kill()
    assert run.returncode == 0, out + err
    result = json.loads(out)
    stats = result["stats"]
    assert result["status"] == "pass"
    assert stats["busy_answers_retried"] >= 1
    assert 1 <= stats["settled"] == stats["submitted"]


@pytest.fixture(scope="module")
def passed_live_file(tmp_path_factory):
    """The file a short live run that passed left: each audit test below damages its own copy of it."""
    import contextlib
    import io

    db = tmp_path_factory.mktemp("live") / "live.db"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["live", "ledger-storm", "--duration", "2s", "--workers", "2", "--time-scale", "60",
                     "--db", str(db), "--json"])
    assert code == 0, out.getvalue()
    return db


def _copy_of(db, tmp_path):
    import shutil

    copy = tmp_path / db.name
    for suffix in ("", "-wal", "-shm"):  # the run closed its connections; copy a WAL too if one was left
        if os.path.exists(str(db) + suffix):
            shutil.copyfile(str(db) + suffix, str(copy) + suffix)
    return copy


def test_the_audit_fails_a_file_whose_ledger_disagrees_with_its_log(tmp_path, passed_live_file):
    import sqlite3

    from sim.face.live import LiveConfig, LiveTotals, _audit

    db = _copy_of(passed_live_file, tmp_path)
    conn = sqlite3.connect(db)
    changed = conn.execute("UPDATE ledger_submissions SET reserved_digest = 'feed' WHERE submission_id = "
                           "(SELECT MIN(submission_id) FROM ledger_submissions WHERE outcome IS NOT NULL)").rowcount
    conn.commit()
    conn.close()
    assert changed == 1
    config = LiveConfig("ledger-storm", 2_000, 2, False, None, 60.0, 0, 5_000, str(db))
    result = _audit(config, str(db), LiveTotals(), 120_000, 2.0)
    assert result["status"] == "fail"
    assert "exactly-once-settlement" in {v["name"] for v in result["violations"]}


def test_a_worker_process_that_fails_is_named_restarted_and_fails_the_run(monkeypatch, capsys):
    import sim.face.live as live

    incarnation = live._worker_incarnation
    failed = []

    async def failing_once(owner, *args, **kwargs):
        if owner == "worker-1" and not failed:
            failed.append(owner)
            raise ValueError("planted failure")
        await incarnation(owner, *args, **kwargs)

    monkeypatch.setattr(live, "_worker_incarnation", failing_once)
    code = main(["live", "ledger-storm", "--duration", "1s", "--workers", "2", "--time-scale", "60", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == 1 and result["status"] == "fail"
    assert result["stats"]["worker_restarts"] == 1
    assert result["violations"] == [{"name": "worker-failed",
                                     "message": "a worker process failed: worker-1: ValueError: planted failure"}]


def test_a_clock_may_start_at_a_given_model_time():
    async def main():
        clock = LiveClock(10.0, start_ms=90_000)
        first = clock.now_ms()
        await trio.sleep(1.0)
        return first, clock.now_ms()

    first, later = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert first == 90_000 and 100_000 <= later <= 100_001


def test_workers_as_os_processes_survive_sigkills_and_every_submission_settles(tmp_path):
    # Each worker a `python -m` child on the same file; one SIGKILLed every
    # 1.5 s of wall time (mid-transaction or not) and started again.
    done = _loomsim("live", "ledger-storm", "--duration", "5s", "--processes", "3", "--kill-every", "1500ms",
                    "--time-scale", "60", "--json", timeout_s=30.0)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "pass" and result["config"]["processes"] is True
    stats = result["stats"]
    assert stats["worker_kills"] >= 1 and stats["worker_restarts"] == 0
    assert 1 <= stats["settled"] == stats["submitted"]
    assert result["wall_s"] <= 15.0


def test_a_file_whose_log_chain_does_not_verify_on_reopen_fails_the_audit(tmp_path, passed_live_file):
    import sqlite3

    from sim.face.live import LiveConfig, LiveTotals, _audit

    db = _copy_of(passed_live_file, tmp_path)
    conn = sqlite3.connect(db)
    changed = conn.execute("UPDATE conv_conversations SET tail_digest = 'feed' WHERE conversation_id = "
                           "(SELECT MIN(conversation_id) FROM conv_conversations)").rowcount
    conn.commit()
    conn.close()
    assert changed == 1
    config = LiveConfig("ledger-storm", 2_000, 2, False, None, 60.0, 0, 5_000, str(db))
    result = _audit(config, str(db), LiveTotals(), 120_000, 2.0)
    assert result["status"] == "fail", result
    assert result["violations"][0]["name"] in ("reopen", "log-chain"), result["violations"]
