"""Sharded sweeps: ``sweep --shard I/N --out FILE`` and ``loomsim merge``.

The promise: merging the shards gives the unsharded sweep's summary (apart
from wall times and jobs) and exit code, with and without a failing seed; a
missing shard is said and exits 3; files that cannot be merged are refused
in one line. The failing seed is cheap and deterministic: ledger-storm seed
0 on the planted bug of ``tests.fixtures.buggy`` fails ``reference-model``
within 2h, and with ``--beyond-every 2`` seed 1 runs beyond the contract
(and ends DETECTED).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from faults.swarm import ROTATION_SEEDS
from sim.face import cli, shards
from sim.face.sweep import render

SWEEP = ["sweep", "--duration", "20m", "--jobs", "2"]


def _main(capsys, argv: list[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _normal(summary: dict, repro_dir: Path) -> dict:
    """The summary without what may differ between two sweeps of the same seeds."""
    body = json.loads(json.dumps(summary).replace(str(repro_dir), "REPRO"))
    for key in ("wall_s", "jobs", "shards"):
        body.pop(key, None)
    for run in body["runs"]:
        run.pop("wall_s")
    return body


def _text(text: str, repro_dir: Path) -> list[str]:
    return [line for line in text.replace(str(repro_dir), "REPRO").splitlines()
            if not line.startswith("sweep: ")]  # the line with the wall time


def _sharded(capsys, tmp_path: Path, flags: list[str], name: str) -> tuple[dict, list[Path], Path]:
    full_dir, shard_dir = tmp_path / f"{name}-full", tmp_path / f"{name}-shards"
    full_dir.mkdir()
    shard_dir.mkdir()
    code, out, _ = _main(capsys, [*SWEEP, *flags, "--json", "--repro-dir", str(full_dir)])
    full = json.loads(out)
    files = []
    for index in (1, 2):
        path = tmp_path / f"{name}-shard-{index}.json"
        shard_code, _, _ = _main(capsys, [*SWEEP, *flags, "--shard", f"{index}/2", "--out", str(path),
                                          "--repro-dir", str(shard_dir)])
        assert shard_code in (0, 1)
        files.append(path)
    full["exit"] = code
    return full, files, shard_dir


@pytest.mark.parametrize("flags,failing", [
    (["ledger-storm", "--seeds", "0:2", "--beyond-every", "2", "--store", "tests.fixtures.buggy:make",
      "--failure-db", "none"], True),
    (["sentinel-year", "--seeds", "0:2", "--beyond-every", "0", "--sqlite-every", "0"], False)])
def test_merged_shards_equal_the_unsharded_sweep(capsys, tmp_path, monkeypatch, flags, failing):
    monkeypatch.chdir(tmp_path)  # no failure database of the checkout's replays first
    full, files, shard_dir = _sharded(capsys, tmp_path, flags, "f" if failing else "p")
    full_dir = tmp_path / ("f-full" if failing else "p-full")
    code, out, _ = _main(capsys, ["merge", *map(str, files), "--json"])
    merged = json.loads(out)
    assert code == full["exit"] == (1 if failing else 0)
    assert merged["exit_code"] == full["exit_code"] == code  # the verdict it prints and reports is the one it exits with
    assert merged["shards"] == {"count": 2, "merged": [1, 2], "missing": [], "files": list(map(str, files))}
    assert _normal(merged, shard_dir) == _normal({k: v for k, v in full.items() if k != "exit"}, full_dir)
    if failing:
        # Both seeds meet two ready submissions in a conversation (the
        # newest-first claim's slip) since deferred requests come in pairs.
        assert [(f["seed"], f["invariant"]) for f in merged["failing"]] == [(0, "reference-model"),
                                                                           (1, "reference-model")]
    text_code, text, _ = _main(capsys, ["merge", *map(str, reversed(files))])
    assert text_code == code
    assert _text(text, shard_dir) == _text(render({k: v for k, v in full.items() if k != "exit"}), full_dir)
    # Each shard file keeps only what the summary reads of a seed.
    body = json.loads(files[0].read_text())
    assert body["format"] == "loomsim-shard/1" and body["shard"] == {"index": 1, "count": 2}
    assert all(set(r) <= set(shards.RESULT_KEYS) | {"violations", "config", "coverage", "beyond_contract", "stats"}
               for r in body["results"])
    if not failing:
        # A missing shard: said, its seeds not run, exit 3 (not 0).
        code, out, _ = _main(capsys, ["merge", str(files[0])])
        assert code == 3 and out.splitlines()[-2].startswith("ERROR (exit 3): ")
        assert "MISSING SHARDS: merged shards 1 of 2; shards 2 missing" in out
        assert "1 of 2 seeds" in out
        # Files that cannot be merged: one line each, exit 2.
        not_shard = tmp_path / "x.json"
        not_shard.write_text('{"format": "loomsim-sweep/1"}')
        other = tmp_path / "other.json"
        other.write_text(json.dumps({**body, "sweep": {**body["sweep"], "seeds": [0, 3]}}))
        for argv, message in ((["merge", str(not_shard)], "is not a loomsim shard file"),
                              (["merge", str(files[0]), str(files[0])], "given twice"),
                              (["merge", str(files[1]), str(other)], "differ in: seeds")):
            code, out, err = _main(capsys, argv)
            assert code == 2 and message in err and len(err.strip().splitlines()) == 1, (argv, err)
        # --out never overwrites: refused before anything runs.
        code, _, err = _main(capsys, [*SWEEP, *flags, "--shard", "1/2", "--out", str(files[0])])
        assert code == 2 and "exists" in err


def test_shards_partition_the_seeds_with_a_fair_mix():
    seeds = range(3, 67)
    for count in (1, 2, 3, 4, 5, 8):
        parts = [shards.shard_seeds(seeds, shards.Shard(i, count), beyond_every=8, sqlite_every=4)
                 for i in range(1, count + 1)]
        assert sorted(s for part in parts for s in part) == list(seeds)
        assert max(map(len, parts)) - min(map(len, parts)) <= 1
        for residue in range(16):  # every store, beyond-the-contract seeds (in memory, on SQLite), rotation: spread evenly
            shares = [sum(1 for s in part if s % 16 == residue) for part in parts]
            assert max(shares) - min(shares) <= 1, (count, residue, shares)
    assert shards.ROTATION_PERIOD == ROTATION_SEEDS


@pytest.mark.parametrize("text", ["0/2", "3/2", "2", "a/b", "1/0", "-1/2"])
def test_a_bad_shard_is_a_usage_error(capsys, text):
    code, _, err = _main(capsys, [*SWEEP, "sentinel-year", "--seeds", "0:2", f"--shard={text}"])
    assert code == 2 and "invalid shard" in err and len(err.strip().splitlines()) == 1
