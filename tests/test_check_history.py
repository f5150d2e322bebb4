"""``loomsim check-history``: a recorded history (``loomsim-history/1``) judged
from the outside; files written by ``HistoryWriter`` (what a live process
writes), killed mid-call, several at once, and broken."""
from __future__ import annotations

import io
import json

import pytest

from scenarios.reference.history import UNKNOWN, Failed, Op, check_history
from scenarios.reference.history_file import (FORMAT, HistoryFileError, HistoryWriter, read_histories,
                                              write_history)
from sim.face.cli import main as cli_main


def _file(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return str(path)


def _writer(tmp_path, name, source="live"):
    handle = open(tmp_path / name, "w", encoding="utf-8")
    return handle, HistoryWriter(handle, source=source, scenario="ledger-storm")


def _check(capsys, *argv):
    code = cli_main(["check-history", *argv, "--json"])
    captured = capsys.readouterr()
    return code, (json.loads(captured.out) if captured.out else None), captured.err


def test_a_correct_history_of_each_model_passes(tmp_path, capsys):
    handle, w = _writer(tmp_path, "a.jsonl")
    i = w.invoke("p1", "durable-state", "k", "cas", (0, "v1"), 10)
    w.complete(i, 12, 1)
    i = w.invoke("p2", "durable-state", "k", "read", (), 13)
    w.complete(i, 14, (1, "v1"))
    i = w.invoke("p1", "conversation-log", "c", "append", (0, ("e1", "e2")), 20)
    w.complete(i, 21, 1)
    i = w.invoke("p2", "conversation-log", "c", "read", (0, 10), 22)
    w.complete(i, 23, ("e1", "e2"))
    i = w.invoke("p1", "submission-lease", "s", "claim", ("w1", 100, 30), 30)
    w.complete(i, 31, 1)
    i = w.invoke("p2", "submission-lease", "s", "renew", ("w2", 1, 100, 40), 40)
    w.complete(i, 41, Failed("OwnershipLost", 1))
    handle.close()
    code, body, err = _check(capsys, str(tmp_path / "a.jsonl"))
    assert (code, body["status"], body["objects"], body["ops"], body["unknown_ops"]) == (0, "pass", 3, 6, 0), err


def test_a_stale_read_after_a_completed_write_fails_and_names_its_object(tmp_path, capsys):
    handle, w = _writer(tmp_path, "a.jsonl")
    i = w.invoke("p1", "durable-state", "k", "cas", (0, "v1"), 10)
    w.complete(i, 12, 1)
    i = w.invoke("p2", "durable-state", "k", "read", (), 20)  # invoked after the write completed
    w.complete(i, 21, None)  # ... and saw nothing: stale
    handle.close()
    code, body, _ = _check(capsys, str(tmp_path / "a.jsonl"))
    assert code == 1 and body["status"] == "fail"
    assert len(body["violations"]) == 1 and "'durable-state k' is not linearizable" in body["violations"][0]
    code = cli_main(["check-history", str(tmp_path / "a.jsonl")])
    out = capsys.readouterr().out
    assert code == 1 and out.rstrip().endswith("FAIL: 1 object(s) not linearizable")


def test_a_killed_process_leaves_unknown_operations_and_a_cut_last_line_is_dropped(tmp_path, capsys):
    handle, w = _writer(tmp_path, "killed.jsonl")
    w.invoke("p1", "conversation-log", "c", "append", (0, ("e1",)), 10)  # killed before the reply
    handle.close()
    with open(tmp_path / "killed.jsonl", "a", encoding="utf-8") as cut:
        cut.write('{"invoke":1,"process":"p1","model":"conver')  # the write SIGKILL cut
    handle, w = _writer(tmp_path, "other.jsonl")
    i = w.invoke("p2", "conversation-log", "c", "tail", (), 50)
    w.complete(i, 51, 1)  # the killed append took effect
    handle.close()
    files = [str(tmp_path / "killed.jsonl"), str(tmp_path / "other.jsonl")]
    code, body, err = _check(capsys, *files)
    assert (code, body["status"], body["ops"], body["unknown_ops"]) == (0, "pass", 2, 1), err
    ops, _, headers = read_histories(files)
    assert [o.answer for o in ops] == [UNKNOWN, 1] and [h["source"] for h in headers] == ["live", "live"]
    # Had no append been invoked at all, the tail of 1 is impossible.
    code, body, _ = _check(capsys, files[1])
    assert code == 1 and body["status"] == "fail"


def test_a_search_past_its_budget_is_undecided_never_a_pass(tmp_path, capsys):
    handle, w = _writer(tmp_path, "a.jsonl")
    for n in range(6):  # six concurrent writes, answered late: many orders to try
        w.invoke(f"p{n}", "durable-state", "k", "cas", (0, f"v{n}"), 10)
    i = w.invoke("p9", "durable-state", "k", "read", (), 11)
    w.complete(i, 12, None)
    handle.close()
    code, body, _ = _check(capsys, str(tmp_path / "a.jsonl"), "--budget-steps", "1")
    assert code == 1 and body["status"] == "undecided" and body["undecided"] == ["durable-state k"]
    code, body, _ = _check(capsys, str(tmp_path / "a.jsonl"))
    assert code == 0 and body["status"] == "pass"


def test_write_history_round_trips_a_checked_history():
    ops = [Op(0, "p1", "s", "claim", ("w1", 100, 0), 0, 1, 1),
           Op(1, "p2", "s", "claim", ("w2", 100, 50), 50, 51, None),
           Op(2, "p1", "s", "settle", ("w1", 1), 60, None, UNKNOWN)]
    buffer = io.StringIO()
    write_history(buffer, ops, {"s": "submission-lease"}, source="simulated", seed=3)
    lines = buffer.getvalue().splitlines()
    assert json.loads(lines[0]) == {"format": FORMAT, "source": "simulated", "seed": 3}
    assert len(lines) == 1 + 3 + 2  # the unknown settle has no completion


def test_read_back_gives_the_same_verdict_as_the_ops(tmp_path):
    ops = [Op(0, "p1", "c", "append", (0, ("a",)), 0, 2, 1),
           Op(1, "p2", "c", "append", (0, ("b",)), 1, 3, Failed("AppendConflict", 1)),
           Op(2, "p2", "c", "read", (0, 5), 4, 5, ("b",))]  # read what lost the race: wrong
    path = tmp_path / "h.jsonl"
    with open(path, "w", encoding="utf-8") as handle:
        write_history(handle, ops, {"c": "conversation-log"}, source="simulated")
    read, models, _ = read_histories([str(path)])
    from scenarios.reference.history import LogModel
    assert check_history(ops, {"c": LogModel()}).outcome == "violation"
    assert check_history(read, models).outcome == "violation"


GOOD_HEADER = {"format": FORMAT, "source": "live"}
INVOKE = {"invoke": 0, "process": "p", "model": "durable-state", "key": "k", "op": "read", "args": [], "at_ms": 5}


@pytest.mark.parametrize("lines, message", [
    ([], "empty"),
    ([{"format": "loomsim-repro/1"}], "not a loomsim-history/1 file"),
    ([{"format": FORMAT, "source": "dream"}], "source must be one of"),
    ([GOOD_HEADER, [1, 2]], "expected a JSON object"),
    ([GOOD_HEADER, {**INVOKE, "model": "queue"}], "unknown model 'queue'"),
    ([GOOD_HEADER, {**INVOKE, "op": "append"}], "durable-state has no operation 'append'"),
    ([GOOD_HEADER, {**INVOKE, "op": "cas", "args": ["x", 1]}], "durable-state cas takes (int, any)"),
    ([GOOD_HEADER, {**INVOKE, "model": "conversation-log", "op": "append", "args": [0, []]}], "takes (int, entries)"),
    ([GOOD_HEADER, INVOKE, INVOKE], "is not a new integer"),
    ([GOOD_HEADER, {"complete": 0, "at_ms": 1, "answer": None}], "not an invocation awaiting one"),
    ([GOOD_HEADER, INVOKE, {"complete": 0, "at_ms": 1, "answer": None}], "before its invocation"),
    ([GOOD_HEADER, INVOKE, {"complete": 0, "at_ms": 9, "answer": {"error": "x"}}], "an answer object must be"),
    ([GOOD_HEADER, {"hello": 1}], "an invocation or a completion"),
    ([GOOD_HEADER, {**INVOKE, "extra": 1}], "exactly the fields"),
])
def test_a_broken_file_is_one_error_line_and_exit_2(tmp_path, capsys, lines, message):
    path = _file(tmp_path, "bad.jsonl", lines)
    assert cli_main(["check-history", path]) == 2
    err = capsys.readouterr().err
    assert err.startswith("loomsim: error: ") and err.count("\n") == 1 and message in err, err
    with pytest.raises(HistoryFileError):
        read_histories([path])


def test_missing_binary_and_torn_middle_files_are_usage_errors(tmp_path, capsys):
    (tmp_path / "bin").write_bytes(b"\xff\xfe\x00")
    (tmp_path / "torn").write_text(json.dumps(GOOD_HEADER) + "\n{\"invoke\": 0,\n" + json.dumps(INVOKE) + "\n",
                                   encoding="utf-8")
    for path, message in ((tmp_path / "nope", "cannot read"), (tmp_path / "bin", "not UTF-8"),
                          (tmp_path / "torn", ":2: not a JSON line")):
        assert cli_main(["check-history", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
    assert cli_main(["check-history", str(tmp_path / "torn"), "--budget-steps", "0"]) == 2
