"""Artifacts are never overwritten: the next free name for a file.

A repro file, a report, a shard file, a trace: each is what a user keeps
from a run, so no writer replaces one. A taken name gets ``-2``, ``-3``, ...
before its extension; ``create_exclusive`` opens the first free one with
``O_EXCL``, so two writers racing for a name never share it, and the
command prints the name it really took. ``write_new`` writes a file whose
text names the file itself (a shrunk repro's replay command): the name is
decided first, then the text, and the file appears whole or not at all.
``NewFileStream`` creates its file at the first write only: a run refused
before its first trace event leaves nothing behind.
"""
from __future__ import annotations

import os
import tempfile
from typing import IO, Callable

FREE_NAMES_MAX = 10_000  # ``-2`` ... : how far a writer looks for a free name
FILE_MODE = 0o644


def free_path(path: str, attempt: int) -> str:
    """The ``attempt``-th name for ``path``: itself, then ``stem-2.json``, ``stem-3.json`` ..."""
    assert attempt >= 1, attempt
    if attempt == 1:
        return path
    stem, ext = os.path.splitext(path)
    return f"{stem}-{attempt}{ext}"


def _open_text(fd: int) -> IO[str]:
    # A lone surrogate (a key an adversary made) has no UTF-8 form: written
    # as its \uXXXX escape, which JSON reads back as the same code point.
    return os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace")


def create_exclusive(path: str) -> tuple[str, IO[str]]:
    """Open a new file at ``path``, or the next free ``-2``, ``-3`` ... name;
    return the name taken and the stream. Raises ``OSError``
    (``FileExistsError`` past the bound)."""
    for attempt in range(1, FREE_NAMES_MAX + 1):
        candidate = free_path(path, attempt)
        try:
            fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        except FileExistsError:
            continue
        return candidate, _open_text(fd)
    raise FileExistsError(f"{path} and {FREE_NAMES_MAX - 1} numbered names after it all exist")


def write_new(path: str, render: Callable[[str], str]) -> str:
    """Write a new file at ``path`` or the next free name, its text
    ``render(name)`` for the name it gets; return that name. The text goes
    to a temporary file in the same directory first, then is linked to the
    name (a link never replaces a file): no reader ever sees it half
    written. Raises ``OSError``."""
    fd, temporary = tempfile.mkstemp(prefix=".loomsim-", suffix=".tmp", dir=os.path.dirname(path) or ".")
    os.close(fd)
    try:
        os.chmod(temporary, FILE_MODE)
        for attempt in range(1, FREE_NAMES_MAX + 1):
            candidate = free_path(path, attempt)
            if os.path.lexists(candidate):
                continue
            with open(temporary, "w", encoding="utf-8", errors="backslashreplace") as handle:
                handle.write(render(candidate))
            try:
                os.link(temporary, candidate)
            except FileExistsError:
                continue  # taken since we looked: the next name, its own text
            except OSError:  # no hard links here (some filesystems): an exclusive create instead
                if not _write_exclusive_at(candidate, render(candidate)):
                    continue
            return candidate
        raise FileExistsError(f"{path} and {FREE_NAMES_MAX - 1} numbered names after it all exist")
    finally:
        os.unlink(temporary)


def _write_exclusive_at(path: str, text: str) -> bool:
    """Create ``path`` with ``text`` (False if it exists); a failed write removes it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return False
    try:
        with _open_text(fd) as handle:
            handle.write(text)
    except BaseException:
        os.unlink(path)
        raise
    return True


class ArtifactWriteError(Exception):
    """A ``NewFileStream`` could not create or write its file (the message
    names it and says why)."""


class NewFileStream:
    """A text stream to a new file at ``path`` (or the next free name),
    created at the first ``write``: ``path`` is the name taken, None while
    nothing was written. Raises ``ArtifactWriteError``."""

    def __init__(self, path: str) -> None:
        self.wanted = path
        self.path: str | None = None
        self._stream: IO[str] | None = None

    def write(self, text: str) -> int:
        try:
            if self._stream is None:
                self.path, self._stream = create_exclusive(self.wanted)
            return self._stream.write(text)
        except OSError as error:
            raise ArtifactWriteError(f"{self.path or self.wanted!r}: {error.strerror or error}") from None

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
