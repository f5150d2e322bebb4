"""``loomsim check-determinism``: every seed twice, in fresh processes, under two hash seeds.

Determinism is the product (ARCHITECTURE §2): the same scenario, seed and
code give the same trace in any process and under any ``PYTHONHASHSEED``.
This command checks it for a user's seeds and scenarios (their own store
adapters and workloads included): each seed runs twice as a child ``python
-m sim run ... --trace FILE --json`` (as a sweep's seeds do,
``children.start_child``), once under ``PYTHONHASHSEED=0`` (hash randomisation
off) and once under ``PYTHONHASHSEED=1`` (a fixed, different seed of the
string hash): a set of strings iterated where its order reaches the trace,
or anything ordered by ``hash()``, then differs between the two.

Equal trace digests: deterministic. Unequal: the two trace streams are read
side by side, a line at a time (memory stays bounded whatever the run's
length), and the report names the first event where they part: its index,
its simulated time, and both events in full. The trace files live in a
temporary directory removed afterwards, unless ``--keep-traces DIR``.

Exit 0 every seed deterministic, 1 a seed diverged, 3 a child did not run
(crashed, printed no result); a divergence outranks an error.

Part of the face: it starts processes and reads no clock (it imports no ``time``);
nothing simulated runs here.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from typing import Any, Iterator, Mapping, Sequence

import attrs

from sim.clock import format_calendar, format_duration_ms
from sim.face.options import (UsageError, parse_count, parse_duration, parse_seed_range, parse_store,
                              selected_scenarios)
from sim.face.children import (POLL_S, Job, check_interrupted, child_result, forwarding_signals, reap, spawning,
                               start_child)

FORMAT = "loomsim-determinism/1"
# The two hash seeds: 0 turns string-hash randomisation off, 1 is a fixed other one.
HASH_SEEDS = ("0", "1")
EXIT_PASS, EXIT_DIVERGED, EXIT_ERROR = 0, 1, 3
DETERMINISTIC, DIVERGED, ERROR = "deterministic", "diverged", "error"


def add_parser(sub: Any) -> Any:
    """``loomsim check-determinism``'s arguments."""
    p = sub.add_parser("check-determinism",
                       help="run each seed twice in fresh processes under two PYTHONHASHSEEDs and compare the "
                            "traces: name the first diverging event")
    p.add_argument("scenario", nargs="?", default=None, help="scenario name (default: every scenario)")
    p.add_argument("--seeds", type=parse_seed_range, required=True, metavar="A:B",
                   help="seeds A (inclusive) to B (exclusive) of each scenario, e.g. 0:4")
    p.add_argument("--duration", type=parse_duration, default=None,
                   help="simulated duration of each run (default: the scenario's sweep duration)")
    p.add_argument("--store", type=parse_store, default="memory", metavar="STORE",
                   help="memory (default), sqlite, or MODULE:FACTORY")
    p.add_argument("--jobs", type=parse_count, default=2, help="runs at once (default 2)")
    p.add_argument("--keep-traces", default=None, metavar="DIR",
                   help="keep the trace files (JSON lines) in DIR (default: a temporary directory, removed)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    return p


@attrs.frozen
class Pair:
    """One seed's two runs: the jobs and where their traces go."""

    job: Job
    traces: tuple[str, str]


def command(args: Any) -> int:
    """``loomsim check-determinism``."""
    from sim.face.repro_file import scenarios_argv

    scenarios = selected_scenarios(args.scenario)
    if args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {args.jobs}")
    keep = args.keep_traces
    if keep is not None and not os.path.isdir(keep):
        raise UsageError(f"--keep-traces {keep!r} is not a directory")
    if keep is not None and not os.access(keep, os.W_OK | os.X_OK):
        raise UsageError(f"--keep-traces {keep!r} is not writable")
    directory = keep if keep is not None else tempfile.mkdtemp(prefix="loomsim-determinism-")
    try:
        pairs = plan(scenarios, args.seeds, directory, duration_ms=args.duration, store=args.store,
                     global_args=scenarios_argv(args.scenarios))
        records = run_pairs(pairs, jobs=args.jobs, on_record=None if args.json else _print_record)
    finally:
        if keep is None:
            shutil.rmtree(directory, ignore_errors=True)
    summary = summarize(records, traces_dir=keep)
    print(json.dumps(summary, ensure_ascii=False) if args.json else render_summary(summary))
    return summary["exit_code"]


def plan(scenarios: Sequence[Any], seeds: range, directory: str, *, duration_ms: int | None, store: str,
         global_args: Sequence[str] = ()) -> list[Pair]:
    """A pair of runs per (seed, scenario), seed-major; each child writes
    its trace (``run --trace``) into ``directory``, at a free name (a kept
    trace is never overwritten: a taken name gets ``-2``, ...) that its
    result names (``trace_file``)."""
    pairs = []
    for seed in seeds:
        for scenario in scenarios:
            duration = format_duration_ms(duration_ms or scenario.sweep_ms)
            traces = []
            for hash_seed in HASH_SEEDS:
                traces.append(os.path.join(directory, f"trace-{scenario.name}-{seed}-hashseed{hash_seed}.jsonl"))
            argv = (*global_args, "run", scenario.name, "--seed", str(seed), "--duration", duration, "--store", store,
                    "--repro-dir", directory, "--no-progress", "--json")
            pairs.append(Pair(Job(scenario.name, seed, False, argv), (traces[0], traces[1])))
    return pairs


def run_pairs(pairs: Sequence[Pair], *, jobs: int, on_record: Any = None) -> list[dict[str, Any]]:
    """Run both children of every pair, at most ``jobs`` processes at once;
    compare each pair once both have ended. SIGINT/SIGTERM: the children are
    stopped and reaped (``children.reap``), ``Interrupted`` raised."""
    pending = [(pair, side) for pair in pairs for side in (0, 1)]
    running: list[tuple[Pair, int, Any]] = []
    done: dict[tuple[str, int], dict[int, dict[str, Any]]] = {}
    records: dict[tuple[str, int], dict[str, Any]] = {}
    failure: BaseException | None = None
    with forwarding_signals():
        try:
            while pending or running:
                check_interrupted()
                while pending and len(running) < jobs:
                    pair, side = pending.pop(0)
                    job = attrs.evolve(pair.job, argv=(*pair.job.argv, "--trace", pair.traces[side]))
                    with spawning():
                        running.append((pair, side, start_child(job, None, {"PYTHONHASHSEED": HASH_SEEDS[side]})))
                for entry in list(running):
                    pair, side, proc = entry
                    if proc.poll() is None:
                        continue
                    running.remove(entry)
                    key = (pair.job.scenario, pair.job.seed)
                    both = done.setdefault(key, {})
                    both[side] = child_result(pair.job, proc)
                    if len(both) == 2:
                        record = records[key] = compare(pair, both[0], both[1])
                        del done[key]
                        if on_record is not None:
                            on_record(record)
                if running:  # wait a moment for the oldest child (no clock read here)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        running[0][2].wait(timeout=POLL_S)
        except BaseException as error:
            failure = error
            raise
        finally:
            reap([proc for _, _, proc in running], failure)
    return [records[(pair.job.scenario, pair.job.seed)] for pair in pairs]


def compare(pair: Pair, first: Mapping[str, Any], second: Mapping[str, Any]) -> dict[str, Any]:
    """One seed's verdict from its two results (and, when their digests
    differ, its two trace files: the first diverging event)."""
    # The names the children wrote (a kept name already taken: -2, ...).
    traces = [result.get("trace_file") or wanted for result, wanted in zip((first, second), pair.traces)]
    record: dict[str, Any] = {"scenario": pair.job.scenario, "seed": pair.job.seed,
                              "hash_seeds": list(HASH_SEEDS), "traces": traces,
                              "digests": [first.get("trace_digest"), second.get("trace_digest")],
                              "run_status": [first["status"], second["status"]],
                              "events": [first.get("events"), second.get("events")]}
    errors = [f"PYTHONHASHSEED={h}: {r['error']}" for h, r in zip(HASH_SEEDS, (first, second))
              if r["status"] == "error"]
    if errors:
        return {**record, "verdict": ERROR, "error": "; ".join(errors), "divergence": None}
    if first["trace_digest"] == second["trace_digest"]:
        return {**record, "verdict": DETERMINISTIC, "divergence": None}
    return {**record, "verdict": DIVERGED, "divergence": first_divergence(*traces)}


def _events(path: str) -> Iterator[str]:
    with open(path, encoding="utf-8", errors="backslashreplace") as stream:
        for line in stream:
            yield line.rstrip("\n")


def first_divergence(path_a: str, path_b: str) -> dict[str, Any]:
    """The first event where the trace streams at ``path_a`` and ``path_b``
    differ: its index (1-based), simulated time and both events (None for
    the stream that ended first). Streams that never differ: ``index`` None
    (the digests differ in what the JSON lines do not show)."""
    index = 0
    stream_a, stream_b = _events(path_a), _events(path_b)
    while True:
        line_a, line_b = next(stream_a, None), next(stream_b, None)
        index += 1
        if line_a is None and line_b is None:
            return {"index": None, "simulated_ms": None, "simulated_time": None, "events": [None, None]}
        if line_a != line_b:
            events = [None if line is None else _parse(line) for line in (line_a, line_b)]
            times = [e["t_ms"] for e in events if isinstance(e, dict) and isinstance(e.get("t_ms"), int)]
            t_ms = min(times) if times else None
            return {"index": index, "simulated_ms": t_ms,
                    "simulated_time": None if t_ms is None else format_calendar(t_ms), "events": events}


def _parse(line: str) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        return line  # a torn last line (a child that died): shown as it is


def summarize(records: Sequence[Mapping[str, Any]], *, traces_dir: str | None) -> dict[str, Any]:
    counts = {verdict: sum(1 for r in records if r["verdict"] == verdict) for verdict in (DETERMINISTIC, DIVERGED, ERROR)}
    code = EXIT_DIVERGED if counts[DIVERGED] else EXIT_ERROR if counts[ERROR] else EXIT_PASS
    return {"format": FORMAT, "hash_seeds": list(HASH_SEEDS), "checked": len(records), **counts,
            "traces_kept_in": traces_dir, "exit_code": code, "runs": list(records)}


def render_record(record: Mapping[str, Any]) -> list[str]:
    who = f"{record['scenario']} seed {record['seed']}"
    if record["verdict"] == DETERMINISTIC:
        return [f"{who}: DETERMINISTIC  digest {record['digests'][0][:16]} ({record['events'][0]} events, "
                f"PYTHONHASHSEED {' and '.join(HASH_SEEDS)})"]
    if record["verdict"] == ERROR:
        return [f"{who}: ERROR {record['error']}"]
    div = record["divergence"]
    lines = [f"{who}: DIVERGED  digests {record['digests'][0][:16]} != {record['digests'][1][:16]}"]
    if div["index"] is None:
        lines.append("  the trace streams are equal line for line: the digests differ in what the JSON lines do not show")
        return lines
    lines.append(f"  first diverging event: #{div['index']} at {div['simulated_time'] or 'an unknown time'}")
    for hash_seed, event in zip(HASH_SEEDS, div["events"]):
        shown = "(the trace ended before it)" if event is None else json.dumps(event, ensure_ascii=False)
        lines.append(f"    PYTHONHASHSEED={hash_seed}: {shown}")
    return lines


def _print_record(record: Mapping[str, Any]) -> None:
    print("\n".join(render_record(record)), flush=True)


def render_summary(summary: Mapping[str, Any]) -> str:
    text = (f"check-determinism: {summary['checked']} seed run(s) twice (PYTHONHASHSEED "
            f"{' and '.join(summary['hash_seeds'])}): {summary[DETERMINISTIC]} deterministic, "
            f"{summary[DIVERGED]} diverged, {summary[ERROR]} errors")
    if summary["traces_kept_in"]:
        text += f"; traces kept in {summary['traces_kept_in']}"
    return text
