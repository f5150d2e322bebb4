"""Runs that leave the clock, partition and disk faults out are the runs they
were before those faults existed: each digest below was computed on the
commit before them (same scenario, seed, duration and store, swarm on).

Clock skew, clock jumps and partitions join a seed's swarm by their own
names, so disabling them (``--faults-disable``) must leave every other
choice, and so the trace, where it was; the disk faults are beyond the
contract and never fire in a run within it. A digest that moves here means
a new fault family leaked into runs that do not ask for it. (The model fixes
that came with them change the runs they fix, and only those: a worker
that used to do a step's effect past its lease now stops, so ledger-storm
seed 4 on SQLite, 30m, is another run now.)"""
from __future__ import annotations

import pytest

from faults.kinds import CLOCK_JUMP, CLOCK_SKEW, PARTITION
from scenarios import registry
from sim.clock import parse_duration_ms
from sim.runner import run
from sim.scenario import ScenarioOptions

NEW_IN_CONTRACT = (CLOCK_SKEW, CLOCK_JUMP, PARTITION)
# Knobs added since, by scenario, at their "off" value: a run leaves them out too.
NEW_KNOBS_OFF = {"ledger-storm": {"second_principal": 0, "held_admissions": 0}}

BEFORE = {
    ("ledger-storm", 3, "10m", "memory"): "e249969e343b61c6516e27f25021d8070535cc90f7ef5d8c712cb6a6e0ad6f9d",
    ("ledger-storm", 3, "30m", "memory"): "ada8c462b5f93c2dedb50ccafec9db785bac28fde90db12670a8fa414989042a",
    ("ledger-storm", 3, "1h", "memory"): "09267e52c6ada42a16350b31f1cda4b6e3aaffbddf386f33bde0ecfd7e0cebc2",
    ("ledger-storm", 5, "10m", "sqlite"): "6efc3b53b7d45e6795622e57fa86c2c5703c62c33c7f1a0aec9c40bf42f414aa",
    ("ledger-storm", 7, "1h", "sqlite"): "f5a61e07271c3e523a9139d708f273819f0d243ace7c986e406863516814209d",
    ("sentinel-year", 2, "1d", "memory"): "7fe816446688a89972f5d0fe07ad6ce5177ee48fcd64f8f76102a8591090e15f",
    ("sentinel-year", 3, "1d", "memory"): "3a3645ca11f5f71b53ed4c27188ef1d8456aa31ec8b8bd092e00a6bcec36ecfa",
    ("sentinel-year", 5, "1d", "memory"): "34549389fc1c699af3df70a192f624bf9fb1c3f1bb310dbac18bede48df199a8",
    ("agent-conversations", 3, "1h", "memory"): "0225ba95aceb2f79c08a9dda4d4edb9082b67a816402d71de589df55a497695d",
}


@pytest.mark.parametrize("key", sorted(BEFORE), ids=lambda key: "-".join(map(str, key)))
def test_a_run_without_the_new_fault_families_keeps_its_digest(key):
    name, seed, duration, store = key
    result = run(registry.get(name), ScenarioOptions(seed=seed, duration_ms=parse_duration_ms(duration), store=store,
                                                     swarm=True,
                                                     faults_disable=NEW_IN_CONTRACT, knobs=NEW_KNOBS_OFF.get(name, {})))
    assert result.passed, result.violations
    assert result.trace_digest == BEFORE[key]
