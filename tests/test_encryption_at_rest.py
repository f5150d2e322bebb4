"""Encryption at rest is a declared capability: the ledger adapters declare
``encryption_at_rest`` (memory and SQLite: False), a user's adapter may
declare it True, and a workload that requires it (``Workload.requires``)
is refused a durable store that does not declare it, before anything runs
(``System.require``: one ``SetupError`` line, exit 2 from the CLI). In
memory nothing is judged.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from model.conversation.memory_store import InMemoryConversationStore
from model.ledger.memory_store import InMemorySubmissionLedger
from model.ledger.sqlite_store import SqliteSubmissionLedger
from sim.clock import parse_duration_ms
from sim.runner import run
from sim.scenario import Scenario, ScenarioOptions, SetupError

REPO_ROOT = Path(__file__).resolve().parents[1]
HERE = "tests.test_encryption_at_rest"


class EncryptedLedger(InMemorySubmissionLedger):
    """A user's ledger adapter over an encrypted volume: it says so."""

    def capabilities(self) -> dict:
        return {**super().capabilities(), "adapter": "encrypted", "encryption_at_rest": True}


def encrypted_stores() -> dict:
    return {"ledger": EncryptedLedger()}


def plain_stores() -> dict:
    return {"ledger": InMemorySubmissionLedger()}


def encrypted_ledger_plain_log() -> dict:
    return {"ledger": EncryptedLedger(), "log": InMemoryConversationStore()}


def _scenario(requires: tuple[str, ...]) -> Scenario:
    from scenarios.api import Checker, PortFaults, Stack, System, Workload

    class Ticks(Checker):
        name = "ticks"
        kinds = ("tick",)

        def on_event(self, event):
            self.checks += 1

    class Vault(Workload):
        name = "vault"

        def start(self, world):
            async def tick():
                for n in range(3):
                    await world.runtime.sleep_ms(60_000)
                    world.emit("tick", n=n)

            world.spawn_harness("ticker", tick())

        def requires(self):
            return requires

    def build(run_):
        return Stack(system=System(restart_ms=(0, 0)), workloads=[Vault()], faults=PortFaults({}), checks=[Ticks()])

    return Scenario("vault", "test", build, parse_duration_ms("5m"))


def _run(requires: tuple[str, ...], store: str, tmp_path: Path):
    opts = ScenarioOptions(seed=0, duration_ms=parse_duration_ms("5m"), store=store,
                           db_path=str(tmp_path / "run.db") if store == "sqlite" else None)
    return run(_scenario(requires), opts)


def test_the_adapters_declare_whether_they_encrypt_at_rest(tmp_path):
    assert InMemorySubmissionLedger().capabilities()["encryption_at_rest"] is False
    sqlite = SqliteSubmissionLedger.open(str(tmp_path / "caps.db"))
    try:
        assert sqlite.capabilities()["encryption_at_rest"] is False
    finally:
        sqlite.close()


def test_a_requirement_refuses_sqlite_before_anything_runs(tmp_path):
    with pytest.raises(SetupError) as info:
        _run(("encryption-at-rest",), "sqlite", tmp_path)
    message = str(info.value)
    assert "\n" not in message
    assert message == ("workload 'vault' requires encryption-at-rest, which the 'sqlite' store "
                       "(SqliteSubmissionLedger) does not declare (encryption_at_rest=False)")


@pytest.mark.parametrize("factory, problem", [
    ("plain_stores", "the 'ledger' store (InMemorySubmissionLedger) does not declare (encryption_at_rest=False)"),
    ("encrypted_ledger_plain_log", "the 'log' store (InMemoryConversationStore) does not declare "
                                   "(no capabilities())"),
])
def test_a_requirement_refuses_a_user_adapter_that_does_not_declare_it(factory, problem, tmp_path):
    with pytest.raises(SetupError, match=r"^workload 'vault' requires encryption-at-rest, which ") as info:
        _run(("encryption-at-rest",), f"{HERE}:{factory}", tmp_path)
    assert str(info.value).endswith(problem.replace("the ", "", 1)), str(info.value)


def test_a_user_adapter_declaring_it_runs_and_memory_is_not_judged(tmp_path):
    declared = _run(("encryption-at-rest",), f"{HERE}:encrypted_stores", tmp_path)
    unrequired = _run((), f"{HERE}:encrypted_stores", tmp_path)
    assert declared.passed and declared.trace_digest == unrequired.trace_digest
    memory = _run(("encryption-at-rest",), "memory", tmp_path)
    assert memory.passed and memory.trace_digest == _run((), "memory", tmp_path).trace_digest


def test_without_the_requirement_sqlite_runs_as_before(tmp_path):
    assert _run((), "sqlite", tmp_path).passed


def test_an_unknown_requirement_is_one_line(tmp_path):
    with pytest.raises(SetupError, match=r"^workload 'vault' requires 'teleportation', which no store declares "
                                         r"\(known: encryption-at-rest\)$"):
        _run(("teleportation",), "memory", tmp_path)


VAULT = '''
from scenarios.api import PortFaults, Stack, System, Workload, scenario


class Vault(Workload):
    def requires(self):
        return ("encryption-at-rest",)


@scenario("vault", "a workload that requires encryption at rest", duration="5m")
def build(run):
    return Stack(system=System(restart_ms=(0, 0)), workloads=[Vault()], faults=PortFaults({}))
'''


def test_the_cli_refuses_it_with_one_error_line_and_exit_2(tmp_path):
    package = tmp_path / "uservault"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "vault.py").write_text(VAULT)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join((str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-m", "sim", "--scenarios", "uservault.vault", "run", "vault", "--seed", "0",
                           "--store", "sqlite", "--trace", str(tmp_path / "t.jsonl")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == ["loomsim: error: workload 'vault' requires encryption-at-rest, which the "
                                        "'sqlite' store (SqliteSubmissionLedger) does not declare "
                                        "(encryption_at_rest=False)"]
    assert not (tmp_path / "t.jsonl").exists()
