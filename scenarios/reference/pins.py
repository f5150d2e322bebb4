"""Reference model of the claim-check pin index (``model.pins``).

The contract, over two plain tables keyed by content ref:

- blobs ``ref -> (size_bytes, stored_at_ms)``: ``record_blob`` inserts a
  row, or (same size) keeps the later ``stored_at_ms``; another size for a
  known ref is ``BlobSizeMismatch(ref, recorded, attempted)`` and nothing
  changes. ``blob(ref)`` answers the row or None; ``forget(ref)`` drops it
  (its pins stay) and answers whether there was one.
- pins ``ref -> holders``: ``pin`` answers True when the pair is new,
  ``unpin`` True when it was there (both idempotent); a ref is pinned while
  it has a holder, whether or not its blob row exists. ``holders(ref)`` and
  ``pinned_refs()`` answer sorted tuples.
- ``expired_unpinned(before, limit)``: the refs of blob rows stored before
  ``before`` that no holder pins, by (stored_at_ms, ref), at most ``limit``.
- Arguments first, ValueError for any bad one: a ref is ``sha256:`` and 64
  lowercase hex; a holder a non-empty str of at most 1,024 characters and
  valid Unicode; sizes, times and limits ints in 0..2**63-1.

One key for the whole port: ``expired_unpinned`` and ``pinned_refs`` read
every row, so a divergence ends the port's checks.
"""
from __future__ import annotations

import re
from typing import Any

from scenarios.reference import History, PortReference, Refused, bound_args, judge, same, valid_text

KEY = "pins"
HOLDER_CHARS_MAX = 1_024
INT64_MAX = 2**63 - 1
_REF = re.compile(r"sha256:[0-9a-f]{64}")


def _ref_problem(ref: object) -> Refused | None:
    if type(ref) is not str or _REF.fullmatch(ref) is None:
        return Refused("ValueError")
    return None


def _holder_problem(holder: object) -> Refused | None:
    if type(holder) is not str or not holder or len(holder) > HOLDER_CHARS_MAX:
        return Refused("ValueError")
    return None if valid_text(holder) else Refused("ValueError")


def _count_problem(value: object) -> Refused | None:
    if type(value) is not int or not 0 <= value <= INT64_MAX:
        return Refused("ValueError")
    return None


def _blob_view(blob: Any) -> tuple | None:
    return None if blob is None else (blob.ref, blob.size_bytes, blob.stored_at_ms)


class ReferencePins(PortReference):
    """The pin index's contract over a dict of blob rows and a dict of holder sets."""

    port = "pins"
    scope = "pins"

    def __init__(self) -> None:
        self._blobs: dict[str, tuple[int, int]] = {}
        self._pins: dict[str, dict[str, None]] = {}  # ref -> holders (membership; sorted when answered)
        self._history = History()
        self._handlers = {"record_blob": self._record_blob, "blob": self._blob, "forget": self._forget,
                          "pin": self._pin, "unpin": self._unpin, "is_pinned": self._is_pinned,
                          "pinned_refs": self._pinned_refs, "holders": self._holders,
                          "expired_unpinned": self._expired_unpinned}

    def _table(self) -> dict:
        return {}

    def key_of(self, call: Any) -> str:
        return KEY

    def forget(self, key: str) -> None:
        self._blobs.clear()
        self._pins.clear()
        self._history.drop(key)

    def _refused(self, call: Any, problem: Refused) -> str | None:
        message = judge(call, KEY, problem, same, self._history)
        if message is None:
            self._history.note(KEY, call, call.args[:1], problem.name)
        return message

    def _ref_arg(self, call: Any) -> tuple[Any, Refused | None]:
        a = bound_args(call, ("ref",))
        if a is None:
            return None, Refused("TypeError")
        return a["ref"], _ref_problem(a["ref"])

    def _record_blob(self, call: Any) -> str | None:
        a = bound_args(call, ("ref", "size_bytes", "stored_at_ms"))
        if a is None:
            return self._refused(call, Refused("TypeError"))
        ref, size, stored_at_ms = a["ref"], a["size_bytes"], a["stored_at_ms"]
        problem = _ref_problem(ref) or _count_problem(size) or _count_problem(stored_at_ms)
        old = self._blobs.get(ref) if problem is None else None
        if old is not None and old[0] != size:
            problem = Refused("BlobSizeMismatch", ref=ref, recorded_size_bytes=old[0], attempted_size_bytes=size)
        if problem is not None:
            return self._refused(call, problem)
        message = judge(call, KEY, None, same, self._history)
        if message is None:
            if old is None or stored_at_ms > old[1]:
                self._blobs[ref] = (size, stored_at_ms)
            self._history.note(KEY, call, (ref[7:19], size, stored_at_ms), "recorded")
        return message

    def _blob(self, call: Any) -> str | None:
        ref, problem = self._ref_arg(call)
        if problem is not None:
            return self._refused(call, problem)
        row = self._blobs.get(ref)
        return judge(call, KEY, None if row is None else (ref, *row), _blob_view, self._history)

    def _forget(self, call: Any) -> str | None:
        ref, problem = self._ref_arg(call)
        if problem is not None:
            return self._refused(call, problem)
        message = judge(call, KEY, ref in self._blobs, same, self._history)
        if message is None:
            gone = self._blobs.pop(ref, None) is not None
            self._history.note(KEY, call, (ref[7:19],), gone)
        return message

    def _pair(self, call: Any) -> tuple[Any, Any, Refused | None]:
        a = bound_args(call, ("ref", "holder"))
        if a is None:
            return None, None, Refused("TypeError")
        return a["ref"], a["holder"], _ref_problem(a["ref"]) or _holder_problem(a["holder"])

    def _pin(self, call: Any) -> str | None:
        ref, holder, problem = self._pair(call)
        if problem is not None:
            return self._refused(call, problem)
        holders = self._pins.get(ref)
        new = holders is None or holder not in holders
        message = judge(call, KEY, new, same, self._history)
        if message is None:
            self._pins.setdefault(ref, {})[holder] = None
            self._history.note(KEY, call, (ref[7:19], holder), new)
        return message

    def _unpin(self, call: Any) -> str | None:
        ref, holder, problem = self._pair(call)
        if problem is not None:
            return self._refused(call, problem)
        holders = self._pins.get(ref)
        there = holders is not None and holder in holders
        message = judge(call, KEY, there, same, self._history)
        if message is None:
            if there:
                del holders[holder]
                if not holders:
                    del self._pins[ref]
            self._history.note(KEY, call, (ref[7:19], holder), there)
        return message

    def _is_pinned(self, call: Any) -> str | None:
        ref, problem = self._ref_arg(call)
        if problem is not None:
            return self._refused(call, problem)
        return judge(call, KEY, ref in self._pins, same, self._history)

    def _pinned_refs(self, call: Any) -> str | None:
        if call.args or call.kwargs:
            return self._refused(call, Refused("TypeError"))
        return judge(call, KEY, tuple(sorted(self._pins)), tuple, self._history)

    def _holders(self, call: Any) -> str | None:
        ref, problem = self._ref_arg(call)
        if problem is not None:
            return self._refused(call, problem)
        return judge(call, KEY, tuple(sorted(self._pins.get(ref, ()))), tuple, self._history)

    def _expired_unpinned(self, call: Any) -> str | None:
        a = bound_args(call, ("stored_before_ms", "limit"))
        if a is None:
            return self._refused(call, Refused("TypeError"))
        before, limit = a["stored_before_ms"], a["limit"]
        problem = _count_problem(before) or _count_problem(limit)
        if problem is not None:
            return self._refused(call, problem)
        candidates = sorted((stored_at_ms, ref) for ref, (_, stored_at_ms) in self._blobs.items()
                            if stored_at_ms < before and ref not in self._pins)
        return judge(call, KEY, tuple(ref for _, ref in candidates[:limit]), tuple, self._history)

    def audit(self, view: Any) -> list[tuple[str, str | None]]:
        """The pins the model holds are the store's (``pinned_refs`` and each ref's holders)."""
        read = getattr(view, "pin_holders", None)
        if read is None:
            return []
        have = read()
        want = tuple((ref, tuple(sorted(self._pins[ref]))) for ref in sorted(self._pins))
        return [(KEY, None if have == want else (
            f"pin index at the end of the run: the store holds {have!r:.300}, the contract's reference model "
            f"{want!r:.300}"))]
