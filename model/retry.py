"""The retry rule: which errors mean "nothing happened, try again".

Why one rule: a process that retries an error a retry cannot clear hides a
verdict (and spins); one that gives up on an error a retry would clear turns
a blip into an outage. Every retry loop in the system (the kernel, the
schedule driver, the submission worker, the findings projector, retention,
the scenarios' clients) asks this module, so they cannot drift apart.

**Retryable** is what the error says about itself: ``retryable = True`` on
its class or instance, matched by attribute (like every typed error crossing
a port, never by class or a list of names), so a third-party store's own
typed errors work too. Today that is:

- ``model.sqlite_db.SqliteWriteContention``: a busy SQLite writer; the
  refused transaction wrote nothing;
- a ``ConversationStoreError`` whose ``cause`` is retryable (the SQLite log
  wraps a write contention that way);
- a ``LedgerStoreError`` whose ``cause`` is retryable: the SQLite ledger
  wraps every storage failure that way (persistence §9.2), so a write
  contention on the ledger port is retryable and any other storage failure
  is not; ``CorruptSubmission`` and ``UnsupportedLedgerVersion`` (a stored
  row this build cannot read) are verdicts, never retried;
- the fault layer's injected ``TransientStoreError`` (nothing happened);
- the fault layer's injected ``ReplyLost``: the call committed but its reply
  was lost (a client timeout). Retrying is still right: every port write is
  safe to repeat exactly (an idempotency key, an exact-retry replay,
  adopt-own-write), and a process that cannot tell "nothing happened" from
  "it happened, unheard" must be written so that both retry the same way.

Everything else is not: a typed verdict (``OwnershipLost``, ``FenceRejected``,
``SettlementConflict``, ``AcknowledgedWriteLost``, ...) is as true on the
next attempt as on this one.

One widening, for a process that reads history again from the stores on
every attempt (``reread=True``: the submission worker's recovery pass and its
claim loop): a plain ``HistoryCorrupted`` is retryable there too. The
fail-closed recovery read raises it for a damaged *answer* (a short page, a
sequence gap, a row that does not decode) that a second read may get whole.
``AcknowledgedWriteLost`` is a ``HistoryCorrupted`` too, but names itself: a
log whose tail went back stays that way, so it is never retryable.
"""
from __future__ import annotations

# A fail-closed read refused a damaged answer (by name: a subclass with a
# name of its own, such as AcknowledgedWriteLost, is another verdict).
DAMAGED_READ_ERROR = "HistoryCorrupted"


def error_name(error: BaseException) -> str:
    """A typed error's name (its class's ``name``), else its class name."""
    name = getattr(type(error), "name", None)
    return name if isinstance(name, str) and name else type(error).__name__


def is_retryable(error: BaseException, *, reread: bool = False) -> bool:
    """True if trying again may succeed: ``error.retryable is True`` (see the
    module docstring); with ``reread``, also a damaged read answer
    (``HistoryCorrupted`` itself, not a subclass that names itself)."""
    if getattr(error, "retryable", False) is True:
        return True
    return reread and error_name(error) == DAMAGED_READ_ERROR
