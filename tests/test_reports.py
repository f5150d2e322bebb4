"""Reports (``--report DIR``) and the run's timeline (``sim.timeline``).

One failing run (a ledger adapter with a planted bug, in process: no
mutant is swapped into this process) makes the report the tests read; a
one-seed sweep checks the sweep's path end to end.
"""
from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest

import reports
from faults.kinds import BEYOND_CONTRACT_KINDS, NODE_PAUSE
from reports.html import render_html
from reports.junit import render_junit
from reports.markdown import render_markdown
from scenarios import registry
from sim import runner, timeline
from sim.face import cli, options, run
from sim.face.sweep import seed_record, summarize_scenario, summarize_sweep
from sim.scenario import ScenarioOptions
from sim.trace import Trace

BUGGY = ["run", "ledger-storm", "--seed", "0", "--duration", "2h", "--store", "tests.fixtures.buggy:make"]
REPORT_FILES = ("loomsim-report.html", "loomsim-report.md", "loomsim-junit.xml", "loomsim-report.json")


@pytest.fixture(scope="module")
def failing(tmp_path_factory):
    """The report of a failing run: (its directory, the body, the stdout)."""
    base = tmp_path_factory.mktemp("failing")
    report_dir = base / "rep"  # missing: --report makes it
    code = cli.main([*BUGGY, "--repro-dir", str(base), "--report", str(report_dir), "--json"])
    assert code == cli.EXIT_VIOLATION
    with open(report_dir / "loomsim-report.json", encoding="utf-8") as handle:
        body = json.load(handle)
    return report_dir, body


def _read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


# -- the timeline ---------------------------------------------------------------


def test_timeline_stays_bounded_over_a_long_history():
    now = [0]
    trace = Trace(lambda: now[0])
    line = timeline.Timeline()
    line.subscribe(trace)
    year_ms = 365 * 86_400_000
    for i in range(20_000):  # crashes every ~26 minutes for a year, a deploy every 10th
        now[0] = i * (year_ms // 20_000)
        trace.emit("worker-1", "node.crash", {"restart_after_ms": 1000})
        trace.emit("worker-1", "fault", {"site": "process", "kind": NODE_PAUSE, "hit": i, "duration_ms": 5000})
        if i % 10 == 0:
            trace.emit("harness", "deploy", {"build": f"v{i}", "version": i, "broken": None})
    trace.emit("harness", "violation", {"invariant": "cas-linear", "message": "late"})
    body = line.to_dict(now[0] + 1)
    assert len(body["crashes"]) == timeline.BINS and len(body["faults"][NODE_PAUSE]) == timeline.BINS
    assert sum(body["crashes"]) == 20_000 and sum(body["faults"][NODE_PAUSE]) == 20_000  # folding loses nothing
    assert body["bins"] * body["bin_ms"] >= body["end_ms"] > body["bins"] * body["bin_ms"] // 2
    assert len(body["marks"]) <= timeline.MARKS_MAX
    per_kind = {}
    for mark in body["marks"]:
        per_kind[mark["kind"]] = per_kind.get(mark["kind"], 0) + 1
    assert max(per_kind.values()) <= timeline.MARKS_PER_CATEGORY_MAX
    assert body["marks_dropped"]["crash"] == 20_000 - per_kind["crash"]
    assert per_kind["deploy"] == timeline.MARKS_PER_CATEGORY_MAX  # crashes do not crowd the deploys out
    assert body["violations"] == [{"t_ms": now[0], "invariant": "cas-linear", "message": "late"}]


def test_the_engine_spells_the_fault_kinds_it_marks_as_faults_does():
    assert timeline.PAUSE_FAULT_KIND == NODE_PAUSE
    assert timeline.BEYOND_FAULT_KINDS == BEYOND_CONTRACT_KINDS


def test_the_timeline_only_observes(monkeypatch):
    scenario = registry.get("sentinel-year")
    opts = ScenarioOptions(seed=3, duration_ms=12 * 3_600_000)
    watched = runner.run(scenario, opts)
    assert watched.timeline["bins"] == timeline.BINS
    for kind, count in watched.faults.items():
        assert sum(watched.timeline["faults"].get(kind, ())) == count, kind
    assert sum(watched.timeline["settled"]) == watched.stats["wakes"]
    monkeypatch.setattr(timeline.Timeline, "subscribe", lambda self, trace: None)
    unwatched = runner.run(scenario, opts)
    assert sum(unwatched.timeline["settled"]) == 0  # the patch took
    assert unwatched.trace_digest == watched.trace_digest


# -- the report of a failing run --------------------------------------------------


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def test_the_html_is_one_self_contained_file_with_the_failure(failing):
    report_dir, body = failing
    text = _read(report_dir / "loomsim-report.html")
    assert "<script" not in text.lower() and "http://" not in text and "https://" not in text
    parsed = _Collect()
    parsed.feed(text)
    assert not [t for t, a in parsed.tags if t in ("link", "img", "iframe") or "src" in a]
    root = ET.fromstring(text.split("\n", 1)[1])  # well-formed XML after the doctype
    svg = root.find(".//svg")
    group = svg.find(".//g[@id='timeline']")
    first = body["violations"][0]
    (line,) = group.findall(".//line[@class='violation']")
    assert int(line.get("data-t-ms")) == first["simulated_ms"]
    x0, x1, end_ms = float(group.get("data-x0")), float(group.get("data-x1")), int(group.get("data-end-ms"))
    assert end_ms == body["simulated_ms"]
    assert float(line.get("x1")) == pytest.approx(x0 + (x1 - x0) * first["simulated_ms"] / end_ms, abs=0.1)
    label = "".join(svg.find(".//text[@class='violation-label']").itertext())
    assert first["name"] in label
    assert svg.findall(".//g[@class='settled']/rect"), "an empty timeline"
    invariants = {tr.findall("td")[0].text: tr.findall("td")[1].text
                  for tr in root.findall(".//table[@class='invariants']/tbody/tr")}
    assert invariants == {name: str(n) for name, n in body["invariants"].items()}
    rows = root.findall(".//table[@class='excerpt']/tbody/tr")
    assert len(rows) == len(body["excerpt"]) > 0
    assert [int(r.findall("td")[1].text) for r in rows] == [e["seq"] for e in body["excerpt"]]
    repro = root.find(".//pre[@class='repro']/code").text
    assert repro == body["repro_command"] and "--seed 0" in repro


def test_the_junit_xml_has_the_failure_with_the_command(failing):
    report_dir, body = failing
    root = ET.parse(report_dir / "loomsim-junit.xml").getroot()
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "loomsim.ledger-storm" and suite.get("failures") == "1"
    (case,) = suite.findall("testcase")
    failure = case.find("failure")
    assert failure.get("type") == body["violations"][0]["name"]
    assert f"reproduce: {body['repro_command']}" in failure.text


def test_the_markdown_starts_with_the_verdict(failing):
    report_dir, body = failing
    first, *rest = _read(report_dir / "loomsim-report.md").splitlines()
    assert first.startswith("# ") and "FAIL" in first and "ledger-storm seed 0" in first
    assert body["violations"][0]["name"] in first
    assert f"`{body['repro_command']}`" in "\n".join(rest)


def test_the_json_carries_timeline_and_excerpt(failing):
    _, body = failing
    assert body["format"] == run.RESULT_FORMAT
    assert body["timeline"]["violations"][0]["invariant"] == body["violations"][0]["name"]
    assert body["excerpt"] and {"seq", "t_ms", "node", "kind", "fields"} <= set(body["excerpt"][0])


def test_a_second_report_never_overwrites_the_first(failing, tmp_path):
    _, body = failing
    first = reports.write_report(str(tmp_path), body)
    before = {path: _read(path) for path in first}
    (tmp_path / "loomsim-junit-2.xml").write_text("someone else's")  # the set skips a suffix any file has taken
    second = reports.write_report(str(tmp_path), {**body, "seed": 99})
    assert [os.path.basename(p) for p in first] == list(REPORT_FILES)
    assert [os.path.basename(p) for p in second] == [name.replace(".", "-3.", 1) for name in REPORT_FILES]
    assert {path: _read(path) for path in first} == before
    assert _read(tmp_path / "loomsim-junit-2.xml") == "someone else's"
    assert not (tmp_path / "loomsim-report-2.html").exists()


def test_a_bad_report_dir_is_a_usage_error_before_the_run(tmp_path, capsys):
    taken = tmp_path / "a-file"
    taken.write_text("")
    for bad in (taken, taken / "below"):
        assert cli.main([*BUGGY, "--report", str(bad), "--repro-dir", str(tmp_path)]) == cli.EXIT_USAGE
        out, err = capsys.readouterr()
        assert out == ""  # nothing ran: the configuration line is not even printed
        assert err.startswith("loomsim: error: --report ") and err.count("\n") == 1
    assert sorted(os.listdir(tmp_path)) == ["a-file"]  # no repro file either


def test_a_report_that_cannot_be_written_after_the_run_is_a_warning(failing, tmp_path, capsys):
    _, body = failing
    taken = tmp_path / "a-file"
    taken.write_text("")
    assert options.write_report_or_warn(str(taken), body) == []
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("loomsim: warning: could not write the report")


# -- sweeps ----------------------------------------------------------------------


def _summary(body, *extra):
    scenario = registry.get(body["scenario"])
    results = [{**body, "beyond": False}, *extra]
    summary = summarize_sweep([summarize_scenario(scenario, results)], wall_s=1.0, jobs=1)
    summary["runs"] = [seed_record(r) for r in results]
    return summary


def test_a_sweep_report_has_seeds_coverage_and_the_failing_timeline(failing):
    _, body = failing
    error = {"scenario": body["scenario"], "seed": 7, "status": "error", "error": "exit 3: <boom> & more",
             "beyond": False}
    summary = _summary(body, error)
    assert summary["runs"][0]["timeline"] == body["timeline"]  # kept for the failing seed
    text = render_html(summary)
    root = ET.fromstring(text.split("\n", 1)[1])
    seeds = root.findall(".//table[@class='seeds']/tbody/tr")
    assert [r.findall("td")[1].text for r in seeds] == ["0", "7"]
    assert root.find(".//g[@id='timeline']") is not None
    assert root.find(".//line[@class='violation']").get("data-t-ms") == str(body["violations"][0]["simulated_ms"])
    assert root.findall(".//table[@class='fault-kinds']")
    junit = ET.fromstring(render_junit(summary).split("\n", 1)[1])
    cases = junit.findall("testsuite/testcase")
    assert [c.get("name") for c in cases] == ["seed 0", "seed 7"]
    assert cases[0].find("failure") is not None and cases[1].find("error").get("message") == "exit 3: <boom> & more"
    assert render_markdown(summary).splitlines()[0].startswith("# ❌ loomsim FAIL (exit 1): sweep of ledger-storm")


def test_sweep_report_end_to_end(tmp_path, capsys):
    code = cli.main(["sweep", "ledger-storm", "--seeds", "1:2", "--duration", "2h", "--store",
                     "tests.fixtures.buggy:make", "--failure-db", "none", "--repro-dir", str(tmp_path),
                     "--report", str(tmp_path / "rep")])
    assert code == 1
    out = capsys.readouterr().out
    assert f"report: {tmp_path / 'rep' / 'loomsim-report.html'}" in out.splitlines()[-1]
    body = json.loads(_read(tmp_path / "rep" / "loomsim-report.json"))
    assert body["format"] == "loomsim-sweep/1" and body["runs"][0]["timeline"]["bins"] == timeline.BINS


def test_a_sweep_where_no_seed_ran_claims_no_coverage():
    """Interrupted before its first seed finished: the summary says coverage
    was not judged, never 'no gaps (every ... fired)'."""
    from sim.face.sweep import render, seal

    summary = summarize_sweep([summarize_scenario(registry.get("ledger-storm"), [], planned=4)], wall_s=1.0, jobs=1)
    assert seal(summary, require_coverage=False, interrupted="SIGTERM") == 143
    text = render(summary)
    assert "coverage: not judged (no seed ran to a result)" in text and "no gaps" not in text
