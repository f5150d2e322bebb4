"""A run's result never carries a declared secret (``sim.redact``), and says
so when something tried: ``Workload.secret_values`` declares them, the
runner replaces each one it finds in the result by ``[secret: LABEL]`` and
fails the run with ``no-secret-in-verdict``; neither the reports, the repro
file nor the failure database print the value. A workload that declares
none changes nothing.
"""
from __future__ import annotations

import html
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sim.clock import parse_duration_ms
from sim.redact import NO_SECRET_IN_VERDICT, Redactor
from sim.runner import run
from sim.scenario import Scenario, ScenarioOptions

REPO_ROOT = Path(__file__).resolve().parents[1]
MODULE = "userleak.leaky"
KEY, PIN = "0123456789abcdef0123456789abcdef", "4821"

# A user's scenario: a ticker; its checker's violation message embeds the
# declared secrets (a checker that prints what it compared), its failure's
# related events hold the key, its stats hold the PIN and a hex id that
# merely contains the PIN's digits. ``leak=0``: nothing leaks (it passes).
LEAKY = f'''
from scenarios.api import Checker, Param, PortFaults, Stack, System, Workload, scenario

KEY, PIN = {KEY!r}, {PIN!r}


class Compare(Checker):
    name = "tick-compare"
    kinds = ("tick",)

    def __init__(self, leak):
        super().__init__()
        self.leak = leak

    def on_event(self, event):
        self.checks += 1
        if self.leak and event.fields["n"] == 5:
            self.fail(f"tick 5 sent key {{KEY}} with pin {{PIN!r}}", related=(KEY,))


class Keeper(Workload):
    name = "keeper"

    def __init__(self, leak):
        self.leak = leak
        self.ticks = 0

    def start(self, world):
        async def ticker():
            while True:
                await world.runtime.sleep_ms(60_000)
                self.ticks += 1
                world.emit("tick", n=self.ticks, **({{"credential": KEY}} if self.leak and self.ticks == 4 else {{}}))

        world.spawn_harness("ticker", ticker())

    def metrics(self):
        return {{"ticks": self.ticks, "pin_seen": PIN if self.leak else "none", "batch": "ab4821cd"}}

    def secret_values(self):
        return {{"api-key v1": KEY, "pin v1": PIN}}


@scenario("leaky", "a ticker whose checker prints the secrets it compared", duration="10m",
          params=(Param("leak", 1, "whether the checker and the stats leak"),))
def build(run):
    return Stack(system=System(restart_ms=(0, 0)), workloads=[Keeper(run.param("leak"))], faults=PortFaults({{}}),
                 checks=[Compare(run.param("leak"))])
'''


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("leak")
    package = base / "userleak"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "leaky.py").write_text(LEAKY)
    return base


def _loomsim(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join((str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-m", "sim", "--scenarios", MODULE, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def _leaks(text: str) -> list[str]:
    """What of the secrets ``text`` shows: the key anywhere, the PIN as a
    quoted token (after undoing HTML/XML escapes)."""
    plain = html.unescape(text)
    return [what for what, found in (("key", KEY in plain), ("pin", f'"{PIN}"' in plain or f"'{PIN}'" in plain))
            if found]


def _files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text(encoding="utf-8", errors="replace")
            for p in sorted(root.rglob("*")) if p.is_file() and "userleak" not in p.parts}


def test_a_secret_in_the_verdict_fails_the_run_and_reaches_no_artifact(project):
    out = project / "run"
    out.mkdir()
    proc = _loomsim(["run", "leaky", "--seed", "0", "--report", str(out / "rep"), "--repro-dir", str(out),
                     "--json"], project)
    assert proc.returncode == 1, proc.stderr[-2000:]
    body = json.loads(proc.stdout)
    assert body["status"] == "fail"
    names = [v["name"] for v in body["violations"]]
    assert names == ["tick-compare", NO_SECRET_IN_VERDICT], names
    guard = body["violations"][1]["message"]
    assert "api-key v1 in violations[0].message" in guard and "pin v1 in violations[0].message" in guard
    assert "stats.pin_seen" in guard and "excerpt" in guard
    assert "[secret: api-key v1]" in body["violations"][0]["message"]
    assert "'[secret: pin v1]'" in body["violations"][0]["message"]
    assert body["stats"]["pin_seen"] == "[secret: pin v1]"
    assert body["stats"]["batch"] == "ab4821cd"  # a short value never matches inside another text
    files = _files(out)
    assert any(name.startswith("rep/") for name in files) and any(name.endswith(".json") and "/" not in name
                                                                  for name in files), sorted(files)
    assert {name: _leaks(text) for name, text in files.items() if _leaks(text)} == {}
    assert _leaks(proc.stdout) == [] and _leaks(proc.stderr) == []
    (project / "human").mkdir()
    human = _loomsim(["run", "leaky", "--seed", "0", "--repro-dir", str(project / "human")], project)
    assert human.returncode == 1 and NO_SECRET_IN_VERDICT in human.stdout, human.stdout[-2000:]
    assert _leaks(human.stdout) == [] and _leaks(human.stderr) == []


def test_a_sweep_failure_database_never_holds_the_secret(project):
    out = project / "sweep"
    out.mkdir()
    proc = _loomsim(["sweep", "leaky", "--seeds", "0:1", "--failure-db", str(out / "db"), "--repro-dir",
                     str(out), "--report", str(out / "rep")], project)
    assert proc.returncode == 1, (proc.stdout[-2000:], proc.stderr[-2000:])
    files = _files(out)
    assert any(name.startswith("db/") for name in files), sorted(files)
    assert {name: _leaks(text) for name, text in files.items() if _leaks(text)} == {}
    assert _leaks(proc.stdout) == [] and _leaks(proc.stderr) == []


# -- in process ------------------------------------------------------------------------


def _scenario(leak: int, declares: bool):
    from scenarios.api import Checker, PortFaults, Stack, System, Workload

    class Ticks(Checker):
        name = "ticks"
        kinds = ("tick",)

        def on_event(self, event):
            self.checks += 1

    class Ticker(Workload):
        name = "ticker"

        def start(self, world):
            async def tick():
                for n in range(5):
                    await world.runtime.sleep_ms(60_000)
                    world.emit("tick", n=n)

            world.spawn_harness("ticker", tick())

        def metrics(self):
            return {"last": PIN if leak else "nothing"}

        def secret_values(self):
            return {"pin v1": PIN} if declares else {}

    def build(run_):
        return Stack(system=System(restart_ms=(0, 0)), workloads=[Ticker()], faults=PortFaults({}), checks=[Ticks()])

    return Scenario("ticking", "test", build, parse_duration_ms("10m"))


def test_declaring_no_secrets_changes_nothing_and_declaring_unused_ones_only_counts_the_check():
    opts = ScenarioOptions(seed=3, duration_ms=parse_duration_ms("10m"))
    plain = run(_scenario(leak=1, declares=False), opts)
    assert plain.passed and plain.stats["last"] == PIN and NO_SECRET_IN_VERDICT not in plain.invariants
    clean = run(_scenario(leak=0, declares=True), opts)
    base = run(_scenario(leak=0, declares=False), opts)
    assert clean.passed and clean.trace_digest == base.trace_digest == plain.trace_digest
    assert clean.events == base.events and clean.stats == base.stats and clean.violations == ()
    assert clean.invariants == {**base.invariants, NO_SECRET_IN_VERDICT: 1}
    leaked = run(_scenario(leak=1, declares=True), opts)
    assert leaked.status == "fail" and leaked.trace_digest == plain.trace_digest
    assert [v.invariant for v in leaked.violations] == [NO_SECRET_IN_VERDICT]
    assert leaked.stats["last"] == "[secret: pin v1]" and PIN not in leaked.violations[0].message


@pytest.mark.parametrize("text, expected", [
    ("4821", "[secret: pin]"),
    ('{"pin": "4821"}', '{"pin": "[secret: pin]"}'),
    ("pin '4821' refused", "pin '[secret: pin]' refused"),
    ("digest ab4821cd at 1704821000 ms", "digest ab4821cd at 1704821000 ms"),
    (f"key={KEY}!", "key=[secret: key]!"),
    (f"sha {KEY[:7]}", f"sha {KEY[:7]}"),
])
def test_short_values_match_whole_tokens_long_ones_anywhere(text, expected):
    redactor = Redactor({"pin": PIN, "key": KEY})
    assert redactor.walk({"m": [text]}, "x") == {"m": [expected]}
    assert bool(redactor.found) == (text != expected)
