"""An agent worker with secrets (model/agent.py ``secrets=``), both adapters.

Its tools and its model take credentials by handle: the recorded tool-call
arguments and the model request hold a reference, the tool and the model
receive the resolved value (and check it), the prepared record carries a
keyed fingerprint of what was sent, and every sensitive field the worker
appends is sealed and opens back to what was written, for a successor too.
A worker without secrets writes exactly the plain records it always wrote.
"""
from __future__ import annotations

import pytest

from model.agent import MODEL, TOOL, TOOL_ONCE, AgentWorker
from model.canonical import canonical_json, digest
from model.failpoints import TOOL_RESULTS_APPENDED
from model.ledger.records import settlement_of
from model.lifecycle import SubmissionLifecycle
from model.secrets import AgentSecrets
from model.secrets.envelope import Sealer, is_sealed, keyed_digest, sensitive_fields
from model.secrets.errors import CredentialRejected
from model.secrets.keyring import InMemoryKeyringStore, SqliteKeyringStore
from model.secrets.keys import SimulatedKeyService
from model.secrets.store import InMemorySecretStore
from scenarios.storage import run_sync as drive
from scenarios.workloads.agents import ModelService, ToolService
from tests.fakes import Crash, CrashAt, Stores

C = "conv-1"
LEASE_MS = 30_000
SEARCH_KEY, MODEL_KEY, PIN = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210", "4821"
DIGEST_KEY = b"digest-key"
CREDENTIALS = {"search": "search-api-key", "send-email": "email-pin"}


class Tools:
    """The workload's tool service with credentials, called directly; keeps what each call received."""

    def __init__(self, world, secrets: InMemorySecretStore | None) -> None:
        self.world = world
        self.service = ToolService() if secrets is None else ToolService(secret_store=secrets,
                                                                          credentials=CREDENTIALS)
        self.received: list = []
        self.results: list = []

    async def invoke(self, call_id, tool, args, key, deadline_ms):
        self.received.append(args)
        result = self.service._invoke("w", call_id, tool, args, key, deadline_ms, self.world.ms)
        self.results.append(result)
        return result


class Model:
    def __init__(self, secrets: InMemorySecretStore | None) -> None:
        self.service = ModelService() if secrets is None else ModelService(secret_store=secrets,
                                                                           credential="model-api-key")
        self.requests: list = []

    async def stream(self, call_id, request):
        self.requests.append(request)
        self.service.check(request)
        return [{"kind": "text", "text": f"answer to {call_id}"},
                {"kind": "completed", "usage": {"inputTokens": 1, "outputTokens": 1, "costMicros": 1}}]


class World(Stores):
    def __init__(self, kind: str, tmp_path, *, with_secrets: bool = True) -> None:
        super().__init__(kind, tmp_path, "agent.db")
        self.secret_store = InMemorySecretStore({"search-api-key": [SEARCH_KEY], "email-pin": [PIN],
                                                 "model-api-key": [MODEL_KEY]}) if with_secrets else None
        self.tools = Tools(self, self.secret_store)
        self.model = Model(self.secret_store)
        self.keys = SimulatedKeyService(b"root", lambda: self.ms)
        self.keyring = InMemoryKeyringStore() if self.conn is None else SqliteKeyringStore(self.conn)

    def secrets(self) -> AgentSecrets:
        return AgentSecrets(sealer=Sealer(self.keys, self.keyring), secret_store=self.secret_store,
                            digest_key=DIGEST_KEY, tool_credentials=CREDENTIALS, model_credential="model-api-key")

    def worker(self, owner: str = "w1", **settings) -> AgentWorker:
        if self.secret_store is not None:
            settings["secrets"] = self.secrets()
        return AgentWorker(self.ledger, self.log, owner, lease_ms=LEASE_MS, now_ms=self.now, tools=self.tools,
                           model=self.model, model_profile={"provider": "p", "model": "m", "tier": "t"},
                           child_plan=lambda record, index: [MODEL], work=None, **settings)

    def submit(self, plan: list) -> str:
        life = SubmissionLifecycle(self.ledger, self.log, now_ms=self.now)
        return drive(life.admit(C, "p", "k1", {"n": 1, "plan": plan, "maxDurationMs": 10 ** 9}, self.ms,
                                complete_replay=True)).submission_id

    def opened(self) -> list[tuple]:
        """(family, stored payload, opened payload) of every record of the log."""
        records = self.records(C)
        first: dict[str, int] = {}
        out = []
        for record in records:
            first.setdefault(record.batch_id, record.seq)
            envelope = record.envelope
            opened = drive(Sealer(self.keys, self.keyring).open_payload(
                C, record.batch_id, record.seq - first[record.batch_id], envelope.family, envelope.payload))
            out.append((envelope.family, envelope.payload, opened))
        return out

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


@pytest.fixture(params=["memory", "sqlite"])
def world(request, tmp_path):
    w = World(request.param, tmp_path)
    yield w
    w.close()


def test_tool_calls_record_the_ref_seal_their_fields_and_the_tool_gets_the_credential(world):
    sid = world.submit([TOOL, MODEL, TOOL_ONCE])
    outcome = drive(world.worker().process_next(C))
    assert outcome.settlement.outcome == "completed"
    # The tools and the model received the values, at the boundary only.
    assert [args["credential"] for args in world.tools.received] == [SEARCH_KEY, PIN]
    assert world.model.requests == [{"submission": sid, "step": 1, "apiKey": MODEL_KEY}]
    records = world.opened()
    text = canonical_json([payload for _, payload, _ in records])
    for value in (SEARCH_KEY, MODEL_KEY, PIN):
        assert value not in text
    sealed_fields = 0
    for family, stored, opened in records:
        for field in sensitive_fields(family, stored):
            assert is_sealed(stored[field]), (family, stored)
            sealed_fields += 1
    assert sealed_fields == 2 * 3 + 2  # requested, prepared, settled per call; the turn's delta and completion
    tool_calls = [(stored, opened) for family, stored, opened in records if family == "tool-call"]
    prepared = [opened for _, opened in tool_calls if opened["phase"] == "prepared"]
    assert [p["args"]["credential"] for p in prepared] == [{"$secret": "search-api-key"}, {"$secret": "email-pin"}]
    assert [p["fingerprint"] for p in prepared] == [keyed_digest(DIGEST_KEY, args) for args in world.tools.received]
    assert all(p["fingerprint"] != "sha256:" + digest(args) for p, args in zip(prepared, world.tools.received))
    settled = [opened["output"] for _, opened in tool_calls if opened["phase"] == "settled"]
    assert [output["result"] for output in settled] == world.tools.results
    # The tool echoed the arguments with the reference, never the value.
    assert [r["args"]["credential"] for r in world.tools.results] == [{"$secret": "search-api-key"},
                                                                      {"$secret": "email-pin"}]
    requested = [opened for family, _, opened in records if family == "model-request"]
    assert requested[0]["credential"] == {"$secret": "model-api-key"}
    completed = [opened for family, _, opened in records if family == "model-completed"]
    assert completed[0]["text"] == f"answer to {sid}/s1"
    result = settlement_of(drive(world.ledger.get(sid)).reserved_record)["result"]
    assert result["outputs"][1]["text"] == completed[0]["text"]


def test_a_successor_opens_the_settled_tool_call_it_finds(world):
    sid = world.submit([TOOL, MODEL])
    with pytest.raises(Crash):
        drive(world.worker(failpoints=CrashAt(TOOL_RESULTS_APPENDED)).process_next(C))
    world.ms += LEASE_MS + 1
    outcome = drive(world.worker("w2").process_next(C))
    assert outcome.settlement.outcome == "completed"
    assert len(world.tools.received) == 1  # never called again: its sealed result was read back
    outputs = settlement_of(drive(world.ledger.get(sid)).reserved_record)["result"]["outputs"]
    assert outputs[0]["result"] == world.tools.results[0]


def test_a_wrong_or_missing_credential_is_rejected_typed():
    store = InMemorySecretStore({"search-api-key": ["old"], "model-api-key": ["m1"]})
    tools = ToolService(secret_store=store, credentials={"search": "search-api-key"})
    assert tools._invoke("w", "c1", "search", {"credential": "old"}, None, None, 0)["args"]["credential"] == {
        "$secret": "search-api-key"}
    store.put("search-api-key", "new")
    store.put("search-api-key", "newer")
    for args in ({"credential": "old"}, {}, {"credential": {"$secret": "search-api-key"}}):
        with pytest.raises(CredentialRejected):
            tools._invoke("w", "c2", "search", args, None, None, 0)
    assert tools.credentials_rejected == 3 and tools.arrivals("c2") == 0
    tools._invoke("w", "c3", "search", {"credential": "new"}, None, None, 0)  # the version it just replaced
    model = ModelService(secret_store=store, credential="model-api-key")
    model.check({"apiKey": "m1"})
    with pytest.raises(CredentialRejected):
        model.check({"submission": "s"})
    assert CredentialRejected("model", "model-api-key").retryable is False


def test_a_worker_without_secrets_writes_plain_records(tmp_path):
    world = World("memory", tmp_path, with_secrets=False)
    sid = world.submit([TOOL, MODEL])
    drive(world.worker().process_next(C))
    records = [(r.envelope.family, r.envelope.payload, None) for r in world.records(C)]
    assert world.tools.received == [{"submission": sid, "step": 0}]
    assert world.model.requests == [{"submission": sid, "step": 1}]
    prepared = [stored for family, stored, _ in records if family == "tool-call" and stored["phase"] == "prepared"]
    assert prepared[0]["args"] == {"submission": sid, "step": 0} and "fingerprint" not in prepared[0]
    assert not any(is_sealed(value) for _, stored, _ in records for value in stored.values())
    assert drive(world.keyring.scan("", 10)) == ()


# -- the System's keyring ------------------------------------------------------------

import io  # noqa: E402
import json  # noqa: E402

from faults.plan import PortFaults  # noqa: E402
from model.secrets.rotation import rotate_keys  # noqa: E402
from scenarios.api import HOUR, SECOND, Stack, System  # noqa: E402
from sim.clock import parse_duration_ms  # noqa: E402
from sim.invariants import Checker  # noqa: E402
from sim.runner import run  # noqa: E402
from sim.scenario import Scenario, ScenarioOptions  # noqa: E402
from sim.workload import Workload  # noqa: E402


class _Sealing(Workload):
    """One process sealing a record of three conversations through its keyring port, then rotating."""

    name = "sealing"

    def setup(self, world) -> None:
        self.world = world
        self.ports = []
        self.keys = SimulatedKeyService(b"root", world.runtime.now_ms)
        world.add_node(self.node_name("sealer"), self._start, role="client")

    def _start(self, node) -> None:
        ports = self.world.system.ports_for(node)
        self.ports.append(ports)
        if ports.keyring is not None:
            self.world.runtime.spawn_on(node, "sealer", self._seal(ports.keyring))

    async def _seal(self, keyring) -> None:
        sealer = Sealer(self.keys, keyring)
        for n in range(3):
            await sealer.seal_payload(f"c{n}", "b", 0, "model-delta", {"text": "t"})
        await rotate_keys(self.keys, keyring, "rotation-1", "kek-2", page=2)


class _Rows(Checker):
    name = "keyring-rows"

    def audit(self, view) -> None:
        self.checks += 1
        self.rows = view.keyring_rows()


def _keyring_run(store: str, keyring: bool, tmp_path):
    sealing, rows = _Sealing(), _Rows()

    def build(run_):
        return Stack(system=System(restart_ms=(SECOND, 2 * SECOND), keyring=keyring), faults=PortFaults({}),
                     workloads=[sealing], checks=[rows], heal_ms_max=HOUR, settle_ms=HOUR)

    trace = io.StringIO()
    opts = ScenarioOptions(seed=1, duration_ms=parse_duration_ms("1m"), store=store,
                           db_path=str(tmp_path / "run.db") if store == "sqlite" else None)
    result = run(Scenario("sealing", "test", build, parse_duration_ms("1m")), opts, trace_stream=trace)
    return result, sealing, rows, trace.getvalue()


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_a_system_with_a_keyring_binds_it_per_node_traced_and_audits_its_rows(store, tmp_path):
    result, sealing, rows, trace = _keyring_run(store, True, tmp_path)
    assert result.passed, result.violations
    assert [(row.dek_id, row.key_id) for row in rows.rows] == [(f"dek/c{n}/kek-1", "kek-2") for n in range(3)]
    assert sealing.keys.retired_at_ms.keys() == {"kek-1"}
    kinds = [json.loads(line).get("kind") for line in trace.splitlines() if line.startswith("{")]
    assert {"keyring.put_if_absent", "keyring.rewrap", "keyring.scan", "keyring.save_rotation"} <= set(kinds)
    for row in rows.rows:
        assert row.wrapped not in trace  # a wrapped key's length only


def test_a_system_without_a_keyring_binds_none(tmp_path):
    result, sealing, rows, trace = _keyring_run("memory", False, tmp_path)
    assert result.passed and sealing.ports[0].keyring is None and rows.rows == ()
    assert "keyring." not in trace


def test_describe_lists_the_keyring_sites_of_a_system_that_has_one():
    from faults.kinds import WRITE_CONTENTION
    from sim.face.describe import fault_sites

    def sites(keyring: bool) -> dict:
        stack = Stack(system=System(restart_ms=(SECOND, 2 * SECOND), keyring=keyring), faults=PortFaults({}),
                      workloads=[_Sealing()], heal_ms_max=HOUR, settle_ms=HOUR)
        scenario = Scenario("sealing", "test", lambda run_: stack, parse_duration_ms("1m"))
        return {s["site"]: s["kinds"] for s in fault_sites(scenario, [stack])}

    with_keyring, without = sites(True), sites(False)
    assert not any(site.startswith("keyring.") for site in without)
    assert {site for site in with_keyring if site.startswith("keyring.")} == {
        f"keyring.{m}" for m in ("put_if_absent", "get", "rewrap", "scan", "get_rotation", "save_rotation")}
    # The keyring's reads take no write contention; its writes do.
    for read in ("get", "scan", "get_rotation"):
        assert WRITE_CONTENTION not in with_keyring[f"keyring.{read}"], read
    for write in ("put_if_absent", "rewrap", "save_rotation"):
        assert WRITE_CONTENTION in with_keyring[f"keyring.{write}"], write
