"""``loomsim explore SCENARIO --runs N --seed S``: a deterministic coverage-guided search.

The engine is ``sim.explore``; this module parses the command, writes a
failing run's repro file (as ``run`` does: a new file, never over an
existing one), keeps the ``--corpus`` directory and prints the summary.
Exit codes as ``run``/``sweep``: 0 every run passed, 1 a failure found,
2 a usage error.
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any

from sim.explore import Entry, Input, Outcome, explore
from sim.face.options import UsageError, check_repro_dir, parse_count, parse_duration, parse_seed
from sim.face.repro_file import repro_command
from sim.face.run import write_repro_or_warn

STORES = ("memory", "sqlite")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("explore", help="coverage-guided search of one scenario's seeds, knobs and durations")
    p.add_argument("scenario", help="scenario name (see `loomsim list`)")
    p.add_argument("--runs", type=parse_count, required=True, metavar="N", help="runs to make (at least 1)")
    p.add_argument("--seed", type=parse_seed, required=True, help="the search's own seed: same seed, same search")
    p.add_argument("--duration", type=parse_duration, default=None, metavar="D",
                   help="base simulated duration of a run (mutations double it, up to 4x; default: the scenario's)")
    p.add_argument("--store", default="memory", metavar="STORE", help="memory or sqlite (default memory)")
    p.add_argument("--corpus", default=None, metavar="DIR",
                   help="keep the corpus in DIR as JSON files (an existing corpus there is replayed first)")
    p.add_argument("--repro-dir", default=".", metavar="DIR", help="where a failure's repro file is written")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    return p


def _load_corpus(directory: str, knob_names: set[str]) -> list[Input]:
    inputs = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".json"):
            continue
        path = os.path.join(directory, name)
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
            knobs = tuple(sorted((str(k), int(v)) for k, v in data.get("knobs", {}).items()))
            item = Input(seed=int(data["seed"]), knobs=knobs, duration_ms=int(data["duration_ms"]))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise UsageError(f"--corpus {path!r}: not a corpus entry ({error})") from None
        unknown = sorted({k for k, _ in knobs} - knob_names)
        if unknown or item.duration_ms <= 0 or not 0 <= item.seed < 2 ** 63:
            raise UsageError(f"--corpus {path!r}: not a corpus entry of this scenario")
        inputs.append(item)
    return inputs


def command(args: argparse.Namespace) -> int:
    from scenarios import registry

    try:
        scenario = registry.get(args.scenario)
    except registry.UnknownScenario as error:
        raise UsageError(str(error)) from None
    if args.runs < 1:
        raise UsageError(f"--runs {args.runs}: expected at least 1")
    if args.store not in STORES:
        raise UsageError(f"--store {args.store!r}: expected memory or sqlite")
    check_repro_dir(args.repro_dir)
    space = scenario.swarm_space
    knob_names = {k.name for k in space.knobs} if space is not None else set()
    replay: list[Input] = []
    if args.corpus is not None:
        if os.path.exists(args.corpus) and not os.path.isdir(args.corpus):
            raise UsageError(f"--corpus {args.corpus!r} is not a directory")
        os.makedirs(args.corpus, exist_ok=True)
        replay = _load_corpus(args.corpus, knob_names)
    duration_ms = args.duration or scenario.default_duration_ms
    from faults import mutants as mx

    mutant = mx.current()

    def on_failure(item: Input, opts: Any, result: Any) -> tuple[str, str | None]:
        if mutant is not None:
            result.config["mutant"] = mutant.name
        cmd = repro_command(scenario.name, opts, explicit_duration=True,
                            mutant=None if mutant is None else mutant.name)
        return cmd, write_repro_or_warn(result, cmd, args.repro_dir)

    def on_entry(entry: Entry) -> None:
        if args.corpus is None:
            return
        path = os.path.join(args.corpus, f"{entry.digest()}.json")
        if not os.path.exists(path):
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(entry.as_json(), handle, sort_keys=True, indent=1)
                handle.write("\n")

    outcome = explore(scenario, runs=args.runs, seed=args.seed, duration_ms=duration_ms, store=args.store,
                      replay=replay, on_failure=on_failure, on_entry=on_entry)
    if args.json:
        print(json.dumps({"format": "loomsim-explore/1", "scenario": scenario.name, "seed": args.seed,
                          **outcome.as_json()}, sort_keys=True))
    else:
        _print_summary(scenario.name, args.seed, outcome)
    return 1 if outcome.findings else 0


def _print_summary(name: str, seed: int, outcome: Outcome) -> None:
    print(f"explore {name} --seed {seed}: {outcome.runs} run(s), corpus {len(outcome.corpus)} entr"
          f"{'y' if len(outcome.corpus) == 1 else 'ies'}, {len(outcome.counts)} feature(s) reached")
    for entry in outcome.corpus:
        knobs = " ".join(f"{k}={v}" for k, v in entry.input.knobs)
        print(f"  seed {entry.input.seed} {entry.input.duration_ms}ms {knobs}: +{len(entry.added)} feature(s)")
    if not outcome.findings:
        print("no failures")
    for finding in outcome.findings:
        print(f"FAILURE ({finding.status}: {', '.join(finding.violations) or '-'}): {finding.repro_command}")
        if finding.repro_file:
            print(f"  repro file: {finding.repro_file}")
