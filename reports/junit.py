"""The JUnit XML report: what a CI system's test view reads.

One ``testsuite`` per scenario, one ``testcase`` per seed (a run is one
seed) and one per saved failure of the failure database that still fails
(``saved failure FILE``), and one per corpus entry a sweep replayed first
(``corpus entry FILE``: failed, passed, or ``skipped`` when it does not
apply to this code). A seed beyond the contract in which no promise
broke is ``skipped`` (it tested nothing). A failing seed carries a ``failure`` whose
``type`` is the invariant and whose text holds the simulated time, the
message and the command that reproduces it; a seed that could not run is an
``error``. Every suite's ``properties`` carry the verdict and the exit code
of the whole (``reports.verdict.decide``). Coverage gaps go
to the suite's ``system-out``: they do not fail the build here, as they do
not fail a sweep without ``--require-coverage``; with it, each scenario
with a gap has a failing ``coverage`` testcase naming them. Built with
``xml.etree.ElementTree``, which escapes what the messages hold (keys with
``<``, ``&``, quotes); characters XML 1.0 cannot carry at all are replaced.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any, Iterable, Mapping

from reports.verdict import (CORPUS_FAIL, CORPUS_NOT_APPLICABLE, ERROR, NOT_EXERCISED, beyond_not_exercised,
                             corpus_failure, coverage_gaps, decide, failures, kind_of, not_exercised_why,
                             saved_failure, short, still_failing)
from sim.runner import FAIL

SUITE_PREFIX = "loomsim."
# Not allowed anywhere in an XML 1.0 document (ElementTree writes them as they are).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _text(value: Any) -> str:
    return _NOT_XML.sub("\ufffd", "" if value is None else str(value))


def _failure_text(failure: Mapping[str, Any]) -> str:
    lines = [f"invariant: {failure.get('invariant')}",
             f"simulated time: {failure.get('simulated_time')}",
             f"message: {failure.get('message')}"]
    if failure.get("repro_command"):
        lines.append(f"reproduce: {failure['repro_command']}")
    if failure.get("repro_file"):
        lines.append(f"repro file: {failure['repro_file']}")
    return "\n".join(lines)


def _case(suite: ET.Element, scenario: str, name: str, *, wall_s: Any, failure: Mapping[str, Any] | None,
          error: str | None, skipped: str | None = None, props: Iterable[tuple[str, Any]] = ()) -> None:
    case = ET.SubElement(suite, "testcase", {"classname": _text(SUITE_PREFIX + scenario), "name": _text(name),
                                             "time": f"{float(wall_s or 0):.3f}"})
    shown = [(k, v) for k, v in props if v is not None]
    if shown:
        properties = ET.SubElement(case, "properties")
        for name, value in shown:
            ET.SubElement(properties, "property", {"name": name, "value": _text(value)})
    if failure is not None:
        element = ET.SubElement(case, "failure", {
            "type": _text(failure.get("invariant")),
            "message": _text(f"{failure.get('invariant')} at {failure.get('simulated_time')}: "
                             f"{short(failure.get('message'), 300)}")})
        element.text = _text(_failure_text(failure))
    elif error is not None:
        element = ET.SubElement(case, "error", {"type": "infrastructure", "message": _text(short(error, 300))})
        element.text = _text(error)
    elif skipped is not None:
        ET.SubElement(case, "skipped", {"message": _text(skipped)})


def render_junit(body: Mapping[str, Any]) -> str:
    root = ET.Element("testsuites", {"name": "loomsim"})
    if kind_of(body) == "run":
        suites = {body.get("scenario") or "?": [_run_case(body)]}
        gaps_by = {body.get("scenario") or "?": coverage_gaps(body)}
    else:
        suites, gaps_by = _sweep_cases(body)
    status, code = decide(body)
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for scenario, cases in suites.items():
        counts = {"tests": len(cases), "failures": sum(c["failure"] is not None for c in cases),
                  "errors": sum(c["failure"] is None and c["error"] is not None for c in cases),
                  "skipped": sum(c["failure"] is None and c["error"] is None and c.get("skipped") is not None
                                 for c in cases)}
        suite = ET.SubElement(root, "testsuite", {
            "name": _text(SUITE_PREFIX + scenario), **{k: str(v) for k, v in counts.items()},
            "time": f"{sum(float(c['wall_s'] or 0) for c in cases):.3f}"})
        verdict = ET.SubElement(suite, "properties")
        for name, value in (("loomsim.status", status), ("loomsim.exit_code", code)):
            ET.SubElement(verdict, "property", {"name": name, "value": _text(value)})
        for c in cases:
            _case(suite, scenario, c.get("name") or f"seed {c['seed']}", wall_s=c["wall_s"], failure=c["failure"],
                  error=c["error"], skipped=c.get("skipped"), props=c["props"])
        gaps = gaps_by.get(scenario) or []
        if gaps:
            ET.SubElement(suite, "system-out").text = _text("coverage gaps:\n" + "\n".join(gaps))
        for key in totals:
            totals[key] += counts[key]
    root.attrib.update({k: str(v) for k, v in totals.items()})
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _run_case(body: Mapping[str, Any]) -> dict[str, Any]:
    found = failures(body)
    harness = body.get("status") == ERROR  # a checker raised: an error of the harness, not a failure
    return {"seed": body.get("seed"), "wall_s": body.get("wall_s"),
            "failure": found[0] if found and body.get("status") not in ("pass", "detected") and not harness else None,
            "error": f"{found[0]['invariant']}: {found[0]['message']}" if found and harness else None,
            "skipped": f"beyond the contract not exercised: {not_exercised_why(body)}"
                       if beyond_not_exercised(body) else None,
            "props": [("store", body.get("store")), ("status", body.get("status")),
                      ("trace_digest", body.get("trace_digest"))]}


def _sweep_cases(body: Mapping[str, Any]) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[str]]]:
    failing = {(f.get("scenario"), f.get("seed")): f for f in body.get("failing") or ()}
    suites: dict[str, list[dict[str, Any]]] = {name: [] for name in body.get("scenarios") or {}}
    for record in body.get("runs") or ():
        scenario = record.get("scenario") or "?"
        key = (scenario, record.get("seed"))
        failure = None
        if record.get("status") == FAIL:
            first = record.get("first_violation") or {}
            failure = failing.get(key) or {**first, "repro_command": record.get("repro_command"),
                                           "repro_file": record.get("repro_file")}
        error = record.get("error") if record.get("status") == ERROR else None
        suites.setdefault(scenario, []).append({
            "seed": record.get("seed"), "wall_s": record.get("wall_s"), "failure": failure,
            "error": error or (f"seed {record.get('seed')} printed no result" if record.get("status") == ERROR
                               else None),
            "skipped": ("beyond the contract not exercised: no broken promise fired within the duration"
                        if record.get("status") == NOT_EXERCISED else None),
            "props": [("store", record.get("store")), ("status", record.get("status")),
                      ("beyond_contract", "true" if record.get("beyond") else None),
                      ("trace_digest", record.get("trace_digest"))]})
    for replay in still_failing(body):  # a saved failure that still fails: a failing test of its own
        suites.setdefault(replay.get("scenario") or "?", []).append({
            "name": f"saved failure {replay.get('file')}", "seed": replay.get("seed"), "wall_s": 0,
            "failure": saved_failure(replay), "error": None, "props": [("saved_failure", replay.get("path"))]})
    for replay in body.get("corpus_replays") or ():  # ``sweep --corpus``: each entry a test of its own
        outcome = replay.get("outcome")
        suites.setdefault(replay.get("scenario") or "?", []).append({
            "name": f"corpus entry {replay.get('file')}", "seed": replay.get("seed"), "wall_s": 0,
            "failure": corpus_failure(replay) if outcome == CORPUS_FAIL else None, "error": None,
            "skipped": f"not applicable: {replay.get('detail')}" if outcome == CORPUS_NOT_APPLICABLE else None,
            "props": [("corpus_entry", replay.get("file"))]})
    gaps_by: dict[str, list[str]] = {}
    for gap in body.get("coverage_gaps") or ():
        gaps_by.setdefault(gap.get("scenario") or "?", []).append(f"{gap.get('what')} {gap.get('name')}: "
                                                                 f"{gap.get('detail')}")
    if body.get("require_coverage"):  # the gaps fail the sweep: a failing test each scenario
        for scenario, gaps in gaps_by.items():
            suites.setdefault(scenario, []).append({
                "name": "coverage", "seed": None, "wall_s": 0, "error": None, "props": [],
                "failure": {"invariant": "coverage-gap", "simulated_time": "all seeds",
                            "message": f"{len(gaps)} coverage gap(s) with --require-coverage: " + "; ".join(gaps)}})
    return suites, gaps_by
