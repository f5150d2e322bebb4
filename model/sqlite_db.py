"""One SQLite database file that can hold every store.

Rules every SQLite adapter in ``model/`` follows:

- ``isolation_level=None``: the sqlite3 module never opens transactions
  behind our back; every write transaction is an explicit ``BEGIN IMMEDIATE``
  so the write lock is taken up front (no deadlock-prone lock upgrade).
- WAL journal. ``synchronous=NORMAL``: a commit is atomic and survives a
  process crash (what the simulator and the SIGKILL test exercise); only an
  OS crash or power loss can drop the last commits, which is outside what a
  store adapter promises here.
- A bounded busy timeout, so a held write lock surfaces as a typed error
  rather than an unbounded wait.
"""
from __future__ import annotations

import sqlite3
from typing import Any

BUSY_TIMEOUT_MS_DEFAULT = 5_000


# SQLite's own words for a file it found damaged: SQLITE_CORRUPT ("database
# disk image is malformed") and SQLITE_NOTADB ("file is not a database")
# (primary codes; extended codes keep them in the low byte).
_CORRUPTION_CODES = (11, 26)


class StorageCorrupted(sqlite3.DatabaseError):
    """The database file is damaged: SQLite found a page it cannot read
    (``SQLITE_CORRUPT``, ``SQLITE_NOTADB``). Typed and not retryable: the
    same read fails the same way until an operator restores the file. An
    adapter answers this, never a row it could not read whole and never
    "no row" in its place. A subclass of ``sqlite3.DatabaseError`` so a
    caller that handled the raw error keeps working; the original error is
    the ``__cause__``."""

    name = "StorageCorrupted"
    retryable = False

    def __init__(self, detail: str, code: int | None = None) -> None:
        self.detail = detail
        self.code = code
        super().__init__(f"the database file is damaged ({detail})")

    def __reduce__(self):
        return (type(self), (self.detail, self.code))


def corruption_of(error: BaseException) -> "StorageCorrupted | None":
    """``error`` as ``StorageCorrupted`` when it is SQLite saying the file is
    damaged; None for any other error."""
    if isinstance(error, StorageCorrupted) or not isinstance(error, sqlite3.DatabaseError):
        return None
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None:
        return StorageCorrupted(str(error), code) if (code & 0xFF) in _CORRUPTION_CODES else None
    message = str(error).lower()
    if "malformed" in message or "not a database" in message:
        return StorageCorrupted(str(error))
    # Garbage SQLite itself cannot see: a row's text on an overflow page is
    # only bytes to it. Every adapter writes its text as UTF-8, so text that
    # does not decode was damaged on the disk (the module's own words).
    if message.startswith("could not decode to utf-8"):
        return StorageCorrupted(str(error)[:200])
    return None


def _checked(error: sqlite3.DatabaseError) -> sqlite3.DatabaseError:
    """What a cursor raises for ``error``: ``StorageCorrupted`` (its cause the
    original) when SQLite found the file damaged, else ``error`` itself."""
    corrupted = corruption_of(error)
    if corrupted is None:
        return error
    corrupted.__cause__ = error
    return corrupted


class CheckedCursor(sqlite3.Cursor):
    """A cursor whose every step that meets a damaged page raises
    ``StorageCorrupted`` (a row is read when it is stepped to: at
    ``execute`` for the first, at each fetch or iteration for the next):
    a damaged page never ends the rows early, never reads as "no row"."""

    def execute(self, sql: str, parameters: Any = (), /) -> "CheckedCursor":
        try:
            return super().execute(sql, parameters)
        except sqlite3.DatabaseError as error:
            raise _checked(error)

    def executemany(self, sql: str, seq_of_parameters: Any, /) -> "CheckedCursor":
        try:
            return super().executemany(sql, seq_of_parameters)
        except sqlite3.DatabaseError as error:  # a write reads every page it changes
            raise _checked(error)

    def fetchone(self) -> Any:
        try:
            return super().fetchone()
        except sqlite3.DatabaseError as error:  # stepping past the row it returns
            raise _checked(error)

    def fetchmany(self, size: int = 1) -> list:
        try:
            return super().fetchmany(size)
        except sqlite3.DatabaseError as error:  # any row past the first
            raise _checked(error)

    def fetchall(self) -> list:
        try:
            return super().fetchall()
        except sqlite3.DatabaseError as error:  # any row after the first
            raise _checked(error)

    def __next__(self) -> Any:
        try:
            return super().__next__()
        except sqlite3.DatabaseError as error:  # the next row's page is damaged: not the end of the rows
            raise _checked(error)


class CheckedConnection(sqlite3.Connection):
    """Every adapter's connection (``open_database``): its cursors are
    ``CheckedCursor``s, so a damaged file surfaces as ``StorageCorrupted``
    on every read path and write path alike."""

    def cursor(self, factory: Any = CheckedCursor) -> Any:  # type: ignore[override]
        return super().cursor(factory)

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, seq_of_parameters: Any, /) -> Any:
        return self.cursor().executemany(sql, seq_of_parameters)


def open_database(path: str, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS_DEFAULT,
                  factory: type = CheckedConnection) -> sqlite3.Connection:
    assert busy_timeout_ms >= 0
    conn = sqlite3.connect(path, isolation_level=None, timeout=busy_timeout_ms / 1000.0, factory=factory)
    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if str(mode).lower() != "wal" and path != ":memory:":
        conn.close()
        raise sqlite3.OperationalError(f"could not enable WAL on {path!r} (got {mode!r})")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    return conn


class SqliteWriteContention(sqlite3.OperationalError):
    """The write lock could not be taken (or kept) within the busy timeout.

    Typed and retryable (persistence §9.2): another connection held the
    database's single write lock for longer than ``busy_timeout_ms``. Nothing
    was written by the refused transaction. A subclass of
    ``sqlite3.OperationalError`` so callers that already handled the raw
    "database is locked" error keep working; the original error is the
    ``__cause__``.
    """

    name = "SqliteWriteContention"
    retryable = True

    def __init__(self, busy_timeout_ms: int | None, detail: str) -> None:
        self.busy_timeout_ms = busy_timeout_ms
        self.detail = detail
        super().__init__(
            f"SqliteWriteContention: write lock not acquired within busy timeout "
            f"{busy_timeout_ms!r} ms ({detail})"
        )

    def __reduce__(self):
        return (type(self), (self.busy_timeout_ms, self.detail))


# SQLITE_BUSY and SQLITE_LOCKED (primary codes; extended codes keep them in
# the low byte).
_CONTENTION_CODES = (5, 6)


def _is_contention(exc: BaseException) -> bool:
    if not isinstance(exc, sqlite3.OperationalError) or isinstance(exc, SqliteWriteContention):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None and (code & 0xFF) in _CONTENTION_CODES:
        return True
    message = str(exc).lower()
    return "database is locked" in message or "database is busy" in message


def _contention(conn: sqlite3.Connection, exc: BaseException) -> SqliteWriteContention:
    try:
        busy_timeout_ms = conn.execute("PRAGMA busy_timeout").fetchone()[0]
    except sqlite3.Error:  # pragma: no cover - a closed or broken connection
        busy_timeout_ms = None
    return SqliteWriteContention(busy_timeout_ms, str(exc))


class write_transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``; ``ROLLBACK`` on any exception.

    A "database is locked/busy" error — from ``BEGIN IMMEDIATE`` once the busy
    timeout expired, or from a statement or ``COMMIT`` inside — is raised as
    ``SqliteWriteContention`` (from the original error), after the rollback.

    A context manager class rather than a generator: it runs for every write
    of every SQLite store, and the generator machinery cost more than the
    bookkeeping itself.
    """

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> sqlite3.Connection:
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if _is_contention(exc):
                raise _contention(conn, exc) from exc
            raise
        return conn

    def __exit__(self, exc_type: Any, exc: BaseException | None, traceback: Any) -> bool:
        conn = self._conn
        if exc is None:
            try:
                conn.execute("COMMIT")
            except BaseException as error:
                _rollback(conn, error)
                raise
            return False
        _rollback(conn, exc)
        return False  # the body's own error goes on as it is


def _rollback(conn: sqlite3.Connection, exc: BaseException) -> None:
    """Roll back after ``exc``; raise it as ``SqliteWriteContention`` if it was one."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")
    if _is_contention(exc):
        raise _contention(conn, exc) from exc


def require_autocommit(conn: sqlite3.Connection, adapter: str) -> None:
    """Adapters need ``isolation_level=None``: otherwise the sqlite3 module
    opens transactions behind their back and ``BEGIN IMMEDIATE`` fails."""
    if conn.isolation_level is not None:
        raise ValueError(f"{adapter} needs a connection from open_database (isolation_level=None)")


def create_schema(conn: sqlite3.Connection, statements: tuple[str, ...] | list[str]) -> None:
    """Run idempotent ``CREATE ... IF NOT EXISTS`` statements in one write transaction."""
    with write_transaction(conn):
        for statement in statements:
            conn.execute(statement)


class SqliteAdapter:
    """The connection handling an adapter shares: a shared connection (the
    caller's, e.g. one file for every store of a run), or one it opened
    itself with :meth:`open` and closes with :meth:`close`. Subclasses set
    ``SCHEMA`` (idempotent ``CREATE ... IF NOT EXISTS`` statements)."""

    __slots__ = ("_conn", "_owns_connection")
    SCHEMA: tuple[str, ...] = ()

    def __init__(self, conn: sqlite3.Connection) -> None:
        require_autocommit(conn, type(self).__name__)
        if conn.in_transaction:
            raise ValueError("conn has an open transaction; construct stores between transactions")
        self._conn = conn
        self._owns_connection = False
        create_schema(conn, self.SCHEMA)

    @classmethod
    def open(cls, path: str, **open_kwargs: Any):
        conn = open_database(path, **open_kwargs)
        try:
            adapter = cls(conn)
        except BaseException:
            conn.close()
            raise
        adapter._owns_connection = True
        return adapter

    def close(self) -> None:
        """Close the connection if this adapter opened it; otherwise do nothing."""
        if self._owns_connection:
            self._owns_connection = False
            self._conn.close()
