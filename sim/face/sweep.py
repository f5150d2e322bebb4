"""``loomsim sweep``: many seeds of one scenario, both cores, one summary.

Each seed runs in its own process (``python -m sim [--scenarios MODULE ...]
run ... --json``: the sweep's scenario modules passed on, the entry points
loaded by the child itself), at most ``--jobs`` at a time; a line per finished seed shows progress. The
summary lists failing seeds with the command that reproduces each (and the
repro file each wrote), then coverage across the whole sweep: how often
each fault kind and failpoint fired, which never did, and which of the
scenario's ``sometimes`` properties no seed reached — a green sweep that
never reached the rare cases is a coverage gap, and says so.

Part of the face (like ``bench``): it reads the wall clock to report times
and starts processes; nothing simulated runs here.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any, Sequence

EXIT_PASS, EXIT_VIOLATION = 0, 1


# The directory holding the ``sim`` package (sim/face/sweep.py -> its root).
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _child(global_args: list[str], args: list[str]) -> subprocess.Popen:
    """``loomsim [global_args] run [args] --json`` in a new process, in this
    process's directory (where ``--scenarios`` modules are importable from)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.Popen([sys.executable, "-m", "sim", *global_args, "run", *args, "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _outcome(seed: int, proc: subprocess.Popen) -> dict[str, Any]:
    out, err = proc.communicate()
    if proc.returncode in (EXIT_PASS, EXIT_VIOLATION):
        try:
            return json.loads(out)
        except json.JSONDecodeError:
            pass
    line = (err.strip().splitlines() or ["no output"])[-1]
    return {"seed": seed, "status": "error", "error": f"exit {proc.returncode}: {line}"}


def sweep(scenario: Any, args: Any, child_args: list[str], global_args: Sequence[str] = ()) -> int:
    """Run ``args.seeds`` of ``scenario``, each as ``loomsim [global_args]
    run SCENARIO --seed N [child_args]``; print the summary."""
    seeds = list(args.seeds)
    started_s = time.perf_counter()
    running: list[tuple[int, subprocess.Popen]] = []
    results: dict[int, dict[str, Any]] = {}
    pending = list(seeds)
    while pending or running:
        while pending and len(running) < args.jobs:
            seed = pending.pop(0)
            running.append((seed, _child(list(global_args), [scenario.name, "--seed", str(seed), *child_args])))
        for entry in list(running):
            seed, proc = entry
            if proc.poll() is None:
                continue
            running.remove(entry)
            result = results[seed] = _outcome(seed, proc)
            if not args.json:
                _progress(len(results), len(seeds), seed, result)
        if running:
            time.sleep(0.05)
    summary = summarize(scenario, [results[s] for s in seeds], time.perf_counter() - started_s, args.jobs)
    if args.json:
        print(json.dumps(summary, ensure_ascii=False))
    else:
        print(render(summary))
    return EXIT_PASS if summary["failed"] == 0 and summary["errors"] == 0 else EXIT_VIOLATION


def _progress(done: int, total: int, seed: int, result: dict[str, Any]) -> None:
    status = result["status"]
    if status == "pass":
        detail = f"{result['wall_s']:.1f}s"
    elif status in ("fail", "detected"):
        first = result["violations"][0]
        detail = f"{first['name']} at {first['simulated_time']}"
    else:
        detail = result["error"]
    print(f"[{done}/{total}] seed {seed}: {status.upper()} {detail}", flush=True)


def summarize(scenario: Any, results: list[dict[str, Any]], wall_s: float, jobs: int) -> dict[str, Any]:
    kinds: dict[str, int] = {}
    ports: dict[str, dict[str, int]] = {}
    failpoints: dict[str, int] = {}
    sometimes: dict[str, int] = {name: 0 for name in scenario.sometimes}
    failing = []
    errors = []
    for result in results:
        if result["status"] == "error":
            errors.append({"seed": result["seed"], "error": result["error"]})
            continue
        coverage = result.get("coverage") or {}
        for kind, count in coverage.get("fault_kinds", {}).items():
            kinds[kind] = kinds.get(kind, 0) + count
        for port, counts in coverage.get("ports", {}).items():
            total = ports.setdefault(port, {})
            for kind, count in counts.items():
                total[kind] = total.get(kind, 0) + count
        for name, counts in coverage.get("failpoints", {}).items():
            failpoints[name] = failpoints.get(name, 0) + counts["fired"]
        for name, held in coverage.get("sometimes", {}).items():
            sometimes[name] = sometimes.get(name, 0) + (1 if held else 0)
        if result["status"] == "fail":
            first = result["violations"][0]
            failing.append({"seed": result["seed"], "invariant": first["name"], "message": first["message"],
                            "simulated_time": first["simulated_time"], "repro_command": result["repro_command"],
                            "repro_file": result["repro_file"]})
    ran = [r for r in results if r["status"] != "error"]
    return {
        "scenario": scenario.name,
        "seeds": len(results),
        "passed": sum(1 for r in ran if r["status"] == "pass"),
        # Beyond the contract: runs whose broken promises were caught.
        "detected": sum(1 for r in ran if r["status"] == "detected"),
        "failed": len(failing),
        "errors": len(errors),
        "wall_s": round(wall_s, 2),
        "jobs": jobs,
        "failing": failing,
        "error_runs": errors,
        "fault_kinds_fired": kinds,
        "faults_by_port": {port: dict(sorted(c.items())) for port, c in sorted(ports.items())},
        "failpoints_fired": failpoints,
        "never_fired": [k for k, n in kinds.items() if n == 0] + [f for f, n in failpoints.items() if n == 0],
        "sometimes_reached": sometimes,
        "sometimes_never": [name for name, n in sometimes.items() if n == 0],
    }


def render(summary: dict[str, Any]) -> str:
    detected = f"{summary['detected']} detected, " if summary["detected"] else ""
    lines = [f"{summary['scenario']}: {summary['seeds']} seeds, {summary['passed']} passed, {detected}"
             f"{summary['failed']} failed, {summary['errors']} errors in {summary['wall_s']:.1f}s "
             f"({summary['jobs']} jobs)"]
    for fail in summary["failing"]:
        lines.append(f"  FAIL seed {fail['seed']}: {fail['invariant']} at {fail['simulated_time']}: "
                     f"{fail['message'][:120]}")
        lines.append(f"    reproduce: {fail['repro_command']}"
                     + (f"  (repro file {fail['repro_file']})" if fail["repro_file"] else ""))
    for error in summary["error_runs"]:
        lines.append(f"  ERROR seed {error['seed']}: {error['error']}")
    kinds = ", ".join(f"{k}={n}" for k, n in summary["fault_kinds_fired"].items())
    fps = ", ".join(f"{k}={n}" for k, n in summary["failpoints_fired"].items())
    lines.append(f"faults fired: {kinds or 'none'}")
    for port, counts in summary["faults_by_port"].items():
        lines.append(f"  at {port}: " + ", ".join(f"{k}={n}" for k, n in counts.items()))
    lines.append(f"failpoints fired: {fps or 'none'}")
    lines.append(f"never fired: {', '.join(summary['never_fired']) or 'none'}")
    reached = ", ".join(f"{k} in {n}" for k, n in summary["sometimes_reached"].items())
    lines.append(f"sometimes (seeds reaching each): {reached or 'none declared'}")
    if summary["sometimes_never"]:
        lines.append(f"COVERAGE GAP: never reached: {', '.join(summary['sometimes_never'])}")
    return "\n".join(lines)
