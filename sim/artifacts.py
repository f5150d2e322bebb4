"""Artifacts are never overwritten: the next free name for a file.

A repro file, a report, a shard file: each is what a user keeps from a run,
so no writer replaces one. A taken name gets ``-2``, ``-3``, ... before its
extension; ``create_exclusive`` opens the first free one with ``O_EXCL``,
so two writers racing for a name never share it.
"""
from __future__ import annotations

import os
from typing import IO

FREE_NAMES_MAX = 10_000  # ``-2`` ... : how far a writer looks for a free name


def free_path(path: str, attempt: int) -> str:
    """The ``attempt``-th name for ``path``: itself, then ``stem-2.json``, ``stem-3.json`` ..."""
    assert attempt >= 1, attempt
    if attempt == 1:
        return path
    stem, ext = os.path.splitext(path)
    return f"{stem}-{attempt}{ext}"


def create_exclusive(path: str) -> tuple[str, IO[str]]:
    """Open a new file at ``path``, or the next free ``-2``, ``-3`` ... name;
    return the name taken and the stream. Raises ``OSError``
    (``FileExistsError`` past the bound)."""
    for attempt in range(1, FREE_NAMES_MAX + 1):
        candidate = free_path(path, attempt)
        try:
            fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            continue
        # A lone surrogate (a key an adversary made) has no UTF-8 form: written
        # as its \uXXXX escape, which JSON reads back as the same code point.
        return candidate, os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace")
    raise FileExistsError(f"{path} and {FREE_NAMES_MAX - 1} numbered names after it all exist")
