"""The corpus: inputs that reached new behaviour, kept as files (``loomsim explore --corpus DIR``).

One JSON file per input, ``loomsim-corpus/1``::

    {"format": "loomsim-corpus/1", "scenario": "ledger-storm", "store": "memory",
     "seed": 1234, "knobs": {"stale_renewals": 1}, "duration_ms": 600000,
     "fault_script": [...],            # optional: the run's faults come from it alone
     "added": ["port:ledger.claim/ack-lost", ...]}   # what it added when it joined

An entry is an input, not a verdict: it is what a ``loomsim run`` command
line pins (seed, swarm knobs, duration, optionally a fault script in the
format of ``faults.script``), so replaying it is running it. The file is
named by a digest of the input alone (``added`` is left out), so the same
input found twice, or on two CI shards, is one file; a file is created
exclusively and never rewritten. ``merge`` folds corpus directories into
one (``loomsim merge --corpus OUT DIR...``).

Files of the first explore corpora (no ``format``: seed, knobs,
duration_ms, added) are read as entries of the scenario being explored.

Part of the face: it reads no clock; nothing simulated runs here.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Iterable, Mapping

CORPUS_FORMAT = "loomsim-corpus/1"
INPUT_FIELDS = ("scenario", "store", "seed", "knobs", "duration_ms", "fault_script", "branch")
ENTRY_FILES_MAX = 100_000  # files read from one corpus directory
SEED_LIMIT = 2 ** 63


class CorpusError(ValueError):
    """A corpus file or directory that cannot be used; the message names it."""

    name = "CorpusError"


def entry_json(*, scenario: str, store: str, seed: int, knobs: Mapping[str, int], duration_ms: int,
               fault_script: list[dict[str, Any]] | None = None, added: Iterable[str] = (),
               branch: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A corpus entry's body (``branch``: ``{"fork_at_ms", "key", "streams"}``, stream
    families re-keyed from an instant on, as ``run --fork-at --branch --branch-streams``)."""
    assert duration_ms > 0 and 0 <= seed < SEED_LIMIT, (seed, duration_ms)
    body: dict[str, Any] = {"format": CORPUS_FORMAT, "scenario": scenario, "store": store, "seed": seed,
                            "knobs": {str(k): int(v) for k, v in sorted(knobs.items())},
                            "duration_ms": duration_ms, "added": sorted(added)}
    if fault_script is not None:
        body["fault_script"] = list(fault_script)
    if branch is not None:
        body["branch"] = {"fork_at_ms": int(branch["fork_at_ms"]), "key": int(branch["key"]),
                          "streams": [str(f) for f in branch.get("streams", ())]}
    return body


def check_branch(branch: Any, duration_ms: int) -> str | None:
    """What is wrong with an entry's ``branch`` (None: nothing)."""
    if not isinstance(branch, dict):
        return "branch must be an object {fork_at_ms, key, streams}"
    whole = [branch.get(field) for field in ("fork_at_ms", "key")]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in whole):
        return "branch.fork_at_ms and branch.key must be non-negative integers"
    if whole[0] >= duration_ms:
        return "branch.fork_at_ms must be before the run's end"
    streams = branch.get("streams", [])
    if (not isinstance(streams, list) or not all(isinstance(f, str) and f and "/" not in f for f in streams)
            or streams != sorted(set(streams))):
        return "branch.streams must be a sorted list of stream family names"
    return None


def input_digest(body: Mapping[str, Any]) -> str:
    """A digest of the input an entry pins (never of what it added)."""
    material = {k: body[k] for k in INPUT_FIELDS if k in body}
    text = json.dumps(material, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def entry_filename(body: Mapping[str, Any]) -> str:
    scenario = "".join(c if c.isalnum() or c in "-_" else "_" for c in str(body.get("scenario", "input")))
    return f"{scenario}-{input_digest(body)}.json"


def write_entry(directory: str, body: Mapping[str, Any]) -> str | None:
    """Save ``body`` in ``directory``; its path, or None when the same input
    is already there (the file is created exclusively, never rewritten)."""
    path = os.path.join(directory, entry_filename(body))
    try:
        handle = open(path, "x", encoding="utf-8")
    except FileExistsError:
        return None
    with handle:
        json.dump(dict(body), handle, sort_keys=True, indent=1)
        handle.write("\n")
    return path


def check_directory(directory: str, *, create: bool) -> None:
    """A corpus directory usable as one (made when ``create``)."""
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise CorpusError(f"corpus {directory!r} is not a directory")
    if not os.path.exists(directory):
        if not create:
            raise CorpusError(f"corpus {directory!r} does not exist")
        try:
            os.makedirs(directory)
        except OSError as error:
            raise CorpusError(f"cannot create corpus directory {directory!r}: {error.strerror or error}") from None


def _entry(data: Any, path: str, scenario: str | None) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise CorpusError(f"{path!r} is not a loomsim corpus entry (not a JSON object)")
    legacy = "format" not in data
    if not legacy and data.get("format") != CORPUS_FORMAT:
        raise CorpusError(f"{path!r} is not a loomsim corpus entry (format {data.get('format')!r}, "
                          f"expected {CORPUS_FORMAT})")
    try:
        seed = data["seed"]
        duration_ms = data["duration_ms"]
        knobs = data.get("knobs", {})
        ok = (isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < SEED_LIMIT
              and isinstance(duration_ms, int) and not isinstance(duration_ms, bool) and duration_ms > 0
              and isinstance(knobs, dict)
              and all(isinstance(v, int) and not isinstance(v, bool) for v in knobs.values()))
    except KeyError as error:
        raise CorpusError(f"{path!r} is not a loomsim corpus entry (no {error.args[0]!r})") from None
    if not ok:
        raise CorpusError(f"{path!r} is not a loomsim corpus entry (seed, duration_ms or knobs malformed)")
    script = data.get("fault_script")
    if script is not None and not isinstance(script, list):
        raise CorpusError(f"{path!r}: fault_script must be a list of fault events")
    branch = data.get("branch")
    problem = None if branch is None else check_branch(branch, duration_ms)
    if problem is not None:
        raise CorpusError(f"{path!r}: {problem}")
    body = entry_json(scenario=str(data.get("scenario", scenario or "")), store=str(data.get("store", "memory")),
                      seed=seed, knobs=knobs, duration_ms=duration_ms, fault_script=script,
                      added=[str(a) for a in data.get("added", ())], branch=branch)
    if legacy and scenario is None:
        raise CorpusError(f"{path!r} names no scenario (an entry of an early explore corpus): "
                          "explore that scenario with it to rewrite it")
    return body


def read_corpus(directory: str, scenario: str | None = None) -> list[dict[str, Any]]:
    """Every entry in ``directory`` (of ``scenario`` only, when given), in file
    name order; a file that is not an entry is a ``CorpusError`` naming it."""
    check_directory(directory, create=False)
    names = sorted(n for n in os.listdir(directory) if n.endswith(".json"))
    if len(names) > ENTRY_FILES_MAX:
        raise CorpusError(f"corpus {directory!r} holds {len(names)} entries, more than {ENTRY_FILES_MAX}")
    entries = []
    for name in names:
        path = os.path.join(directory, name)
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
        except OSError as error:
            raise CorpusError(f"cannot read corpus entry {path!r}: {error.strerror or error}") from None
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise CorpusError(f"{path!r} is not a loomsim corpus entry (not JSON)") from None
        body = _entry(data, path, scenario)
        if scenario is None or body["scenario"] == scenario:
            entries.append(body)
    return entries


def merge(out_directory: str, directories: Iterable[str]) -> tuple[int, int]:
    """Fold the entries of ``directories`` into ``out_directory`` (made if
    missing): (entries added, entries already there). Every input directory
    is read, and every file checked, before anything is written."""
    bodies = [body for directory in directories for body in read_corpus(directory)]
    check_directory(out_directory, create=True)
    added = present = 0
    for body in bodies:
        if write_entry(out_directory, body) is None:
            present += 1
        else:
            added += 1
    return added, present
