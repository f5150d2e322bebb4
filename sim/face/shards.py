"""Sharded sweeps: ``loomsim sweep --shard I/N --out FILE`` (``loomsim merge`` reads the files: ``sim.face.merge``).

A CI matrix is the distributed engine: N jobs each run ``sweep ... --shard
I/N --out shard-I.json``, one job runs ``merge shard-*.json``, and the merge
prints the summary the unsharded sweep would have printed (apart from wall
times and jobs), with the same exit code. So the merge recomputes the
summary with the sweep's own ``summarize_scenario``/``summarize_sweep`` from
the per-seed child results each shard file keeps: the two summaries cannot
drift apart.

Which seeds a shard owns (``shard_seeds``): the sweep decides a seed's
store, whether it runs beyond the contract and which fault kinds the swarm's
rotation forces on *by seed number* (every 4th on SQLite, every 8th beyond
the contract, every 16th beyond the contract on SQLite, a covering design
over 8 consecutive seeds). Dealing seed
index ``i`` to shard ``i % N`` would give shard 2 of 4 every SQLite seed and
no other. So the range is first ordered by ``seed % P`` (``P`` the least
common multiple of those periods), then dealt round-robin: each shard gets
an equal share (to one seed) of every residue class, hence of every store,
of the beyond-the-contract seeds and of the rotation, and the shards' sizes
differ by one seed at most.

A shard file (``loomsim-shard/1``) holds the shard's identity (index and
count), the sweep's identity (seed range, scenarios with their
``sometimes`` properties, every flag that changes a seed's result), the
shard's printed summary, and per seed only the fields the summary reads
(``compact_result``), so a shard of thousands of seeds stays small. It is
created exclusively: ``--out`` naming an existing file is refused before
anything runs (a CI step must not silently merge an old shard), and a file
that appears meanwhile leaves the new one at the next free ``-2`` name (as
repro files do), said on stderr.

Part of the face: it reads no clock; nothing simulated runs here.
"""
from __future__ import annotations

import json
import math
import os
import sys
from typing import Any, Iterable, Iterator, Mapping, Sequence

import attrs

from sim.face.options import UsageError
from sim.numbers import NumberError, parse_whole

SHARD_FORMAT = "loomsim-shard/1"
ROTATION_PERIOD = 8  # faults.swarm.ROTATION_SEEDS: the covering design's period (kept in step by a test)
# A child's result is a big object; the summary reads these of it (``compact_result``).
RESULT_KEYS = ("scenario", "seed", "store", "beyond", "status", "error", "trace_digest", "wall_s", "invariants",
               "repro_command", "repro_file")
COVERAGE_KEYS = ("fault_kinds", "beyond_contract", "armed", "ports", "failpoints", "sometimes")


class ShardError(UsageError):
    """A bad ``--shard``/``--out`` or shard file: one usage-error line, exit 2."""


@attrs.frozen
class Shard:
    """Shard ``index`` (1-based) of ``count``."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """``I/N`` with 1 <= I <= N; else ``ShardError``."""
    index, sep, count = text.partition("/")
    try:
        shard = Shard(parse_whole(index), parse_whole(count)) if sep else None
    except NumberError:
        shard = None
    if shard is None or not 1 <= shard.index <= shard.count:
        raise ShardError(f"invalid shard {text!r}: expected I/N with 1 <= I <= N, e.g. --shard 2/4")
    return shard


def period(beyond_every: int, sqlite_every: int) -> int:
    """The period over which seeds differ by number alone (store, beyond, rotation)."""
    # Every second beyond seed runs on SQLite (``SweepOptions.beyond_on_sqlite``): 2 * beyond_every.
    return math.lcm(ROTATION_PERIOD, max(1, 2 * beyond_every), max(1, sqlite_every))


@attrs.frozen
class ShardSeeds:
    """The seeds of ``seeds`` that ``shard`` runs, ascending (see the module
    doc), computed as they are read: a seed's place in the dealing order
    is arithmetic (``_position``), so neither the range nor the shard is
    ever listed, whatever its size."""

    seeds: range
    shard: Shard
    period: int

    def __len__(self) -> int:
        return len(range(self.shard.index - 1, len(self.seeds), self.shard.count))

    def __iter__(self) -> Iterator[int]:
        # A shard owns one seed in every ``count`` of the dealing order: at most
        # ``count`` seeds are looked at per seed yielded.
        return (seed for seed in self.seeds if self._owns(seed))

    def __contains__(self, seed: object) -> bool:
        return isinstance(seed, int) and seed in self.seeds and self._owns(seed)

    def _owns(self, seed: int) -> bool:
        return self._position(seed) % self.shard.count == self.shard.index - 1

    def _position(self, seed: int) -> int:
        """``seed``'s index in ``seeds`` ordered by ``(seed % period, seed)``:
        the seeds of the residues below its own, then its own class's
        seeds below it."""
        p, first = self.period, self.seeds.start
        whole, extra = divmod(len(self.seeds), p)  # every residue has ``whole`` seeds, ``extra`` residues one more
        residue = seed % p
        # The residues with one more seed: ``extra`` of them, cyclically from ``first % p``.
        lo = first % p
        hi = lo + extra
        more_below = max(0, min(residue, hi) - lo) + max(0, min(residue, hi - p))
        return residue * whole + more_below + (seed - first) // p


def shard_seeds(seeds: range, shard: Shard, *, beyond_every: int, sqlite_every: int) -> ShardSeeds:
    """The seeds of ``seeds`` that ``shard`` runs, ascending (see the module doc): lazy."""
    return ShardSeeds(seeds, shard, period(beyond_every, sqlite_every))


# The run statistics ``summarize_scenario`` adds up over seeds.
STATS_KEYS = ("recovery_decisions", "recovery_dispositions")


def compact_result(result: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a child's result that ``summarize_scenario`` and
    ``seed_record`` read, and nothing else: its first violation only, the
    swarm's choices and pinned rates of its config, its coverage counts,
    its broken promises only where they are read (a beyond-the-contract
    seed that passed green: the summary says how many), and the statistics
    the summary adds up (``STATS_KEYS``)."""
    small = {key: result[key] for key in RESULT_KEYS if key in result}
    violations = result.get("violations") or []
    if violations:
        first = violations[0]
        small["violations"] = [{k: first.get(k) for k in ("name", "message", "simulated_time")}]
    config = result.get("config") or {}
    kept = {}
    if "swarm" in config:
        swarm = config["swarm"]
        kept["swarm"] = (None if swarm is None
                         else {k: swarm[k] for k in ("fault_kinds", "failpoints") if k in swarm})
    if config.get("rates") is not None:
        kept["rates"] = config["rates"]
    if kept:
        small["config"] = kept
    coverage = result.get("coverage")
    if coverage:
        small["coverage"] = {k: coverage[k] for k in COVERAGE_KEYS if k in coverage}
    if result.get("beyond") and result.get("status") == "pass":
        small["beyond_contract"] = list(result.get("beyond_contract") or ())
    stats = {key: result["stats"][key] for key in STATS_KEYS if key in (result.get("stats") or {})}
    if stats:
        small["stats"] = stats
    return small


def sweep_identity(seeds: range, scenarios: Sequence[Any], child_args: Mapping[str, Sequence[str]],
                   global_args: Sequence[str], flags: Mapping[str, Any], shard_count: int) -> dict[str, Any]:
    """What every shard of one sweep shares: the seed range, the shard
    count, the scenarios (with what their summaries need: ``sometimes``),
    the scenario modules, each scenario's ``run`` flags (duration, store,
    pins...; the repro directory left out: where each shard writes its
    repro files is its own) and the sweep's own flags (``flags``)."""
    return {
        "seeds": [seeds.start, seeds.stop],
        "shard_count": shard_count,
        "scenarios": [{"name": s.name, "sometimes": list(s.sometimes)} for s in scenarios],
        "global_args": list(global_args),
        "run_args": {s.name: _without_repro_dir(child_args[s.name]) for s in scenarios},
        "flags": dict(flags),
    }


def _without_repro_dir(args: Sequence[str]) -> list[str]:
    kept, skip = [], False
    for token in args:
        if skip:
            skip = False
        elif token == "--repro-dir":
            skip = True
        else:
            kept.append(token)
    return kept


def check_out(path: str) -> None:
    """Before a sharded sweep runs: ``--out`` must be a new file in an existing directory."""
    if os.path.exists(path):
        raise ShardError(f"--out {path!r} exists: a shard file is never overwritten; remove it or choose another name")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ShardError(f"--out {path!r}: directory {parent!r} does not exist")


@attrs.frozen
class ShardWriter:
    """Called by the sweep with its summary and results: writes the shard file."""

    path: str
    shard: Shard
    identity: Mapping[str, Any]

    def __call__(self, summary: Mapping[str, Any], results: Iterable[Mapping[str, Any]],
                 executed: Mapping[str, Iterable[int]] | None = None) -> str | None:
        body = {"format": SHARD_FORMAT, "shard": {"index": self.shard.index, "count": self.shard.count},
                "sweep": dict(self.identity), "summary": dict(summary),
                "results": [compact_result(r) for r in results]}
        if executed is not None:
            body["model_lines"] = {name: sorted(lines) for name, lines in sorted(executed.items())}
        from sim.artifacts import create_exclusive

        try:
            path, handle = create_exclusive(self.path)
            with handle:
                json.dump(body, handle, ensure_ascii=False, separators=(",", ":"))
        except OSError as error:
            print(f"loomsim: warning: could not write shard file {self.path!r}: {error.strerror or error}",
                  file=sys.stderr)
            return None
        if path != self.path:
            print(f"loomsim: warning: {self.path!r} appeared meanwhile; the shard is in {path!r}", file=sys.stderr)
        return path


def plan_shard(shard_text: str | None, out: str | None, scenarios: Sequence[Any], opts: Any,
               child_args: Mapping[str, Sequence[str]], global_args: Sequence[str]) -> tuple[Any, ShardWriter | None]:
    """``sweep --shard I/N --out FILE``: the sweep's options with the shard's
    seeds, and the writer of its file (None without ``--out``). ``--out``
    alone is shard 1/1: the whole sweep, mergeable. Checked before anything runs."""
    if shard_text is None and out is None:
        return opts, None
    shard = parse_shard(shard_text) if shard_text is not None else Shard(1, 1)
    if out is not None:
        check_out(out)
    seeds = shard_seeds(opts.seeds, shard, beyond_every=opts.beyond_every, sqlite_every=opts.sqlite_every)
    sharded = attrs.evolve(opts, seeds=seeds)
    if out is None:
        return sharded, None
    flags = {"beyond_every": opts.beyond_every, "all_beyond": opts.all_beyond, "sqlite_every": opts.sqlite_every,
             "require_coverage": opts.require_coverage, "time_budget_s": opts.time_budget_s,
             "model_coverage": opts.model_coverage}
    identity = sweep_identity(opts.seeds, scenarios, child_args, global_args, flags, shard.count)
    return sharded, ShardWriter(out, shard, identity)
