"""The report of an explore search (reports/explore.py), from hand-built ``loomsim-explore/2`` summaries."""
from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET

import pytest

from reports import explore as report


def _summary(**over):
    body = {
        "format": "loomsim-explore/2", "scenario": "ledger-storm", "seed": 7, "store": "memory",
        "runs": 4, "batch": 2, "corpus_size": 2,
        "corpus": [
            {"run": 0, "seed": 123, "knobs": {"stale_renewals": 1}, "duration_ms": 120_000, "script_entries": None,
             "mutation": "fresh", "parent": None,
             "added": ["transition:ready/claim/granted", "port:ledger.claim/ack-lost", "event:run-settled"],
             "file": "corpus/ledger-storm-0123abcd.json"},
            {"run": 2, "seed": 123, "knobs": {"stale_renewals": 2}, "duration_ms": 240_000, "script_entries": 3,
             "mutation": "knob", "parent": 0, "added": ["fault:ack-lost"], "file": None},
        ],
        "features": {"transition:ready/claim/granted": 4, "port:ledger.claim/ack-lost": 2, "event:run-settled": 4,
                     "fault:ack-lost": 1},
        "families": {"transition": {"reached": 1, "universe": 3}, "port": {"reached": 1, "universe": None},
                     "event": {"reached": 1, "universe": None}, "fault": {"reached": 1, "universe": None}},
        "timeline": [{"run": 0, "features": 3, "corpus": 1}, {"run": 1, "features": 3, "corpus": 1},
                     {"run": 2, "features": 4, "corpus": 2}, {"run": 3, "features": 4, "corpus": 2}],
        "never_taken": ["transition:suspended/decide/abort", "transition:ready/claim/refused"],
        "rarest": [["fault:ack-lost", 1], ["port:ledger.claim/ack-lost", 2]],
        "failures": [],
        "measured": {"cpu_s": 8.0, "cpu_s_after_run": [1.5, 3.0, 5.5, 8.0], "wall_s": 5.0},
    }
    body.update(over)
    return body


_FAILURE = {"seed": 99, "knobs": {"stale_renewals": 3}, "duration_ms": 60_000, "status": "FAIL",
            "violations": ["exactly-once-settlement"],
            "repro_command": "loomsim run ledger-storm --seed 99 --duration 1m --knob stale_renewals=3",
            "repro_file": "loomsim-repro-ledger-storm-99.json"}


def _points(page: str) -> list[tuple[float, float]]:
    (svg,) = re.findall(r"<svg.*?</svg>", page, re.S)
    root = ET.fromstring(svg)
    (line,) = [e for e in root.iter() if e.tag == "polyline" and "features" in (e.get("class") or "")]
    return [tuple(map(float, p.split(","))) for p in line.get("points").split()]


def test_no_failures_says_so_first_and_draws_the_curve_over_cpu_time():
    page = report.html(_summary())
    ET.fromstring(page.split("\n", 1)[1])  # well-formed, as the other reports
    h1 = re.search(r"<h1[^>]*>(.*?)</h1>", page, re.S).group(1)
    assert h1.startswith("PASS (exit 0)") and "no failures" in h1 and "ledger-storm" in h1
    points = _points(page)
    assert len(points) == 4
    xs = [x for x, _ in points]
    assert xs == sorted(xs) and xs[0] < xs[1]  # CPU seconds: 1.5, 3.0, 5.5, 8.0 spread along x
    assert (xs[2] - xs[1]) > (xs[1] - xs[0])  # 2.5 CPU-s is drawn wider than 1.5
    assert "CPU seconds" in page
    for text in ("transition:suspended/decide/abort", "transition:ready/claim/refused"):
        assert text in page
    assert "http" not in page and "<script" not in page and "<link" not in page
    md = report.markdown(_summary())
    assert md.splitlines()[0].startswith("# ✅ loomsim explore PASS (exit 0)") and "no failures" in md.splitlines()[0]
    assert "transition:suspended/decide/abort" in md and "](" not in md and "<img" not in md


def test_a_failure_is_the_first_thing_said_in_both_reports():
    body = _summary(failures=[_FAILURE])
    md = report.markdown(body)
    first = md.splitlines()[0]
    assert first.startswith("# ❌ loomsim explore FAILED (exit 1)") and "1 failure" in first
    assert md.index("## Failures") < md.index("## Feedback")
    assert _FAILURE["repro_command"] in md and _FAILURE["repro_file"] in md and "exactly-once-settlement" in md
    page = report.html(body)
    h1 = re.search(r"<h1 class=\"(\w+)\">(.*?)</h1>", page, re.S)
    assert h1.group(1) == "fail" and h1.group(2).startswith("FAILED (exit 1)")
    assert page.index("exactly-once-settlement") < page.index("<svg")


def test_the_corpus_says_what_each_entry_added_and_from_which_parent():
    md = report.markdown(_summary())
    rows = [line for line in md.splitlines() if line.startswith("| #1 |")]
    assert len(rows) == 1
    assert "knob" in rows[0] and "| #0 |" in rows[0] and "fault:ack-lost" in rows[0]
    page = report.html(_summary())
    assert "script-add" not in page and "corpus/ledger-storm-0123abcd.json" in page
    assert "1/3" in page or "1 of 3" in page  # the transition family against its universe


def test_without_measurement_the_x_axis_is_the_run_index():
    body = _summary(measured=None)
    page = report.html(body)
    xs = [x for x, _ in _points(page)]
    gaps = [b - a for a, b in zip(xs, xs[1:])]
    assert max(gaps) - min(gaps) < 0.2 and min(gaps) > 0  # evenly spaced: runs 0..3
    assert "run" in page and "CPU seconds" not in page
    del body["measured"]
    assert len(_points(report.html(body))) == 4
    assert "CPU s" not in report.markdown(body)


def test_an_empty_search_renders_without_a_corpus_or_a_curve():
    body = _summary(runs=0, corpus_size=0, corpus=[], features={}, families={}, timeline=[], never_taken=[],
                    rarest=[], measured=None)
    page = report.html(body)
    ET.fromstring(page.split("\n", 1)[1])
    assert "<polyline" not in page and "no runs" in page.lower()
    md = report.markdown(body)
    assert "no failures" in md.splitlines()[0] and "corpus is empty" in md


def test_names_are_escaped_and_hundreds_of_features_are_capped():
    nasty = "transition:<b>&'\"x</b>"
    features = {f"arc:a{i:04d}": 1 + i % 7 for i in range(900)}
    features[nasty] = 1
    entry = {"run": 0, "seed": 1, "knobs": {}, "duration_ms": 1000, "script_entries": None, "mutation": "fresh",
             "parent": None, "added": sorted(features), "file": "c/<x>.json"}
    body = _summary(corpus=[entry], corpus_size=1, features=features, never_taken=[nasty] * 2 + [f"transition:t{i}"
                                                                                                  for i in range(700)],
                    rarest=[[nasty, 1]], failures=[dict(_FAILURE, violations=["<script>alert(1)</script>"])])
    page = report.html(body)
    ET.fromstring(page.split("\n", 1)[1])
    assert "<b>&" not in page and "<script>" not in page and "&lt;b&gt;&amp;" in page
    assert "c/&lt;x&gt;.json" in page
    assert "… and" in page  # the added list of the entry is cut short
    md = report.markdown(body)
    assert len(md) < 60_000 and "more" in md
    assert md.count("arc:a0") < 50  # the first few added, not all 900


def test_same_summary_same_bytes_and_render_picks_by_suffix_never_overwriting(tmp_path):
    assert report.html(_summary()) == report.html(_summary())
    assert report.markdown(_summary()) == report.markdown(_summary())
    md_path = report.render(_summary(), str(tmp_path / "explore.md"))
    html_path = report.render(_summary(), str(tmp_path / "explore.html"))
    assert open(md_path, encoding="utf-8").read() == report.markdown(_summary())
    assert open(html_path, encoding="utf-8").read() == report.html(_summary())
    again = report.render(_summary(failures=[_FAILURE]), str(tmp_path / "explore.md"))
    assert again != md_path and os.path.exists(again)
    assert open(md_path, encoding="utf-8").read() == report.markdown(_summary())  # untouched
    with pytest.raises(ValueError, match=r"\.md or \.html") as caught:
        report.render(_summary(), str(tmp_path / "explore.txt"))
    assert "\n" not in str(caught.value) and not (tmp_path / "explore.txt").exists()


def test_a_body_that_is_not_an_explore_summary_is_refused():
    for body in ({"format": "loomsim-sweep/1"}, [], {"format": "loomsim-explore/1"}):
        with pytest.raises(ValueError, match="loomsim-explore/2"):
            report.markdown(body)
        with pytest.raises(ValueError, match="loomsim-explore/2"):
            report.html(body)


def test_the_module_renders_a_saved_summary_and_refuses_bad_input_in_one_line(capsys, tmp_path):
    import json

    saved = tmp_path / "summary.json"
    saved.write_text(json.dumps(_summary(failures=[_FAILURE])), encoding="utf-8")
    assert report.main([str(saved), str(tmp_path / "r.html")]) == 0
    assert capsys.readouterr().out == f"report: {tmp_path / 'r.html'}\n"
    assert (tmp_path / "r.html").read_text(encoding="utf-8") == report.html(_summary(failures=[_FAILURE]))
    (tmp_path / "sweep.json").write_text(json.dumps({"format": "loomsim-sweep/1"}), encoding="utf-8")
    for argv in ([str(saved), str(tmp_path / "r.pdf")], [str(tmp_path / "sweep.json"), str(tmp_path / "s.md")],
                 [str(tmp_path / "missing.json"), str(tmp_path / "m.md")]):
        assert report.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("loomsim: error: ") and err.count("\n") == 1, err
        assert os.path.basename(argv[0]) in err or ".pdf" in err
    assert sorted(os.listdir(tmp_path)) == ["r.html", "summary.json", "sweep.json"]


def test_branch_inputs_name_their_fork_and_the_search_says_how_fresh_inputs_were_made():
    corpus = [
        {"run": 0, "seed": 5, "knobs": {}, "duration_ms": 120_000, "script_entries": None, "mutation": "fresh",
         "parent": None, "added": ["event:run-settled"], "file": None,
         "branch": {"fork_at_ms": 60_000, "key": 3, "streams": []}},
        {"run": 1, "seed": 5, "knobs": {}, "duration_ms": 120_000, "script_entries": None, "mutation": "rekey",
         "parent": 0, "added": ["fault:ack-lost"], "file": None,
         "branch": {"fork_at_ms": 30_000, "key": 9, "streams": ["scheduling"]}},
    ]
    failure = {"seed": 6, "knobs": {}, "duration_ms": 120_000, "status": "FAIL", "violations": ["fencing"],
               "repro_command": "loomsim run ledger-storm --seed 6 --fork-at 1m --branch 1", "repro_file": None,
               "branch": {"fork_at_ms": 60_000, "key": 1, "streams": []}}
    summary = _summary(corpus=corpus, failures=[failure], branches={"fork_at_ms": 60_000, "per_seed": 4})
    md = report.markdown(summary)
    page = report.html(summary)
    for text in (md, page):
        assert "5, branch 3 at 1m" in text and "5, scheduling re-keyed (9) at 30s" in text
        assert "6, branch 1 at 1m" in text and "4 branches of each seed at 1m" in text
    plain = report.markdown(_summary(fresh_only=True))
    assert "fresh seeds only, no mutation" in plain and "branch" not in plain


def test_what_each_move_gave_is_a_table_in_both_reports():
    summary = _summary(moves={"fresh": {"runs": 4, "entries": 3, "added": 30},
                              "script-add": {"runs": 2, "entries": 0, "added": 0}})
    md = report.markdown(summary)
    assert "## What each move gave" in md and "| fresh | 4 | 3 | 30 | 7.5 |" in md and "| script-add | 2 | 0 | 0 | 0.0 |" in md
    page = report.html(summary)
    assert "What each move gave" in page and "7.5" in page
    assert "What each move gave" not in report.markdown(_summary())
