"""Virtual time (durations, calendar) and the named random streams."""
from __future__ import annotations

import pytest

from sim.clock import (
    DURATION_MS_MAX,
    MS_PER_DAY,
    MS_PER_HOUR,
    MS_PER_MINUTE,
    MS_PER_SECOND,
    DurationError,
    format_calendar,
    format_duration_ms,
    parse_duration_ms,
)
from sim.rng import Stream, Streams, derive_seed64

# -- durations ---------------------------------------------------------------------


@pytest.mark.parametrize("text, expected_ms", [
    ("90s", 90 * MS_PER_SECOND),
    ("5m", 5 * MS_PER_MINUTE),
    ("5min", 5 * MS_PER_MINUTE),
    ("36h", 36 * MS_PER_HOUR),
    ("30d", 30 * MS_PER_DAY),
    ("2w", 14 * MS_PER_DAY),
    ("12mo", 365 * MS_PER_DAY),
    ("1mo", 365 * MS_PER_DAY // 12),
    ("250ms", 250),
    ("1y", 365 * MS_PER_DAY),
    ("100y", 100 * 365 * MS_PER_DAY),
    (" 7d ", 7 * MS_PER_DAY),
    ("3d 22h 55m", 5_695 * 60_000),  # what format_duration_ms prints
    ("1d 12h", 36 * MS_PER_HOUR),
    ("1s 1ms", 1_001),
])
def test_parse_duration(text, expected_ms):
    value = parse_duration_ms(text)
    assert value == expected_ms
    assert type(value) is int


def test_twelve_months_is_exactly_one_year():
    assert parse_duration_ms("12mo") == parse_duration_ms("365d") == parse_duration_ms("1y") == 31_536_000_000


@pytest.mark.parametrize("bad", [
    "", "   ", "30", "-5m", "5 parsecs", "0s", "0ms", "0y", "5", "m", "5.5m", "1e3s", "5M", "5mm", "five minutes",
    "101y", "36501d", "99999999999999999999999999999d", "5m5s", "+5m",
    "1h 2d", "5m 5m", "5m 5min", "3d, 2h", "3d 2",
])
def test_parse_duration_rejects(bad):
    with pytest.raises(DurationError) as info:
        parse_duration_ms(bad)
    assert "\n" not in str(info.value)
    assert repr(bad) in str(info.value)


@pytest.mark.parametrize("bad", [None, 30, 30.0, b"30d", ["30d"]])
def test_parse_duration_rejects_non_strings(bad):
    with pytest.raises(DurationError):
        parse_duration_ms(bad)


def test_duration_error_is_a_value_error():
    assert issubclass(DurationError, ValueError)


def test_longest_duration_accepted_is_the_bound():
    assert parse_duration_ms("100y") == DURATION_MS_MAX
    assert parse_duration_ms(f"{DURATION_MS_MAX}ms") == DURATION_MS_MAX
    with pytest.raises(DurationError):
        parse_duration_ms(f"{DURATION_MS_MAX + 1}ms")


@pytest.mark.parametrize("duration_ms, text", [
    (300_000, "5m"),
    (90_000, "1m 30s"),
    (36 * MS_PER_HOUR, "1d 12h"),
    (365 * MS_PER_DAY, "365d"),
    (MS_PER_DAY, "1d"),
    (250, "250ms"),
    (1_001, "1s 1ms"),
    (61 * MS_PER_SECOND, "1m 1s"),
    (5_695 * 60_000, "3d 22h 55m"),  # a shrunk duration: calendar units, not "5695m"
])
def test_format_duration(duration_ms, text):
    assert format_duration_ms(duration_ms) == text


@pytest.mark.parametrize("duration_ms", [
    1, 250, 999, 1_000, 1_001, 90_000, 300_000, 3_600_000, 36 * MS_PER_HOUR, MS_PER_DAY, 7 * MS_PER_DAY,
    365 * MS_PER_DAY // 12, 365 * MS_PER_DAY, 123_456_789, DURATION_MS_MAX,
])
def test_format_then_parse_round_trips(duration_ms):
    assert parse_duration_ms(format_duration_ms(duration_ms)) == duration_ms


@pytest.mark.parametrize("text", ["90s", "5m", "36h", "30d", "12mo", "250ms", "1y", "2w", "1mo"])
def test_parse_then_format_round_trips(text):
    value = parse_duration_ms(text)
    assert parse_duration_ms(format_duration_ms(value)) == value


# -- calendar --------------------------------------------------------------------


def test_calendar_epoch():
    assert format_calendar(0) == "2026-01-01 00:00:00.000 (day 0)"


def test_calendar_fields():
    t_ms = 72 * MS_PER_DAY + 9 * MS_PER_HOUR + 26 * MS_PER_MINUTE + 53 * MS_PER_SECOND + 589
    assert format_calendar(t_ms) == "2026-03-14 09:26:53.589 (day 72)"


def test_calendar_end_of_first_year():
    assert format_calendar(365 * MS_PER_DAY - 1) == "2026-12-31 23:59:59.999 (day 364)"
    assert format_calendar(365 * MS_PER_DAY) == "2027-01-01 00:00:00.000 (day 365)"


def test_calendar_leap_day_2028():
    # 2026 and 2027 have 365 days each; in 2028, Jan has 31 days, so
    # Feb 29 is the 31 + 29 = 60th day (index 59) of that year.
    leap_day_index = 365 + 365 + 31 + 28
    assert format_calendar(leap_day_index * MS_PER_DAY) == f"2028-02-29 00:00:00.000 (day {leap_day_index})"
    assert format_calendar((leap_day_index + 1) * MS_PER_DAY - 1).startswith("2028-02-29 23:59:59.999")
    assert format_calendar((leap_day_index + 1) * MS_PER_DAY).startswith("2028-03-01 00:00:00.000")
    # 2027 is not a leap year: Feb 28 is followed by Mar 1.
    feb_28_2027 = 365 + 31 + 27
    assert format_calendar(feb_28_2027 * MS_PER_DAY).startswith("2027-02-28")
    assert format_calendar((feb_28_2027 + 1) * MS_PER_DAY).startswith("2027-03-01")


def test_calendar_agrees_with_the_proleptic_gregorian_calendar():
    # The stdlib is fine in a test: sim/ itself must not use datetime.
    import datetime

    epoch = datetime.date(2026, 1, 1)
    for day in list(range(0, 3 * 366)) + [10_000, 36_500]:
        expected = (epoch + datetime.timedelta(days=day)).isoformat()
        t_ms = day * MS_PER_DAY + 13 * MS_PER_HOUR + 7 * MS_PER_MINUTE + 5 * MS_PER_SECOND + 42
        assert format_calendar(t_ms) == f"{expected} 13:07:05.042 (day {day})"


def test_calendar_is_monotonic_across_years_day_by_day():
    previous = format_calendar(0)
    for day in range(1, 5 * 366):
        current = format_calendar(day * MS_PER_DAY)
        assert current[:10] > previous[:10], (day, previous, current)
        assert current.endswith(f"(day {day})")
        previous = current
    assert previous.startswith("2031-01-0")


# -- random streams ------------------------------------------------------------------


def test_derive_seed64_is_pinned():
    # Pins the stream derivation (sha256 of "seed/name", first 8 bytes, big
    # endian). If this changes, every recorded seed and repro file stops
    # reproducing: change it only with a migration story.
    assert derive_seed64(0, "scheduling") == 1999904266040819116
    assert derive_seed64(1, "faults") == 18370679788222009431
    stream = Stream(derive_seed64(1, "faults"), "faults")
    assert [stream.next_u64() for _ in range(3)] == [
        12906752561136606608, 7700440523411602994, 10259804571434900893]


def test_generator_is_splitmix64():
    # Reference outputs of SplitMix64 (Vigna) for seeds 0 and 1234567.
    s = Stream(0)
    assert [s.next_u64() for _ in range(3)] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]
    s = Stream(1234567)
    assert s.next_u64() == 6457827717110365317


def test_same_seed_and_name_give_the_same_sequence():
    a, b = Streams(42)["workload"], Streams(42)["workload"]
    assert [a.next_u64() for _ in range(100)] == [b.next_u64() for _ in range(100)]
    assert a.draws == b.draws == 100


def test_different_seeds_or_names_differ():
    def first(seed: int, name: str) -> list[int]:
        s = Streams(seed)[name]
        return [s.next_u64() for _ in range(4)]

    assert first(42, "workload") != first(43, "workload")
    assert first(42, "workload") != first(42, "faults")


def test_drawing_from_one_stream_does_not_change_another():
    quiet = Streams(9)
    noisy = Streams(9)
    for _ in range(1_000):
        noisy["faults"].next_u64()
    noisy["chaos"].below(17)
    assert [quiet["workload"].next_u64() for _ in range(50)] == [noisy["workload"].next_u64() for _ in range(50)]


def test_streams_getitem_is_one_stream_and_fork_is_fresh():
    streams = Streams(5)
    assert streams["x"] is streams["x"]
    used = streams["x"]
    for _ in range(10):
        used.next_u64()
    forked = streams.fork("x")
    fresh = Streams(5)["x"]
    assert forked is not used
    assert [forked.next_u64() for _ in range(5)] == [fresh.next_u64() for _ in range(5)]


def test_below_is_in_range():
    s = Stream(derive_seed64(1, "below"))
    for bound in (1, 2, 3, 5, 7, 10, 100, 1_000, 2**31 - 1, 2**32 + 1, 2**63 + 5, 2**64):
        for _ in range(200):
            assert 0 <= s.below(bound) < bound
    assert all(s.below(1) == 0 for _ in range(10))


def test_below_is_uniform_enough():
    # Chi-square over 60k draws into 10 bins (9 degrees of freedom). The
    # seed is fixed, so this is deterministic; the bound (40) sits above the
    # 99.99th percentile (~33.7), yet the classic mask-then-modulo bias
    # (bins 0-5 twice as likely as 6-9) scores in the thousands, and one bin
    # 10% heavy scores ~67.
    s = Stream(derive_seed64(2026, "uniformity"))
    bins = [0] * 10
    draws = 60_000
    for _ in range(draws):
        bins[s.below(10)] += 1
    expected = draws / 10
    chi2 = sum((count - expected) ** 2 / expected for count in bins)
    assert chi2 < 40, (chi2, bins)
    # A bound just above a power of two exercises the rejection path.
    s = Stream(derive_seed64(2026, "uniformity-5"))
    bins5 = [0] * 5
    for _ in range(20_000):
        bins5[s.below(5)] += 1
    chi2_5 = sum((count - 4_000) ** 2 / 4_000 for count in bins5)
    assert chi2_5 < 30, (chi2_5, bins5)


def test_between_is_inclusive():
    s = Stream(derive_seed64(3, "between"))
    seen = {s.between(3, 6) for _ in range(500)}
    assert seen == {3, 4, 5, 6}
    assert s.between(9, 9) == 9


def test_unit_is_in_half_open_interval():
    s = Stream(derive_seed64(3, "unit"))
    values = [s.unit() for _ in range(5_000)]
    assert all(0.0 <= v < 1.0 for v in values)
    assert 0.45 < sum(values) / len(values) < 0.55


def test_shuffle_is_a_permutation_and_reproducible():
    items = list(range(50))
    a, b = items[:], items[:]
    Stream(derive_seed64(8, "shuffle")).shuffle(a)
    Stream(derive_seed64(8, "shuffle")).shuffle(b)
    assert sorted(a) == items
    assert a == b
    assert a != items
    c = items[:]
    Stream(derive_seed64(9, "shuffle")).shuffle(c)
    assert c != a
    empty: list = []
    Stream(1).shuffle(empty)
    assert empty == []


def test_shuffle_reaches_every_permutation_of_three():
    s = Stream(derive_seed64(4, "perm3"))
    seen = set()
    for _ in range(600):
        items = [0, 1, 2]
        s.shuffle(items)
        seen.add(tuple(items))
    assert len(seen) == 6


@pytest.mark.parametrize("p", [0.001, 0.01, 0.1, 0.5, 0.9])
def test_threshold_gives_chance_p(p):
    s = Stream(derive_seed64(77, f"threshold-{p}"))
    threshold = Stream.threshold(p)
    draws = 100_000
    hits = sum(1 for _ in range(draws) if s.next_u64() < threshold)
    expected = p * draws
    sigma = (draws * p * (1 - p)) ** 0.5
    assert abs(hits - expected) < 6 * sigma + 1, (p, hits)


def test_threshold_extremes():
    assert Stream.threshold(0.0) == 0
    assert Stream.threshold(1.0) == 2**64  # every u64 is below it
    assert Stream.threshold(0.5) == 2**63
    s = Stream(123)
    values = [s.next_u64() for _ in range(1_000)]
    assert not any(v < Stream.threshold(0.0) for v in values)
    assert all(v < Stream.threshold(1.0) for v in values)


def test_chance_extremes_and_rate():
    s = Stream(derive_seed64(6, "chance"))
    assert not any(s.chance(0.0) for _ in range(1_000))
    assert all(s.chance(1.0) for _ in range(1_000))
    hits = sum(s.chance(0.25) for _ in range(40_000))
    assert 9_400 < hits < 10_600


def test_choice_picks_every_item():
    s = Stream(derive_seed64(6, "choice"))
    assert {s.choice("abc") for _ in range(200)} == {"a", "b", "c"}


def test_below_bounds_above_64_bits():
    # Regression: a bound over 2**64 made a negative shift (ValueError).
    s = Stream(derive_seed64(1, "wide"))
    for bound in (2**64 + 1, 2**100, 3 * 2**70 + 7):
        values = [s.below(bound) for _ in range(200)]
        assert all(0 <= v < bound for v in values)
        assert max(values) > bound // 2  # the high words are really drawn
    assert Streams(1)["wide"].below(2**80) == Streams(1)["wide"].below(2**80)
