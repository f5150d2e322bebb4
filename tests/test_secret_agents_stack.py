"""The secret-agents stack: a clean run passes and reaches what it is for
(rotations, re-wraps, a rotation resumed by a restarted rotator, sealed
records, keyed fingerprints), memory and SQLite trace the same history,
``describe`` lists its ports, sites and invariants, and the key service's
and secret store's trace never carries a value."""
from __future__ import annotations

import json

import pytest

from scenarios import registry
from scenarios.workloads.secrets import KEYS_DESCRIBERS, SECRETS_DESCRIBERS, Secrets
from sim.clock import parse_duration_ms
from sim.face.describe import describe
from sim.runner import run
from sim.scenario import ScenarioOptions


def _run(seed: int, duration: str, **options):
    return run(registry.get("secret-agents"), ScenarioOptions(seed=seed, duration_ms=parse_duration_ms(duration),
                                                              **options))


def test_a_clean_run_rotates_rewraps_resumes_after_a_kill_and_seals():
    result = _run(8, "40m")
    assert result.passed, result.violations
    stats = result.stats
    assert stats["key_rotations_done"] >= 2 and stats["keys_retired"] == stats["key_rotations_done"]
    assert stats["key_rotations_resumed"] >= 1  # the rotator was killed in a pass and resumed it
    assert stats["data_keys_rewrapped"] >= stats["key_rotations_done"]
    assert stats["sealed_fields_opened"] > 100 and stats["secret_fingerprints_checked"] > 10
    assert stats["secret_versions"] >= 3 and stats["credentials_rejected"] == 0
    assert result.invariants["no-secret-leak"] > 1_000 and result.invariants["sealed-under-live-key"] > 100
    assert result.invariants["unknown-never-replayed"] > 0  # it opens the sealed tool results it compares


def test_memory_and_sqlite_trace_the_same_history():
    memory = _run(0, "10m", store="memory")
    sqlite = _run(0, "10m", store="sqlite")
    assert memory.passed and sqlite.passed, (memory.violations, sqlite.violations)
    assert memory.trace_digest == sqlite.trace_digest


def test_describe_lists_the_secret_ports_sites_and_invariants():
    body = describe(registry.get("secret-agents"))
    sites = {site["site"] for site in body["fault_sites"]}
    for site in ("keys.current", "keys.generate_data_key", "keys.unwrap", "keys.wrap", "keys.rotate", "keys.retire",
                 "secrets.resolve", "keyring.rewrap", "keyring.save_rotation", "rotation:after-rotate",
                 "rotation:after-page", "rotation:before-retire"):
        assert site in sites, site
    names = {inv["name"] for inv in body["invariants"]}
    assert {"no-secret-leak", "sealed-under-live-key", "unknown-never-replayed"} <= names
    assert {"node-kill", "ack-lost", "reply-lost", "transient-error", "latency"} <= set(body["fault_kinds"])


def test_the_key_and_secret_ports_trace_ids_and_lengths_only():
    data_key, wrapped = b"\x01" * 32, "ab" * 64
    traced = [
        KEYS_DESCRIBERS["generate_data_key"](("kek-1",), {}, (data_key, wrapped)),
        KEYS_DESCRIBERS["unwrap"](("kek-1", wrapped), {}, data_key),
        KEYS_DESCRIBERS["wrap"](("kek-2", data_key), {}, wrapped),
        KEYS_DESCRIBERS["current"]((), {}, "kek-2"),
        KEYS_DESCRIBERS["rotate"](("kek-3",), {}, "kek-3"),
        SECRETS_DESCRIBERS["resolve"](("search-api-key",), {}, "f" * 32),
    ]
    text = json.dumps(traced, default=repr)
    assert wrapped not in text and repr(data_key) not in text and "f" * 32 not in text
    assert traced[0] == {"key_id": "kek-1", "length": 32, "wrapped_length": 128}
    assert traced[5] == {"handle": "search-api-key", "length": 32}


def test_the_secrets_workload_needs_a_system_with_a_keyring():
    from scenarios.api import HOUR, SECOND, PortFaults, Stack, System
    from sim.scenario import Scenario
    from sim.workload import StackError

    stack = Stack(system=System(restart_ms=(SECOND, 2 * SECOND)), workloads=[Secrets()], faults=PortFaults({}),
                  heal_ms_max=HOUR, settle_ms=HOUR)
    scenario = Scenario("secrets-without-keyring", "test", lambda run_: stack, parse_duration_ms("1m"))
    with pytest.raises(StackError, match="needs a system with a keyring"):
        run(scenario, ScenarioOptions(seed=0, duration_ms=parse_duration_ms("1m")))


def test_canonical_events_opens_a_sealed_tool_output_before_judging_it():
    """A call settled from its reconciler's resolution needs its tool-call
    resolved record before it; the settled output is sealed here, so the
    check opens it first (unopened, it read no ``reconciled`` mark and let
    the planted bug pass every seed)."""
    from faults import mutants as mx
    from faults.mutant_catalogue import MUTANTS

    (planted,) = [m for m in MUTANTS if m.name == "agent-no-tool-resolved"]
    assert _run(2, "7m", swarm=True).passed
    with mx.applied(planted):
        result = _run(2, "7m", swarm=True)
    assert not result.passed and {v.invariant for v in result.violations} == {"canonical-events"}, \
        result.violations
