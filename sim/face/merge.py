"""``loomsim merge FILE...``: the shard files of a sharded sweep combined into the sweep's summary;
``loomsim merge --corpus OUT DIR...``: corpus directories folded into one.

The merge recomputes the summary with the sweep's own
``summarize_scenario``/``summarize_sweep`` from the per-seed child results
each shard file keeps (``sim.face.shards``: which seeds a shard owns and
what its file holds), so the merged verdict cannot drift from an unsharded
one; missing shards are named (exit 3), a file that is not a shard, shards
of different sweeps or a shard given twice are usage errors.

With ``--corpus OUT`` the arguments are corpus directories (``loomsim
explore --corpus DIR``, e.g. one per CI shard): ``sim.face.corpus.merge``
folds their entries into OUT, each input one file named by the input, so
an entry found on two shards is kept once and nothing in OUT is rewritten.
Every directory is read, and every entry checked, before OUT is touched: a
bad one is a usage error and nothing is written.

Part of the face: it reads no clock; nothing simulated runs here.
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any, Mapping, Sequence

import attrs

from sim.face import corpus, model_coverage
from sim.face.options import UsageError, check_report_option, write_report_or_warn
from sim.face.shards import SHARD_FORMAT, ShardError
from sim.face.sweep import render, seal, seed_record, summarize_scenario, summarize_sweep


def read_shard(path: str) -> dict[str, Any]:
    """A shard file's body, its format checked (``ShardError`` otherwise)."""
    try:
        with open(path, encoding="utf-8") as handle:
            body = json.load(handle)
    except OSError as error:
        raise ShardError(f"cannot read shard file {path!r}: {error.strerror or error}") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ShardError(f"{path!r} is not a loomsim shard file (not JSON)") from None
    if not isinstance(body, dict) or body.get("format") != SHARD_FORMAT:
        raise ShardError(f"{path!r} is not a loomsim shard file (format {SHARD_FORMAT}); "
                         "write one with loomsim sweep ... --shard I/N --out FILE")
    try:
        shard = body["shard"]
        index, count = int(shard["index"]), int(shard["count"])
        assert 1 <= index <= count and isinstance(body["sweep"], dict) and isinstance(body["results"], list)
    except (KeyError, TypeError, ValueError, AssertionError):
        raise ShardError(f"shard file {path!r} is malformed: no valid shard, sweep or results") from None
    return body


@attrs.frozen
class _ScenarioView:
    """What ``summarize_scenario`` needs of a scenario, from a shard file."""

    name: str
    sometimes: tuple[str, ...]


def merge(paths: Sequence[str]) -> dict[str, Any]:
    """The merged summary (``merge_shards``'s, without the sweep's identity)."""
    return merge_shards(paths)[0]


def merge_shards(paths: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The summary of the sweep the shards at ``paths`` are parts of, as
    the unsharded sweep computes it, plus ``shards`` (which were merged,
    which are missing: their seeds count as not run). ``ShardError`` on a
    file that is not a shard, shards of different sweeps, a shard twice."""
    if not paths:
        raise ShardError("merge: no shard files given")
    bodies: dict[int, tuple[str, dict[str, Any]]] = {}
    identity: dict[str, Any] | None = None
    first = ""
    for path in paths:
        body = read_shard(path)
        if identity is None:
            identity, first = body["sweep"], path
        elif body["sweep"] != identity:
            differ = sorted(k for k in set(identity) | set(body["sweep"]) if identity.get(k) != body["sweep"].get(k))
            raise ShardError(f"{path!r} is a shard of another sweep than {first!r} (they differ in: "
                             f"{', '.join(differ)})")
        index = body["shard"]["index"]
        if index in bodies:
            raise ShardError(f"shard {index}/{body['shard']['count']} given twice: {bodies[index][0]!r} and {path!r}")
        bodies[index] = (path, body)
    assert identity is not None
    count = int(identity["shard_count"])
    start, stop = identity["seeds"]
    seeds = range(int(start), int(stop))
    scenarios = [_ScenarioView(s["name"], tuple(s["sometimes"])) for s in identity["scenarios"]]
    results: dict[tuple[str, int], dict[str, Any]] = {}
    for _, body in bodies.values():
        for result in body["results"]:
            results[(result["scenario"], result["seed"])] = result
    # Seed-major, as the unsharded sweep ran them; only the seeds that ran are read (the range may be huge).
    order = {s.name: i for i, s in enumerate(scenarios)}
    ran = sorted((key for key in results if key[0] in order and key[1] in seeds),
                 key=lambda key: (key[1], order[key[0]]))
    per_scenario = [summarize_scenario(s, [results[key] for key in ran if key[0] == s.name], planned=len(seeds))
                    for s in scenarios]
    summaries = [body["summary"] for _, body in bodies.values()]
    stopped = [s["budget_stopped_at_s"] for s in summaries if s.get("budget_stopped")]
    summary = summarize_sweep(per_scenario, wall_s=max(s.get("wall_s") or 0.0 for s in summaries),
                              jobs=max(int(s.get("jobs") or 1) for s in summaries),
                              time_budget_s=identity["flags"].get("time_budget_s"),
                              budget_stopped_s=max(stopped) if stopped else None)
    if any("saved_failures" in s for s in summaries):
        # The failure database's replays (``sim.face.failures``) are the sweep's, not a seed's:
        # each shard may have replayed the same ones; each is listed once.
        saved: dict[str, Any] = {}
        for s in summaries:
            for replay in s.get("saved_failures") or ():
                saved.setdefault(json.dumps(replay, sort_keys=True), replay)
        summary["saved_failures"] = list(saved.values())
    if any("corpus_replays" in s for s in summaries):
        # So are the corpus's entries (``sim.face.corpus_replay``): every shard replayed them; each once.
        entries: dict[str, Any] = {}
        for s in summaries:
            for replay in s.get("corpus_replays") or ():
                entries.setdefault(json.dumps({k: v for k, v in replay.items() if k not in ("repro_file",)},
                                              sort_keys=True), replay)
        summary["corpus_replays"] = list(entries.values())
    # Each seed's record as its shard's sweep made it (``sweep.seed_record``: what a report draws
    # of a failing seed included), in the unsharded sweep's order: seed-major.
    records = {(r["scenario"], r["seed"]): r for s in summaries for r in s.get("runs", ())}
    summary["runs"] = [records[key] if key in records else seed_record(results[key]) for key in ran]
    lined = [body for _, body in bodies.values() if "model_lines" in body]
    if lined:
        executed: dict[str, set[int]] = {}
        for body in lined:
            model_coverage.merge(executed, body["model_lines"])
        lost = sum(int(body["summary"].get("model_coverage", {}).get("tracing_lost_seeds", 0)) for body in lined)
        summary["model_coverage"] = {**model_coverage.report(executed), "tracing_lost_seeds": lost}
    present = sorted(bodies)
    missing = [i for i in range(1, count + 1) if i not in bodies]
    summary["shards"] = {"count": count, "merged": present, "missing": missing,
                         "files": [bodies[i][0] for i in present]}
    return summary, identity


def render_merge(summary: Mapping[str, Any]) -> str:
    """The sweep's summary; then, if shards are missing, which (their seeds were not run)."""
    text = render(summary)
    shards = summary["shards"]
    if shards["missing"]:
        not_run = summary["seeds"] - summary["ran"]
        text += (f"\nMISSING SHARDS: merged shards {','.join(map(str, shards['merged']))} of {shards['count']}; "
                 f"shards {','.join(map(str, shards['missing']))} missing: {not_run} seed run(s) not run")
    return text


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """``loomsim merge``'s arguments."""
    p = sub.add_parser("merge", help="combine the shard files of a sharded sweep (sweep --shard I/N --out FILE) "
                                     "into the sweep's summary and exit code; with --corpus OUT, fold corpus "
                                     "directories into OUT")
    p.add_argument("files", nargs="+", metavar="FILE", help="the shard files, e.g. shard-*.json (with --corpus: "
                                                            "the corpus directories)")
    p.add_argument("--corpus", default=None, metavar="OUT",
                   help="fold the corpus directories given (explore --corpus DIR) into OUT (made if missing); "
                        "entries already in OUT are kept as they are")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object (as sweep --json)")
    p.add_argument("--require-coverage", action="store_true",
                   help="exit 1 on a coverage gap (also when the shards were swept with it)")
    p.add_argument("--report", default=None, metavar="DIR", help="also write the sweep's report into DIR")
    return p


def command(args: Any) -> int:
    """``loomsim merge``."""
    if args.corpus is not None:
        given = [flag for flag, on in (("--json", args.json), ("--require-coverage", args.require_coverage),
                                       ("--report", args.report is not None)) if on]
        if given:
            raise UsageError(f"merge --corpus folds corpus directories and takes no {', '.join(given)}")
        return merge_corpus_command(args.corpus, args.files)
    return merge_command(args.files, json_output=args.json, require_coverage=args.require_coverage,
                         report_dir=args.report)


def merge_command(paths: Sequence[str], *, json_output: bool, require_coverage: bool,
                  report_dir: str | None = None) -> int:
    """``loomsim merge FILE... [--json] [--require-coverage] [--report DIR]``."""
    if report_dir is not None:
        _check_report_dir(report_dir)
    summary, identity = merge_shards(paths)
    required = require_coverage or bool(identity["flags"].get("require_coverage"))
    code = seal(summary, require_coverage=required)  # the verdict the output, the report and the exit share
    print(json.dumps(summary, ensure_ascii=False) if json_output else render_merge(summary), flush=True)
    if report_dir is not None:
        _write_report(report_dir, summary, to_stderr=json_output)
    return code


def merge_corpus_command(out_directory: str, directories: Sequence[str]) -> int:
    """``loomsim merge --corpus OUT DIR...``: one line, ``merged N entries
    into OUT (M already there)`` (N written now, M whose input OUT held)."""
    for directory in directories:  # a shard file given by mistake says so before any entry is read
        if os.path.exists(directory) and not os.path.isdir(directory):
            raise UsageError(f"corpus {directory!r} is not a directory (merge --corpus takes corpus directories)")
    try:
        added, present = corpus.merge(out_directory, directories)
    except corpus.CorpusError as error:
        raise UsageError(str(error)) from None
    except OSError as error:
        raise UsageError(f"cannot write into corpus {out_directory!r}: {error.strerror or error}") from None
    print(f"merged {added} entr{'y' if added == 1 else 'ies'} into {out_directory} ({present} already there)",
          flush=True)
    return 0


def _check_report_dir(directory: str) -> None:
    """``merge --report DIR``: checked before merging, as ``sweep --report`` is."""
    check_report_option(directory)


def _write_report(directory: str, summary: Mapping[str, Any], *, to_stderr: bool) -> None:
    """The merged sweep's report, as ``sweep --report`` writes its own
    (``reports.write_report`` through ``options.write_report_or_warn``)."""
    write_report_or_warn(directory, dict(summary), to_stderr=to_stderr)
