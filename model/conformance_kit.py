"""The machinery every store conformance suite shares.

A suite is a ``CheckSuite``: named async checks, registered in order with
``@suite.check(name)``, each run on a fresh store from the caller's factory.
Running collects every failure and raises one ``ConformanceFailure`` naming
all broken rules at once, so a backend author sees the whole picture. Plain
async code that awaits only the store: any event loop can drive it.
"""
from __future__ import annotations

import inspect
import traceback
from typing import Any, Awaitable, Callable, Iterable

Check = Callable[[Any], Awaitable[None]]


class ConformanceFailure(AssertionError):
    """One or more checks failed; ``failures`` is ``((check_name, reason), ...)``
    in suite order. Suites subclass it to set ``subject``."""

    subject = "store"

    def __init__(self, failures: Iterable[tuple[str, str]]) -> None:
        self.failures = tuple(failures)
        lines = [f"{len(self.failures)} {self.subject} conformance check(s) failed:"]
        lines += [f"  - {name}: {reason}" for name, reason in self.failures]
        super().__init__("\n".join(lines))

    @property
    def failed_checks(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.failures)


class CheckSuite:
    def __init__(self, failure_type: type[ConformanceFailure]) -> None:
        self._failure_type = failure_type
        self._checks: list[tuple[str, Check, str | None]] = []

    def check(self, name: str, *, needs: str | None = None) -> Callable[[Check], Check]:
        """``needs``: the name of a hook only the adapter's author can give
        (damaging a stored row, say); the check gets it as its second
        argument, and a run given no such hook leaves the check out."""
        def register(fn: Check) -> Check:
            assert name not in self.names(), f"check {name!r} registered twice"
            self._checks.append((name, fn, needs))
            return fn

        return register

    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _, _ in self._checks)

    def needing(self) -> tuple[str, ...]:
        """The checks that run only with a hook."""
        return tuple(name for name, _, needs in self._checks if needs is not None)

    async def run(self, make_store: Callable[[], Any], checks: Iterable[str] | None = None,
                  hooks: dict[str, Any] | None = None) -> list[str]:
        """Run the checks (all, or the named subset), each on a fresh store;
        a check needing a hook ``hooks`` does not hold is left out.

        Returns the names that ran, all passed; raises the suite's
        ``ConformanceFailure`` naming every failing check otherwise.
        """
        hooks = hooks or {}
        if checks is None:
            selected = list(self._checks)
        else:
            wanted = list(checks)
            unknown = [name for name in wanted if name not in self.names()]
            if unknown:
                raise ValueError(f"unknown conformance checks {unknown}; known: {self.names()}")
            selected = [entry for entry in self._checks if entry[0] in wanted]
        selected = [(name, fn, needs) for name, fn, needs in selected if needs is None or needs in hooks]
        failures: list[tuple[str, str]] = []
        for name, fn, needs in selected:
            try:
                store = make_store()
                if inspect.isawaitable(store):
                    store = await store
                await (fn(store) if needs is None else fn(store, hooks[needs]))
            except AssertionError as exc:
                failures.append((name, str(exc) or "assertion failed"))
            except Exception as exc:  # noqa: BLE001 - an unexpected error fails the check, not the suite
                where = traceback.extract_tb(exc.__traceback__)[-1]
                failures.append(
                    (name, f"unexpected {type(exc).__name__}: {exc} (at {where.filename}:{where.lineno})"))
        if failures:
            raise self._failure_type(failures)
        return [name for name, _, _ in selected]


async def expect_raises(exc_type: type[BaseException], awaitable: Awaitable[Any], what: str) -> BaseException:
    try:
        result = await awaitable
    except exc_type as exc:
        return exc
    except BaseException as exc:  # noqa: BLE001 - reported as the failure
        raise AssertionError(f"{what}: expected {exc_type.__name__}, got {type(exc).__name__}: {exc}") from None
    raise AssertionError(f"{what}: expected {exc_type.__name__}, returned {result!r}")


def expect_eq(actual: object, expected: object, what: str) -> None:
    if actual != expected:
        raise AssertionError(f"{what}: expected {expected!r}, got {actual!r}")
