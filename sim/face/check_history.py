"""``loomsim check-history FILE...``: judge a recorded history from the outside.

A history file (``scenarios.reference.history_file``, ``loomsim-history/1``)
holds each operation as its caller saw it: invocation, completion and
answer, or no completion at all (``UNKNOWN``); one file per process, and
several files are one history. Each object (a durable-state
key, a conversation log, a submission's lease) is checked for
linearizability against its sequential model (``scenarios.reference.
history``, Wing–Gong–Lowe with memoisation); ``--anomalies`` also builds
the dependency graph and names its cycles (G0, G1c, G-single, G2).

Verdicts and exit codes: ``PASS`` (0) every object linearizable; ``FAIL``
(1) one is not, with its shortest non-linearizable window; ``UNDECIDED``
(1) none failed but the search ran out of its step budget on some object:
a history that was not judged is never a pass. A file that is not a
history is one ``loomsim: error:`` line (exit 2).

Part of the face: it reads no clock; nothing simulated runs here.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

from sim.face.options import UsageError, parse_count

EXIT_PASS, EXIT_FAIL = 0, 1
STEPS_MAX = 100_000_000
RESULT_FORMAT = "loomsim-history-verdict/1"


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("check-history", help="judge a recorded history (loomsim live's) for linearizability")
    p.add_argument("files", nargs="+", metavar="FILE", help="history files (loomsim-history/1), one per process")
    p.add_argument("--budget-steps", type=parse_count, default=None, metavar="N",
                   help="search steps per object before it is left undecided (default: the checker's)")
    p.add_argument("--anomalies", action="store_true",
                   help="also build the dependency graph and name its cycles (G0, G1c, G-single, G2)")
    p.add_argument("--json", action="store_true", help=f"print the verdict as JSON ({RESULT_FORMAT})")
    return p


def command(args: argparse.Namespace) -> int:
    from scenarios.reference.history import BUDGET_STEPS_DEFAULT, check_history
    from scenarios.reference.history_file import HistoryFileError, read_histories

    budget = args.budget_steps if args.budget_steps is not None else BUDGET_STEPS_DEFAULT
    if not 1 <= budget <= STEPS_MAX:
        raise UsageError(f"--budget-steps {budget}: expected 1 to {STEPS_MAX}")
    try:
        ops, models, headers = read_histories(args.files)
    except HistoryFileError as error:
        raise UsageError(str(error)) from None
    verdict = check_history(ops, models, budget, anomalies=args.anomalies)
    outcome = verdict.outcome
    status = {"ok": "pass", "violation": "fail", "unknown": "undecided"}[outcome]
    unknown_ops = sum(1 for o in ops if o.complete_ms is None)
    failing = [v for v in verdict.objects if v.outcome == "violation"]
    undecided = [v for v in verdict.objects if v.outcome == "unknown"]
    if args.json:
        print(json.dumps({"format": RESULT_FORMAT, "status": status, "files": list(args.files),
                          "sources": sorted({h.get("source") for h in headers}), "ops": len(ops),
                          "unknown_ops": unknown_ops, "objects": len(verdict.objects),
                          "violations": [v.describe() for v in failing],
                          "undecided": [v.key for v in undecided],
                          "anomalies": [a.describe() for a in verdict.anomalies],
                          "steps": sum(v.steps for v in verdict.objects)}, sort_keys=True))
    else:
        print(f"history: {len(ops)} operations ({unknown_ops} unknown) on {len(verdict.objects)} objects, "
              f"from {len(args.files)} file(s)")
        for v in failing + undecided:
            print(v.describe())
        for anomaly in verdict.anomalies:
            print(anomaly.describe())
        if status == "pass":
            print(f"PASS: every object's history is linearizable ({len(verdict.objects)} objects)")
        elif status == "fail":
            print(f"FAIL: {len(failing)} object(s) not linearizable")
        else:
            print(f"UNDECIDED: {len(undecided)} object(s) too costly to judge within {budget} steps; none failed "
                  f"(raise --budget-steps)")
    return EXIT_PASS if status == "pass" else EXIT_FAIL
