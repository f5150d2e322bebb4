"""The user's documents stand alone and say what the code does: no pointer
to a document a clone does not hold (ADRs, a specification and its rule
numbers), a Quickstart of two commands that says how long each takes, and
the invariant ``scenarios/README.md`` says the planted-bug adapter fails."""
from __future__ import annotations

import re
from pathlib import Path

from scenarios import registry
from sim.clock import parse_duration_ms
from sim.runner import run
from sim.scenario import ScenarioOptions

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = ("README.md", "ARCHITECTURE.md", "scenarios/README.md")
# A reference to a document outside the clone: an ADR, "the specification", one of its rule or section numbers.
OUTSIDE = re.compile(r"\bADR\b|specification|\bspec's\b|\bSTORE-\d+|\bpersistence §|\b[DK]\d+(\.\d+)?\b|\.\./shared")


def test_the_documents_point_at_nothing_a_clone_lacks():
    found = [f"{name}:{number}: {line.strip()}" for name in DOCUMENTS
             for number, line in enumerate((ROOT / name).read_text(encoding="utf-8").splitlines(), 1)
             if OUTSIDE.search(line)]
    assert not found, "\n".join(found)


# In the code: a decision record's number ("ADR 0053 D3", "K11.5") names a text a clone does not hold.
DECISION_NUMBER = re.compile(r"\bADR \d|\bK\d+\.\d+\b")


def test_the_code_names_its_rules_not_decision_record_numbers():
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for package in ("model", "scenarios", "sim", "faults", "reports", "examples", "tests")
             for path in sorted((ROOT / package).rglob("*.py")) if path.name != "test_docs.py"
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if DECISION_NUMBER.search(line)]
    assert not found, "\n".join(found)


def test_the_quickstart_is_two_commands_and_says_how_long_each_takes():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    assert len(block.strip().splitlines()) == 2, block
    prose = section.split("```", 2)[2]
    assert len(re.findall(r"\bthe (first|second)\b[^.]*?\b\d+\S* minutes\b", prose)) == 2, prose


def test_the_planted_bug_adapter_fails_the_invariant_the_scenarios_readme_names():
    text = " ".join((ROOT / "scenarios/README.md").read_text(encoding="utf-8").split())
    named = re.search(r"tests\.fixtures\.buggy:make --seed 1` catches it as `([\w-]+)`", text)
    assert named, "scenarios/README.md no longer names what tests.fixtures.buggy fails"
    result = run(registry.get("ledger-storm"), ScenarioOptions(
        seed=1, duration_ms=parse_duration_ms("1d"), store="tests.fixtures.buggy:make", swarm=True))
    assert not result.passed and result.violations[0].invariant == named.group(1)
