"""One rule for every number a user types: ASCII digits only. ``int()`` and
``float()`` read any Unicode decimal digit ('٣', '３') yet refuse '²', so a
seed or a duration that looks alike in two terminals could run or be
refused; every flag now says one ``loomsim: error:`` line instead."""
from __future__ import annotations

import pytest

from sim.face import cli
from sim.numbers import NumberError, parse_decimal, parse_whole

ARABIC_3, FULLWIDTH_3, SUPERSCRIPT_2 = "\u0663", "\uff13", "\u00b2"
RUN = ["run", "ledger-storm", "--seed", "1", "--duration", "1m", "--no-progress"]
SWEEP = ["sweep", "ledger-storm", "--seeds", "0:1", "--duration", "1m", "--jobs", "1", "--failure-db", "none"]


def _error(capsys, argv: list[str]) -> tuple[int, list[str]]:
    code = cli.main(argv)
    return code, capsys.readouterr().err.strip().splitlines()


# Each kind of number a command line holds, spelled with a non-ASCII digit.
CASES = {
    "seed": ["run", "ledger-storm", "--seed", ARABIC_3, "--duration", "1m", "--no-progress"],
    "seed-superscript": ["run", "ledger-storm", "--seed", SUPERSCRIPT_2, "--duration", "1m", "--no-progress"],
    "duration": ["run", "ledger-storm", "--seed", "1", "--duration", f"{FULLWIDTH_3}m", "--no-progress"],
    "duration-term": ["run", "ledger-storm", "--seed", "1", "--duration", f"1m {ARABIC_3}s", "--no-progress"],
    "knob": [*RUN, "--knob", f"lease_ms=1500{FULLWIDTH_3}"],
    "rate": [*RUN, "--rate", f"ack-lost=0.{ARABIC_3}"],
    "param": ["run", "sentinel-year", "--seed", "1", "--duration", "1m", "--sentinels", FULLWIDTH_3],
    "progress-every": [*RUN, "--progress-every", ARABIC_3],
    "seeds": ["sweep", "ledger-storm", "--seeds", f"0:{FULLWIDTH_3}", "--duration", "1m", "--jobs", "1",
              "--failure-db", "none"],
    "jobs": ["sweep", "ledger-storm", "--seeds", "0:1", "--duration", "1m", "--jobs", ARABIC_3,
             "--failure-db", "none"],
    "time-budget": [*SWEEP, "--time-budget", FULLWIDTH_3],
    "sqlite-every": [*SWEEP, "--sqlite-every", ARABIC_3],
    "shard": [*SWEEP, "--shard", f"1/{FULLWIDTH_3}"],
    "max-runs": ["shrink", "no-such-file.json", "--max-runs", ARABIC_3],
    # A bad --seed after it: were --runs read, the line would name the seed, not run the bench.
    "bench-runs": ["bench", "--quick", "--runs", FULLWIDTH_3, "--seed", "x"],
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_a_number_in_non_ascii_digits_is_one_error_line(kind, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, err = _error(capsys, CASES[kind])
    assert code == 2 and len(err) == 1 and err[0].startswith("loomsim: error:"), (kind, err)
    assert any(digit in err[0] for digit in (ARABIC_3, FULLWIDTH_3, SUPERSCRIPT_2)), err  # the number's fault


@pytest.mark.parametrize("argv", [["--seed", ARABIC_3, "--duration", "1m"], ["--duration", f"{FULLWIDTH_3}m"],
                                  ["--sentinels", FULLWIDTH_3, "--duration", "1m"]])
def test_the_direct_driver_keeps_the_same_rule(argv, capsys):
    from scenarios.workloads.direct import main

    with pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and "error:" in err[0], err


@pytest.mark.parametrize("text", [ARABIC_3, FULLWIDTH_3, SUPERSCRIPT_2, "1_000", " 3", "+3", "", "3.0", "0x10"])
def test_a_whole_number_is_ascii_digits(text):
    with pytest.raises(NumberError):
        parse_whole(text)


@pytest.mark.parametrize("text", [ARABIC_3, f"0.{FULLWIDTH_3}", "nan", "inf", "1_0", " 1", "", "1e", "."])
def test_a_decimal_is_ascii_digits(text):
    with pytest.raises(NumberError):
        parse_decimal(text)


def test_ascii_numbers_read_as_before():
    assert [parse_whole(t) for t in ("0", "17", "-4", "007")] == [0, 17, -4, 7]
    assert [parse_decimal(t) for t in ("1", "0.5", ".5", "1.", "1e-3", "2.5E+2", "-0.25")] == [
        1.0, 0.5, 0.5, 1.0, 1e-3, 250.0, -0.25]
