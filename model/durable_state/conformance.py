'''Conformance suite for durable-state store backends.

Any backend — the in-memory reference, the SQLite store, or your own — must
pass every check here. The suite is structural: your class need not inherit
from anything in loomsim, and it may raise its *own* exception class for
conflicts as long as the class is named ``RevisionConflictError`` (or has a
class attribute ``name = "RevisionConflictError"``) and carries ``key``,
``expected`` and ``actual`` attributes.

What a backend must do
----------------------
``async def load(key) -> record | None``,
``async def save(key, write, expected_revision) -> record`` and
``async def clear(key) -> None``, where a record has ``contract_version``,
``revision`` and ``payload`` attributes and ``write`` is a
``model.durable_state.store.DurableStateWrite``. The rules are listed in
``model.durable_state.store``'s docstring; each is a named check below
(``CONFORMANCE_CHECKS``). The easiest way to get validation and payload
encoding right is to call ``check_key``, ``check_save_arguments`` and
``encode_payload``/``decode_payload`` from ``model.durable_state.store``, as
the built-in backends do.

For the simulator, a store call should also be atomic with respect to other
tasks: the built-in backends never suspend inside a call. (That is a property
of how you use the store in simulation, not of the SPI, so it is not checked
here.)

Running it
----------
``run_durable_state_store_conformance(make_store)`` takes a zero-argument
callable returning a FRESH, EMPTY store (each check gets its own), or an
awaitable of one. It is plain ``async`` code that awaits only your store, so
any event loop can drive it. With trio::

    import trio
    from model.durable_state.conformance import run_durable_state_store_conformance

    passed = trio.run(run_durable_state_store_conformance, MyStore)

From pytest, one test for the whole suite (a failure lists every broken rule
at once)::

    def test_my_store_conforms(tmp_path):
        counter = itertools.count()
        def make_store():  # a fresh database per check
            return MyStore(tmp_path / f"db-{next(counter)}")
        trio.run(run_durable_state_store_conformance, make_store)

or one test per rule, via ``checks=``::

    @pytest.mark.parametrize("check", CONFORMANCE_CHECKS)
    def test_my_store_rule(check):
        trio.run(functools.partial(run_durable_state_store_conformance, MyStore, checks=[check]))

If a store has a ``close()`` (or ``aclose()``) method the suite calls it after
each check (awaiting it when it returns an awaitable), so file-backed stores
do not leak handles.

Failures raise one ``ConformanceFailure`` (an ``AssertionError``) whose
``failed_checks`` names every failed rule and whose message explains each; the
individual failures are in ``.failures``. On success the function returns the
names of the checks that ran.
'''
from __future__ import annotations

import inspect
from typing import Any, Awaitable, Callable, Iterable

from model.durable_state.store import DurableStateWrite, is_revision_conflict

__all__ = ["CONFORMANCE_CHECKS", "ConformanceFailure", "run_durable_state_store_conformance"]


class ConformanceFailure(AssertionError):
    """A broken rule (``check``), or the summary of several (``failures``)."""

    def __init__(self, check: str, message: str, failures: tuple[ConformanceFailure, ...] = ()) -> None:
        super().__init__(f"[{check}] {message}")
        self.check = check
        self.message = message
        self.failures = failures

    @property
    def failed_checks(self) -> tuple[str, ...]:
        if self.failures:
            return tuple(f.check for f in self.failures)
        return (self.check,)

    def __reduce__(self):
        return (type(self), (self.check, self.message, self.failures))


# --- helpers used by the checks ----------------------------------------------

KEY = "conformance:key"
OTHER_KEY = "conformance:other"


def _write(payload: Any, contract_version: int = 1) -> DurableStateWrite:
    return DurableStateWrite(contract_version=contract_version, payload=payload)


class _Check:
    """Context for one check: its name, for failure messages."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def fail(self, message: str) -> ConformanceFailure:
        return ConformanceFailure(self.name, message)

    def expect(self, condition: bool, message: str) -> None:
        if not condition:
            raise self.fail(message)

    def record(self, record: Any, what: str, *, contract_version: int, revision: int, payload: Any) -> None:
        """``record`` has exactly these fields (and exact payload types)."""
        if record is None:
            raise self.fail(f"{what}: got None, expected a record at revision {revision}")
        for field in ("contract_version", "revision", "payload"):
            if not hasattr(record, field):
                raise self.fail(f"{what}: record {record!r} has no {field!r} attribute")
        self.expect(
            _is_int(record.revision) and record.revision == revision,
            f"{what}: revision is {record.revision!r}, expected {revision}",
        )
        self.expect(
            _is_int(record.contract_version) and record.contract_version == contract_version,
            f"{what}: contract_version is {record.contract_version!r}, expected {contract_version}",
        )
        self.expect(
            _same_json(record.payload, payload),
            f"{what}: payload is {_short(record.payload)}, expected {_short(payload)}",
        )

    async def saved(self, store: Any, key: str, payload: Any, expected_revision: int, *, contract_version: int = 1) -> Any:
        """Save, insisting it succeeds with revision ``expected_revision + 1``."""
        try:
            record = await store.save(key, _write(payload, contract_version), expected_revision)
        except Exception as exc:
            raise self.fail(
                f"save({key!r}, expected_revision={expected_revision}) raised "
                f"{type(exc).__name__}: {exc}; expected it to succeed"
            ) from exc
        self.record(
            record,
            f"save({key!r}, expected_revision={expected_revision}) result",
            contract_version=contract_version,
            revision=expected_revision + 1,
            payload=payload,
        )
        return record

    async def conflict(self, store: Any, key: str, payload: Any, expected_revision: int, actual: int) -> None:
        """Save, insisting it is rejected with a well-formed revision conflict."""
        call = f"save({key!r}, expected_revision={expected_revision})"
        try:
            result = await store.save(key, _write(payload), expected_revision)
        except Exception as exc:
            if not is_revision_conflict(exc):
                raise self.fail(
                    f"{call} raised {type(exc).__name__}: {exc}; expected a RevisionConflictError "
                    "(matched by class name, or a class attribute name = 'RevisionConflictError')"
                ) from exc
            for field, want in (("key", key), ("expected", expected_revision), ("actual", actual)):
                got = getattr(exc, field, _MISSING)
                if got is _MISSING:
                    raise self.fail(f"{call}: the RevisionConflictError has no {field!r} attribute") from exc
                ok = got == want and (isinstance(got, str) if field == "key" else _is_int(got))
                if not ok:
                    raise self.fail(f"{call}: RevisionConflictError.{field} is {got!r}, expected {want!r}") from exc
            return
        raise self.fail(f"{call} succeeded with {result!r}; expected a RevisionConflictError with actual={actual}")

    async def loaded(self, store: Any, key: str, what: str, **expected: Any) -> Any:
        record = await store.load(key)
        self.record(record, f"{what}: load({key!r})", **expected)
        return record

    async def absent(self, store: Any, key: str, what: str) -> None:
        record = await store.load(key)
        self.expect(record is None, f"{what}: load({key!r}) returned {record!r}, expected None (key absent)")

    async def rejected(self, what: str, call: Callable[[], Awaitable[Any]]) -> None:
        """``call()`` must raise ValueError or TypeError (argument validation).

        The backend may raise when called or when awaited; both count.
        """
        try:
            result = await call()
        except (ValueError, TypeError):
            return
        except Exception as exc:
            raise self.fail(f"{what} raised {type(exc).__name__}: {exc}; expected ValueError or TypeError") from exc
        raise self.fail(f"{what} was accepted (returned {_short(result)}); expected ValueError or TypeError")


_MISSING = object()


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _same_json(a: Any, b: Any) -> bool:
    """Equal as JSON values, with exact types: 1, 1.0 and True all differ."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b))
    return a == b


def _short(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


# --- the checks ---------------------------------------------------------------
#
# Each takes (check, store) with a fresh empty store. Order matters only for
# readability: the basics first.


async def _load_absent_returns_none(c: _Check, store: Any) -> None:
    await c.absent(store, KEY, "fresh store")
    await c.absent(store, "conformance:never-written", "fresh store")


async def _load_does_not_create(c: _Check, store: Any) -> None:
    await c.absent(store, KEY, "first load")
    await c.absent(store, KEY, "second load")
    await c.saved(store, KEY, {"n": 1}, 0)


async def _create_at_zero_starts_at_revision_1(c: _Check, store: Any) -> None:
    await c.saved(store, KEY, {"n": 1}, 0, contract_version=3)
    await c.loaded(store, KEY, "after create", contract_version=3, revision=1, payload={"n": 1})


async def _save_result_matches_load(c: _Check, store: Any) -> None:
    payload = {"a": [1, 2, {"b": None}], "c": "d"}
    saved = await c.saved(store, KEY, payload, 0, contract_version=2)
    await c.loaded(store, KEY, "after save", contract_version=2, revision=saved.revision, payload=saved.payload)
    saved = await c.saved(store, KEY, {"e": True}, 1, contract_version=2)
    await c.loaded(store, KEY, "after second save", contract_version=2, revision=2, payload={"e": True})


async def _revision_increments_by_exactly_one(c: _Check, store: Any) -> None:
    revision = 0
    for n in range(1, 51):
        record = await c.saved(store, KEY, {"n": n}, revision)
        revision = record.revision
        await c.loaded(store, KEY, f"after save #{n}", contract_version=1, revision=n, payload={"n": n})


async def _conflict_on_stale_expected_revision(c: _Check, store: Any) -> None:
    for revision in range(3):
        await c.saved(store, KEY, {"n": revision}, revision)
    await c.conflict(store, KEY, {"stale": True}, 2, actual=3)
    await c.conflict(store, KEY, {"stale": True}, 1, actual=3)


async def _conflict_on_expected_revision_ahead(c: _Check, store: Any) -> None:
    for revision in range(3):
        await c.saved(store, KEY, {"n": revision}, revision)
    await c.conflict(store, KEY, {"ahead": True}, 4, actual=3)
    await c.conflict(store, KEY, {"ahead": True}, 1_000_000, actual=3)


async def _conflict_on_create_when_present(c: _Check, store: Any) -> None:
    await c.saved(store, KEY, {"n": 1}, 0)
    await c.conflict(store, KEY, {"again": True}, 0, actual=1)
    await c.saved(store, KEY, {"n": 2}, 1)
    await c.conflict(store, KEY, {"again": True}, 0, actual=2)


async def _conflict_on_absent_key_reports_actual_zero(c: _Check, store: Any) -> None:
    await c.conflict(store, KEY, {"n": 1}, 1, actual=0)
    await c.conflict(store, KEY, {"n": 1}, 7, actual=0)


async def _conflict_on_absent_key_creates_nothing(c: _Check, store: Any) -> None:
    await c.conflict(store, KEY, {"n": 1}, 1, actual=0)
    await c.absent(store, KEY, "after a rejected save on an absent key")
    await c.saved(store, KEY, {"n": 1}, 0)


async def _conflict_leaves_record_unchanged(c: _Check, store: Any) -> None:
    await c.saved(store, KEY, {"v": "one"}, 0, contract_version=1)
    await c.saved(store, KEY, {"v": "two"}, 1, contract_version=2)
    unchanged = dict(contract_version=2, revision=2, payload={"v": "two"})
    for expected in (0, 1, 3, 99):
        await c.conflict(store, KEY, {"v": f"lost-{expected}"}, expected, actual=2)
        await c.loaded(store, KEY, f"after a rejected save (expected_revision={expected})", **unchanged)
    # and the record stays writable at the revision it really has
    await c.saved(store, KEY, {"v": "three"}, 2, contract_version=2)


async def _conflict_error_is_structured(c: _Check, store: Any) -> None:
    await c.saved(store, KEY, {"n": 1}, 0)
    try:
        await store.save(KEY, _write({"n": 2}), 5)
    except Exception as exc:
        c.expect(is_revision_conflict(exc), f"expected a RevisionConflictError, got {type(exc).__name__}: {exc}")
        c.expect(str(exc) != "", "RevisionConflictError has an empty message")
        for field in ("key", "expected", "actual"):
            c.expect(hasattr(exc, field), f"RevisionConflictError has no {field!r} attribute")
        return
    raise c.fail("save with a wrong expected_revision succeeded")


async def _clear_removes_key(c: _Check, store: Any) -> None:
    await c.saved(store, KEY, {"n": 1}, 0)
    await c.saved(store, KEY, {"n": 2}, 1)
    result = await store.clear(KEY)
    c.expect(result is None, f"clear returned {result!r}, expected None")
    await c.absent(store, KEY, "after clear")


async def _clear_is_idempotent(c: _Check, store: Any) -> None:
    try:
        await store.clear("conformance:never-written")
        await c.saved(store, KEY, {"n": 1}, 0)
        await store.clear(KEY)
        await store.clear(KEY)
    except Exception as exc:
        raise c.fail(f"clear raised {type(exc).__name__}: {exc}; clear must be idempotent") from exc
    await c.absent(store, KEY, "after clearing twice")
    await c.absent(store, "conformance:never-written", "after clearing an absent key")


async def _create_after_clear_starts_at_revision_1(c: _Check, store: Any) -> None:
    for revision in range(4):
        await c.saved(store, KEY, {"n": revision}, revision)
    await store.clear(KEY)
    await c.saved(store, KEY, {"reborn": True}, 0, contract_version=5)
    await c.loaded(store, KEY, "after clear and create", contract_version=5, revision=1, payload={"reborn": True})
    await c.saved(store, KEY, {"reborn": 2}, 1, contract_version=5)


async def _save_after_clear_with_old_revision_conflicts(c: _Check, store: Any) -> None:
    for revision in range(3):
        await c.saved(store, KEY, {"n": revision}, revision)
    await store.clear(KEY)
    await c.conflict(store, KEY, {"stale": True}, 3, actual=0)
    await c.absent(store, KEY, "after clear and a rejected stale save")


async def _any_contract_version_accepted(c: _Check, store: Any) -> None:
    # The store knows no contracts: versions need not start at 1, increase,
    # or stay put between saves.
    revision = 0
    for version in (7, 1, 2, 1000, 2**40, 1, 3):
        await c.saved(store, KEY, {"version": version}, revision, contract_version=version)
        revision += 1
        await c.loaded(
            store, KEY, f"contract_version={version}",
            contract_version=version, revision=revision, payload={"version": version},
        )


async def _payload_round_trips_nested_values(c: _Check, store: Any) -> None:
    payload = {
        "object": {"nested": {"deeper": {"list": [1, [2, [3, [4]]]]}}},
        "list": [None, True, False, 0, -1, "x", {"k": []}, [{}]],
        "empty_object": {},
        "empty_list": [],
        "empty_string": "",
        "numbers": [0, -0.5, 1.5, 2**53 + 1, -(2**63), 2**70, 1e300, 5e-324, 0.1],
        "escapes": "quote \" backslash \\ slash / newline \n tab \t nul \x00 bell \x07",
        "deep": _deep_list(100),
    }
    await c.saved(store, KEY, payload, 0)
    await c.loaded(store, KEY, "nested payload", contract_version=1, revision=1, payload=payload)


def _deep_list(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


async def _payload_round_trips_unicode(c: _Check, store: Any) -> None:
    payload = {
        "latin": "héllo wörld",
        "cjk": "日本語のテキスト",
        "emoji": "🧵🪡 non-BMP",
        "combining": "e\u0301",
        "separators": "\u2028\u2029",
        "bom": "\ufeff",
        "ключ": "значение",
        "🔑": ["ünïcödé", {"ß": "ẞ"}],
    }
    await c.saved(store, KEY, payload, 0)
    await c.loaded(store, KEY, "unicode payload", contract_version=1, revision=1, payload=payload)


async def _payload_round_trips_lone_surrogates(c: _Check, store: Any) -> None:
    # Valid JSON ("\\ud800"), but not valid UTF-8: a backend that stores raw
    # UTF-8 text must escape it.
    payload = {"lone_high": "a\ud800b", "lone_low": "\udfff", "pair": "\U0001f600"}
    await c.saved(store, KEY, payload, 0)
    await c.loaded(store, KEY, "payload with lone surrogates", contract_version=1, revision=1, payload=payload)


async def _payload_number_types_preserved(c: _Check, store: Any) -> None:
    # Python's 1 == 1.0 == True hides type changes; a validator above the
    # store does not. Checked with exact types.
    payload = {"int": 1, "float": 1.0, "bool": True, "zero": 0, "zero_float": 0.0, "false": False, "null": None}
    await c.saved(store, KEY, payload, 0)
    await c.loaded(store, KEY, "number types", contract_version=1, revision=1, payload=payload)


async def _scalar_and_null_payloads(c: _Check, store: Any) -> None:
    # The payload is any JSON value, not only an object; a stored null is a
    # record, distinct from an absent key.
    revision = 0
    for payload in (None, False, 0, 2.5, "", "text", [], {}):
        await c.saved(store, KEY, payload, revision)
        revision += 1
        record = await c.loaded(store, KEY, f"payload {payload!r}", contract_version=1, revision=revision, payload=payload)
        c.expect(record is not None, "a null payload must not read as an absent key")


async def _large_payload_round_trips(c: _Check, store: Any) -> None:
    payload = {"text": "x" * 300_000, "items": [{"i": i, "s": str(i)} for i in range(5_000)]}
    await c.saved(store, KEY, payload, 0)
    await c.loaded(store, KEY, "large payload", contract_version=1, revision=1, payload=payload)


async def _saved_payload_is_copied_in(c: _Check, store: Any) -> None:
    payload = {"list": [1, 2], "obj": {"a": 1}}
    await store.save(KEY, _write(payload), 0)
    payload["list"].append(3)
    payload["obj"]["a"] = "mutated"
    payload["new"] = True
    await c.loaded(
        store, KEY, "after mutating the dict passed to save",
        contract_version=1, revision=1, payload={"list": [1, 2], "obj": {"a": 1}},
    )


async def _save_result_is_copied_out(c: _Check, store: Any) -> None:
    payload = {"list": [1, 2], "obj": {"a": 1}}
    record = await store.save(KEY, _write(payload), 0)
    c.expect(record.payload is not payload, "save returned the caller's own payload object, not a copy")
    record.payload["list"].append(3)
    record.payload["obj"]["a"] = "mutated"
    await c.loaded(
        store, KEY, "after mutating the payload save returned",
        contract_version=1, revision=1, payload={"list": [1, 2], "obj": {"a": 1}},
    )


async def _loaded_payload_is_copied_out(c: _Check, store: Any) -> None:
    await store.save(KEY, _write({"list": [1, 2], "obj": {"a": 1}}), 0)
    first = await store.load(KEY)
    second = await store.load(KEY)
    c.expect(first.payload is not second.payload, "two loads returned the same payload object")
    first.payload["list"].append(3)
    first.payload["obj"]["a"] = "mutated"
    first.payload["new"] = True
    c.expect(_same_json(second.payload, {"list": [1, 2], "obj": {"a": 1}}), "mutating one load's payload changed another's")
    await c.loaded(
        store, KEY, "after mutating a loaded payload",
        contract_version=1, revision=1, payload={"list": [1, 2], "obj": {"a": 1}},
    )


async def _keys_are_independent(c: _Check, store: Any) -> None:
    await c.saved(store, KEY, {"k": "a1"}, 0, contract_version=1)
    await c.saved(store, OTHER_KEY, {"k": "b1"}, 0, contract_version=9)
    await c.saved(store, KEY, {"k": "a2"}, 1, contract_version=1)
    # a conflict on one key says nothing about the other
    await c.conflict(store, OTHER_KEY, {"k": "lost"}, 2, actual=1)
    await c.loaded(store, KEY, "key a", contract_version=1, revision=2, payload={"k": "a2"})
    await c.loaded(store, OTHER_KEY, "key b", contract_version=9, revision=1, payload={"k": "b1"})
    await store.clear(KEY)
    await c.absent(store, KEY, "after clearing key a")
    await c.loaded(store, OTHER_KEY, "key b after clearing key a", contract_version=9, revision=1, payload={"k": "b1"})


async def _keys_are_exact_strings(c: _Check, store: Any) -> None:
    # No case folding, trimming, normalisation or prefix matching.
    keys = [
        "sentinel:nightly", "Sentinel:nightly", "sentinel:nightly ", " sentinel:nightly",
        "sentinel:nightly/1", "sentinel:night", "sentinel:%", "sentinel:_ightly",
        "é", "e\u0301", "ключ", "🔑", "k" * 1000,
    ]
    for index, key in enumerate(keys):
        await c.saved(store, key, {"index": index}, 0, contract_version=index + 1)
    for index, key in enumerate(keys):
        await c.loaded(store, key, f"key #{index}", contract_version=index + 1, revision=1, payload={"index": index})
    await store.clear("sentinel:%")
    await c.absent(store, "sentinel:%", "after clearing it")
    await c.loaded(store, "sentinel:nightly", "a key resembling a cleared pattern", contract_version=1, revision=1, payload={"index": 0})


async def _invalid_arguments_rejected(c: _Check, store: Any) -> None:
    await c.saved(store, KEY, {"n": 1}, 0)
    await c.rejected("save with an empty key", lambda: store.save("", _write({}), 0))
    await c.rejected("save with a non-str key", lambda: store.save(None, _write({}), 0))
    await c.rejected("save with expected_revision=-1", lambda: store.save(KEY, _write({}), -1))
    await c.rejected("save with a str expected_revision", lambda: store.save(KEY, _write({}), "1"))
    await c.rejected("save with contract_version=0", lambda: store.save(KEY, _write({}, contract_version=0), 1))
    await c.rejected("save with contract_version=-1", lambda: store.save(OTHER_KEY, _write({}, contract_version=-1), 0))
    await c.rejected("load with an empty key", lambda: store.load(""))
    await c.rejected("load with a non-str key", lambda: store.load(42))
    await c.rejected("clear with an empty key", lambda: store.clear(""))
    await c.rejected("clear with a non-str key", lambda: store.clear(None))
    await c.loaded(store, KEY, "after rejected calls", contract_version=1, revision=1, payload={"n": 1})
    await c.absent(store, OTHER_KEY, "after a rejected create")


async def _non_json_payload_rejected(c: _Check, store: Any) -> None:
    await c.saved(store, KEY, {"n": 1}, 0)
    bad = [
        ("a set", {"s": {1, 2}}),
        ("bytes", {"b": b"raw"}),
        ("NaN", {"x": float("nan")}),
        ("Infinity", [float("inf")]),
        ("an arbitrary object", {"o": object()}),
        ("a non-str key", {1: "one"}),
        ("a tuple", {"t": (1, 2)}),
    ]
    for what, payload in bad:
        await c.rejected(f"save of a payload with {what}", lambda: store.save(KEY, _write(payload), 1))
        await c.rejected(f"create of a payload with {what}", lambda: store.save(OTHER_KEY, _write(payload), 0))
    await c.loaded(store, KEY, "after rejected payloads", contract_version=1, revision=1, payload={"n": 1})
    await c.absent(store, OTHER_KEY, "after rejected creates")


_CHECKS: tuple[tuple[str, Callable[[_Check, Any], Awaitable[None]]], ...] = (
    ("load_absent_returns_none", _load_absent_returns_none),
    ("load_does_not_create", _load_does_not_create),
    ("create_at_zero_starts_at_revision_1", _create_at_zero_starts_at_revision_1),
    ("save_result_matches_load", _save_result_matches_load),
    ("revision_increments_by_exactly_one", _revision_increments_by_exactly_one),
    ("conflict_on_stale_expected_revision", _conflict_on_stale_expected_revision),
    ("conflict_on_expected_revision_ahead", _conflict_on_expected_revision_ahead),
    ("conflict_on_create_when_present", _conflict_on_create_when_present),
    ("conflict_on_absent_key_reports_actual_zero", _conflict_on_absent_key_reports_actual_zero),
    ("conflict_on_absent_key_creates_nothing", _conflict_on_absent_key_creates_nothing),
    ("conflict_leaves_record_unchanged", _conflict_leaves_record_unchanged),
    ("conflict_error_is_structured", _conflict_error_is_structured),
    ("clear_removes_key", _clear_removes_key),
    ("clear_is_idempotent", _clear_is_idempotent),
    ("create_after_clear_starts_at_revision_1", _create_after_clear_starts_at_revision_1),
    ("save_after_clear_with_old_revision_conflicts", _save_after_clear_with_old_revision_conflicts),
    ("any_contract_version_accepted", _any_contract_version_accepted),
    ("payload_round_trips_nested_values", _payload_round_trips_nested_values),
    ("payload_round_trips_unicode", _payload_round_trips_unicode),
    ("payload_round_trips_lone_surrogates", _payload_round_trips_lone_surrogates),
    ("payload_number_types_preserved", _payload_number_types_preserved),
    ("scalar_and_null_payloads", _scalar_and_null_payloads),
    ("large_payload_round_trips", _large_payload_round_trips),
    ("saved_payload_is_copied_in", _saved_payload_is_copied_in),
    ("save_result_is_copied_out", _save_result_is_copied_out),
    ("loaded_payload_is_copied_out", _loaded_payload_is_copied_out),
    ("keys_are_independent", _keys_are_independent),
    ("keys_are_exact_strings", _keys_are_exact_strings),
    ("invalid_arguments_rejected", _invalid_arguments_rejected),
    ("non_json_payload_rejected", _non_json_payload_rejected),
)

CONFORMANCE_CHECKS: tuple[str, ...] = tuple(name for name, _ in _CHECKS)


async def _resolve(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


async def _close(store: Any) -> None:
    for method in ("aclose", "close"):
        closer = getattr(store, method, None)
        if callable(closer):
            await _resolve(closer())
            return


async def run_durable_state_store_conformance(
    make_store: Callable[[], Any],
    *,
    checks: Iterable[str] | None = None,
) -> list[str]:
    """Run the checks (all by default) against fresh stores from ``make_store``.

    Returns the names of the checks that passed (all of them). Raises one
    ``ConformanceFailure`` naming every check that failed.
    """
    if not callable(make_store):
        raise TypeError(f"make_store must be a zero-argument callable returning a store, got {make_store!r}")
    if checks is None:
        selected = _CHECKS
    else:
        if isinstance(checks, str):
            raise TypeError("checks must be an iterable of check names, not a str")
        wanted = list(checks)
        unknown = [name for name in wanted if name not in CONFORMANCE_CHECKS]
        if unknown:
            raise ValueError(f"unknown conformance checks {unknown}; known: {list(CONFORMANCE_CHECKS)}")
        selected = tuple((name, fn) for name, fn in _CHECKS if name in wanted)

    passed: list[str] = []
    failures: list[ConformanceFailure] = []
    for name, check_fn in selected:
        check = _Check(name)
        try:
            store = await _resolve(make_store())
        except Exception as exc:
            failure = ConformanceFailure(name, f"make_store() raised {type(exc).__name__}: {exc}")
            failure.__cause__ = exc
            failures.append(failure)
            continue
        try:
            try:
                await check_fn(check, store)
            finally:
                await _close(store)
        except ConformanceFailure as failure:
            failures.append(failure)
        except Exception as exc:
            failure = ConformanceFailure(name, f"unexpected {type(exc).__name__}: {exc}")
            failure.__cause__ = exc
            failures.append(failure)
        else:
            passed.append(name)

    if failures:
        lines = [
            f"{len(failures)} of {len(selected)} durable-state store conformance checks failed: "
            + ", ".join(f.check for f in failures)
        ]
        lines.extend(f"  - {f.check}: {f.message}" for f in failures)
        raise ConformanceFailure("durable_state_store_conformance", "\n".join(lines), tuple(failures))
    return passed
