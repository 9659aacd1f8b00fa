"""Unit strings (`config.units`): sizes, times, frequencies and bandwidths parsed to exact
integers, errors that say what was expected, and formatting that parses back."""

import pytest

from kernbench_cli.config import units


@pytest.mark.parametrize(("text", "expected"), [
    ("64KiB", 65536), ("1.5MiB", 1572864), ("2GB", 2_000_000_000), ("8B", 8), ("1 TiB", 2**40),
])
def test_size(text, expected):
    assert units.parse_size(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("30ns", 30_000), ("1.25us", 1_250_000), ("2µs", 2_000_000), ("800ps", 800), ("0ns", 0),
    ("1e3ns", 1_000_000),
])
def test_time_is_integer_picoseconds(text, expected):
    value = units.parse_time_ps(text)
    assert value == expected and isinstance(value, int)


def test_frequency_and_bandwidth_are_exact():
    assert units.parse_frequency("1.5GHz") == 1_500_000_000
    assert units.parse_bandwidth("51.2GB/s") == 51_200_000_000
    assert units.parse_bandwidth("1GiB/s") == 2**30


@pytest.mark.parametrize(("parse", "text", "message"), [
    (units.parse_time_ps, "0.5ps", "'0.5ps' is not a whole number of picoseconds"),
    (units.parse_size, "1.5B", "'1.5B' is not a whole number of bytes"),
    (units.parse_time_ps, "30", "expected a time such as '30ns' (units: ps, ns, us, µs, ms, s), "
                                "got '30'"),
    (units.parse_size, 4096, "expected a size such as '64KiB', got 4096"),
    (units.parse_frequency, "1GB", "expected a frequency such as '1GHz' (units: Hz, kHz, MHz, "
                                   "GHz), got '1GB'"),
    (units.parse_bandwidth, "-3GB/s",
     "expected a bandwidth such as '64GB/s' (units: B/s, KB/s, MB/s, GB/s, TB/s, KiB/s, MiB/s, "
     "GiB/s, TiB/s), got '-3GB/s'"),
])
def test_errors_say_what_was_expected(parse, text, message):
    with pytest.raises(units.UnitError) as info:
        parse(text)
    assert str(info.value) == message


def test_formatting_round_trips_through_parsing():
    for nbytes in (1, 4096, 3 * 2**20, 2**30 + 4096):
        assert units.parse_size(units.format_size(nbytes)) == nbytes
    assert units.format_time_ps(40_000) == "40ns"
    assert units.format_time_ps(1_250_000) == "1.25us"
    assert units.format_time_ps(-1_250_000) == "-1.25us"  # a saving, a difference
    assert units.format_time_short(-45_535_680) == "-45.5us"
    assert units.format_bandwidth(51_200_000_000) == "51.2GB/s"
    assert units.format_frequency(1_500_000_000) == "1.5GHz"


def test_approximate_sizes_for_tables():
    assert units.format_size_approx(16 * 2**20) == "16MiB"
    assert units.format_size_approx(2**30 - 0x3011000) == "975.93MiB"
    assert units.format_size_approx(3 * 2**10 + 1) == "3073B"


def test_sizes_for_messages_are_exact_or_three_decimals_of_the_largest_unit():
    assert units.format_size_human(128 * 2**30) == "128GiB"
    assert units.format_size_human(143_789_457_408) == "133.914GiB"  # 143,789,457,408 B
    assert units.format_size_human(3 * 2**10 + 512) == "3.5KiB"
    assert units.format_size_human(1000) == "1000B"
    assert units.format_size_human(143_789_129_728) == "133.914GiB"  # 137,128 MiB exactly
