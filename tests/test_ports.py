"""The typed ports: every adapter implements its port Protocol's methods with
exactly the Protocol's parameters (names, kinds, defaults), and every trace
describer is bound to the signature of the method it describes."""
from __future__ import annotations

import inspect

import pytest

from faults.describe import DESCRIBERS_BY_PORT, describes, port_parameters
from faults.events import DsClear
from model.conversation.checkpoints import InMemoryCheckpointStore, SqliteCheckpointStore
from model.conversation.content_store import InMemoryContentStore, SqliteContentStore
from model.conversation.memory_store import InMemoryConversationStore
from model.conversation.port import CheckpointStorePort, ContentStorePort, ConversationLogPort
from model.conversation.sqlite_store import SqliteConversationStore
from model.durable_state.memory_store import InMemoryDurableStateStore
from model.durable_state.sqlite_store import SqliteDurableStateStore
from model.durable_state.store import DurableStateStore
from model.findings import InMemoryFindingsProjection, SqliteFindingsProjection
from model.kernel.memory_store import InMemoryExecutionStore
from model.kernel.sqlite_store import SqliteExecutionStore
from model.kernel.store import ExecutionStore
from model.ledger.memory_store import InMemorySubmissionLedger
from model.ledger.port import SubmissionLedgerPort
from model.ledger.sqlite_store import SqliteSubmissionLedger
from model.pins import InMemoryPinIndex, SqlitePinIndex
from model.schedule_store import InMemoryScheduleStore, SqliteScheduleStore
from model.secrets.keyring import InMemoryKeyringStore, SqliteKeyringStore

# Port Protocol -> its adapters.
PROTOCOL_ADAPTERS = {
    SubmissionLedgerPort: (InMemorySubmissionLedger, SqliteSubmissionLedger),
    ConversationLogPort: (InMemoryConversationStore, SqliteConversationStore),
    CheckpointStorePort: (InMemoryCheckpointStore, SqliteCheckpointStore),
    ContentStorePort: (InMemoryContentStore, SqliteContentStore),
    DurableStateStore: (InMemoryDurableStateStore, SqliteDurableStateStore),
    ExecutionStore: (InMemoryExecutionStore, SqliteExecutionStore),
}
# Ports without a Protocol: the in-memory adapter is the reference the
# describers bind to; the SQLite adapter must match it.
REFERENCE_ADAPTERS = {
    InMemoryExecutionStore: (SqliteExecutionStore,),  # the methods beyond ExecutionStore
    InMemoryScheduleStore: (SqliteScheduleStore,),
    InMemoryPinIndex: (SqlitePinIndex,),
    InMemoryFindingsProjection: (SqliteFindingsProjection,),
    InMemoryKeyringStore: (SqliteKeyringStore,),
}


def protocol_methods(protocol: type) -> dict:
    return {name: value for name, value in vars(protocol).items()
            if inspect.isfunction(value) and not name.startswith("_")}


def signature_mismatch(reference, method) -> str | None:
    if inspect.iscoroutinefunction(reference) != inspect.iscoroutinefunction(method):
        return "async in one, not in the other"
    expected, actual = port_parameters(reference), port_parameters(method)
    if expected != actual:
        return f"{actual} != {expected}"
    return None


@pytest.mark.parametrize("protocol", list(PROTOCOL_ADAPTERS), ids=lambda p: p.__name__)
def test_adapters_match_their_port_protocol(protocol):
    methods = protocol_methods(protocol)
    assert methods
    problems = []
    for adapter in PROTOCOL_ADAPTERS[protocol]:
        for name, reference in methods.items():
            method = getattr(adapter, name, None)
            if method is None:
                problems.append(f"{adapter.__name__}.{name}: missing")
            elif (problem := signature_mismatch(reference, method)) is not None:
                problems.append(f"{adapter.__name__}.{name}: {problem}")
    assert not problems, problems


def test_every_ledger_and_log_method_is_in_its_protocol():
    """The Protocols list every method the adapters share (bar lifecycle and inspection helpers)."""
    lifecycle = {"open", "close", "connection", "counts"}
    for protocol in (SubmissionLedgerPort, ConversationLogPort):
        memory, sqlite = PROTOCOL_ADAPTERS[protocol]
        shared = {n for n in vars(memory) if not n.startswith("_") and n in vars(sqlite)} - lifecycle
        assert shared <= set(protocol_methods(protocol)), shared - set(protocol_methods(protocol))


@pytest.mark.parametrize("reference", list(REFERENCE_ADAPTERS), ids=lambda r: r.__name__)
def test_adapters_match_the_reference_adapter(reference):
    bound = {d.method.__name__ for table in DESCRIBERS_BY_PORT.values() for d in table.values()
             if d.method.__qualname__.startswith(reference.__name__ + ".")}
    assert bound
    problems = []
    for adapter in REFERENCE_ADAPTERS[reference]:
        for name in sorted(bound):
            method = getattr(adapter, name, None)
            if method is None:
                problems.append(f"{adapter.__name__}.{name}: missing")
            elif (problem := signature_mismatch(getattr(reference, name), method)) is not None:
                problems.append(f"{adapter.__name__}.{name}: {problem}")
    assert not problems, problems


def test_every_describer_is_bound_to_its_method_and_event():
    for port, table in DESCRIBERS_BY_PORT.items():
        for name, describe in table.items():
            assert describe.method.__name__ == name
            assert describe.event.kind == f"{port}.{name}"
            fn = describe.__wrapped__
            assert [p[0] for p in port_parameters(describe.method)] == list(
                inspect.signature(fn).parameters)[1:]


class _Port:
    async def clear(self, key: str) -> None: ...

    async def clear_renamed(self, record_key: str) -> None: ...

    async def clear_kw(self, *, key: str) -> None: ...

    async def clear_default(self, key: str = "k") -> None: ...


@pytest.mark.parametrize("method", [_Port.clear_renamed, _Port.clear_kw, _Port.clear_default])
def test_a_port_signature_change_fails_at_the_describer(method):
    def _describer(result, /, key):
        return DsClear.build(key=key)

    assert describes(_Port.clear, DsClear)(_describer)(("k",), {}, None) == {"key": "k"}
    with pytest.raises(TypeError, match="does not take the parameters"):
        describes(method, DsClear)(_describer)


def test_a_describer_binds_positional_and_keyword_arguments_alike():
    describe = DESCRIBERS_BY_PORT["ds"]["save"]

    class Write:
        contract_version = 2
        payload = {"a": 1}

    by_position = describe(("k", Write(), 3), {}, None)
    by_name = describe((), {"key": "k", "write": Write(), "expected_revision": 3}, None)
    assert by_position == by_name == {"key": "k", "expected": 3, "version": 2, "payload": {"a": 1}}
    with pytest.raises(TypeError):
        describe(("k", Write()), {}, None)  # a call the port itself would refuse
