"""Unit strings, parsed in one place.

Every physical quantity in a topology or cost table is a string with a unit,
so a file never leaves the reader guessing whether ``30`` meant ns or cycles:

==========  ==============================================  ==================
kind        accepted units                                  stored as (int)
==========  ==============================================  ==================
size        B, KB, MB, GB, TB (10^3) and KiB, MiB, GiB, TiB  bytes
time        ps, ns, us (or µs), ms, s                       picoseconds
frequency   Hz, kHz, MHz, GHz                               hertz
bandwidth   B/s, KB/s, MB/s, GB/s, TB/s, KiB/s … TiB/s      bytes per second
energy      aJ, fJ, pJ, nJ, uJ (or µJ)                      attojoules
power       uW (or µW), mW, W                               microwatts
==========  ==============================================  ==================

Numbers may be decimals (``"1.5GHz"``, ``"51.2GB/s"``); the result must be a
whole number of the stored unit (``"0.5ps"`` and ``"1.5B"`` are errors), which
keeps simulated time exact: it is integer picoseconds everywhere. Energy is
integer attojoules for the same reason: a power in microwatts held for a time
in picoseconds is a whole number of attojoules (1 µW x 1 ps = 1 aJ).
Parsing raises `UnitError`; the config loader adds file and key to it.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

from kernbench_cli.errors import clip

_SIZE = {
    "B": 1,
    "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
}
_TIME_PS = {"ps": 1, "ns": 10**3, "us": 10**6, "µs": 10**6, "ms": 10**9, "s": 10**12}
_FREQ = {"Hz": 1, "kHz": 10**3, "MHz": 10**6, "GHz": 10**9}
_BANDWIDTH = {f"{unit}/s": scale for unit, scale in _SIZE.items()}
_ENERGY_AJ = {"aJ": 1, "fJ": 10**3, "pJ": 10**6, "nJ": 10**9, "uJ": 10**12, "µJ": 10**12}
_POWER_UW = {"uW": 1, "µW": 1, "mW": 10**3, "W": 10**6}

_QUANTITY = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)\s*([A-Za-zµ/]+)\s*$")


#: Every stored quantity is below this (picoseconds, bytes, hertz): simulated times and
#: sizes stay exact 64-bit integers wherever numpy holds them.
LIMIT = 2**62
_LONGEST = 64  # characters of a quantity string worth parsing


class UnitError(ValueError):
    """A quantity string that does not parse; the message says what was expected."""


def _parse(text: object, units: dict[str, int], what: str, example: str, base: str) -> int:
    if not isinstance(text, str):
        raise UnitError(f"expected {what} such as {example!r}, got {clip(text)}")
    match = _QUANTITY.match(text) if len(text) <= _LONGEST else None
    if match is None or match.group(2) not in units:
        names = ", ".join(units)
        raise UnitError(f"expected {what} such as {example!r} (units: {names}), got "
                        f"{clip(text)}")
    try:
        value = Decimal(match.group(1)) * units[match.group(2)]
        if value >= LIMIT:
            raise UnitError(f"{text!r} is out of range: it must be below 2^62 {base}")
        if value != value.to_integral_value():
            raise UnitError(f"{text!r} is not a whole number of {base}")
    except ArithmeticError:  # decimal.Overflow of an exponent like 1e999999999
        raise UnitError(f"{text!r} is out of range: it must be below 2^62 {base}") from None
    return int(value)


def parse_size(text: object) -> int:
    """``"64KiB"`` -> 65536 (bytes)."""
    return _parse(text, _SIZE, "a size", "64KiB", "bytes")


def parse_time_ps(text: object) -> int:
    """``"30ns"`` -> 30000 (picoseconds)."""
    return _parse(text, _TIME_PS, "a time", "30ns", "picoseconds")


def parse_frequency(text: object) -> int:
    """``"1.5GHz"`` -> 1500000000 (hertz)."""
    return _parse(text, _FREQ, "a frequency", "1GHz", "hertz")


def parse_bandwidth(text: object) -> int:
    """``"51.2GB/s"`` -> 51200000000 (bytes per second)."""
    return _parse(text, _BANDWIDTH, "a bandwidth", "64GB/s", "bytes per second")


def parse_energy(text: object) -> int:
    """``"0.11pJ"`` -> 110000 (attojoules)."""
    return _parse(text, _ENERGY_AJ, "an energy", "0.11pJ", "attojoules")


def parse_power(text: object) -> int:
    """``"50mW"`` -> 50000 (microwatts)."""
    return _parse(text, _POWER_UW, "a power", "50mW", "microwatts")


#: Each kind's units and the unit it is stored in (the table above).
_KINDS = ((_SIZE, "B"), (_TIME_PS, "ps"), (_FREQ, "Hz"), (_BANDWIDTH, "B/s"),
          (_ENERGY_AJ, "aJ"), (_POWER_UW, "uW"))


def quantity(text: object) -> tuple[int | float, str] | None:
    """A quantity string as (its number in the stored unit of its kind, that unit):
    ``"102.4GB/s"`` -> ``(102400000000, "B/s")``, ``"30ns"`` -> ``(30000, "ps")``; an int
    when whole, else a float (``"0.5ps"`` -> ``(0.5, "ps")``: read, not checked as a key
    is). None when `text` is not a number with one of the units above."""
    match = _QUANTITY.match(text) if isinstance(text, str) and len(text) <= _LONGEST else None
    if match is None:
        return None
    for units, base in _KINDS:
        if match.group(2) in units:
            try:  # an exponent such as 1e999999999 overflows: not a number worth holding
                value = Decimal(match.group(1)) * units[match.group(2)]
                whole = value == value.to_integral_value() and value < LIMIT
            except ArithmeticError:
                return None
            number = int(value) if whole else float(value)
            return (number, base) if math.isfinite(number) else None
    return None


def format_energy_aj(aj: int) -> str:
    """Attojoules for people, in at most 4 significant digits: ``"1.234uJ"``, ``"56.7nJ"``."""
    if aj == 0:
        return "0J"
    for unit, scale in (("J", 10**18), ("mJ", 10**15), ("uJ", 10**12), ("nJ", 10**9),
                        ("pJ", 10**6), ("fJ", 10**3)):
        if aj >= scale:
            value = aj / scale
            digits = max(0, 3 - len(str(int(value))))
            return f"{value:.{digits}f}{unit}"
    return f"{aj}aJ"


def format_size(nbytes: int) -> str:
    """Bytes as the largest binary unit that divides them exactly (``"16MiB"``)."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        if nbytes and nbytes % _SIZE[unit] == 0:
            return f"{nbytes // _SIZE[unit]}{unit}"
    return f"{nbytes}B"


def describe_size(nbytes: int, exact_bytes: bool = True) -> str:
    """Bytes for a message, read at a glance and exact: ``"2GiB"``, ``"3.55PiB
    (4,000,000,000,000,000 B)"`` (without `exact_bytes`: ``"3.55PiB"``), ``"96 B"``."""
    if nbytes < _SIZE["KiB"]:
        return f"{nbytes:,} B"
    exact = format_size(nbytes)
    if exact.endswith("iB") and int(exact[:-3]) < 1024:
        return exact
    for unit, scale in (("EiB", 2**60), ("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30),
                        ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            value = nbytes / scale
            shown = f"{value:.3g}{unit}" if value < 1000 else f"{value:,.0f}{unit}"
            return f"{shown} ({nbytes:,} B)" if exact_bytes else shown
    return exact  # pragma: no cover - nbytes >= 1 KiB always meets a unit


def format_size_approx(nbytes: int) -> str:
    """Bytes for a table: exact when a unit divides them, else 3 significant-ish digits."""
    exact = format_size(nbytes)
    if not exact.endswith("KiB") or nbytes < _SIZE["MiB"]:
        return exact
    for unit in ("TiB", "GiB", "MiB"):
        if nbytes >= _SIZE[unit]:
            return f"{_trim(Decimal(nbytes) / _SIZE[unit])[:6].rstrip('.')}{unit}"
    return exact  # pragma: no cover - nbytes >= 1 MiB always meets a unit


#: An integer as kernbench reads one from the command line (`-p`, `decode`): ASCII decimal
#: digits (leading zeros allowed: ``010`` is 10), or a 0x, 0o or 0b number, with an
#: optional sign and single ``_`` between digits
_INTEGER = re.compile(r"[+-]?(0[xX](_?[0-9a-fA-F])+|0[oO](_?[0-7])+|0[bB](_?[01])+|"
                      r"[0-9](_?[0-9])*)")


def read_integer(text: str) -> int:
    """`text` read as `_INTEGER` says (ValueError if it is not one: ``٣``, ``1__0``;
    OverflowError for a decimal past Python's digit limit, `sys.int_max_str_digits`: one,
    but larger than any use)."""
    if not _INTEGER.fullmatch(text):
        raise ValueError(text)
    digits = text.replace("_", "").lstrip("+-")
    sign = -1 if text.startswith("-") else 1
    base = {"x": 16, "o": 8, "b": 2}.get(digits[1:2].lower(), 10) if digits[:1] == "0" else 10
    try:
        return sign * int(digits[2:] if base != 10 else digits.lstrip("0") or "0", base)
    except ValueError:  # well formed (matched above): too many digits to convert
        raise OverflowError(text) from None


def format_size_human(nbytes: int) -> str:
    """Bytes for a message, in the largest binary unit they reach: whole when it divides
    them (``"16MiB"``), else to 3 decimals (``"133.914GiB"``, not ``"137128MiB"``)."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        if nbytes >= _SIZE[unit]:
            return f"{nbytes / _SIZE[unit]:.3f}".rstrip("0").rstrip(".") + unit
    return format_size(nbytes)


def format_time_ps(ps: int) -> str:
    """Picoseconds for people: ``"40ns"``, ``"1.25us"``, ``"800ps"``, ``"0ns"``."""
    if ps < 0:
        return "-" + format_time_ps(-ps)
    if ps == 0:
        return "0ns"
    for unit, scale in (("s", 10**12), ("ms", 10**9), ("us", 10**6), ("ns", 10**3)):
        if ps >= scale:
            return f"{_trim(Decimal(ps) / scale)}{unit}"
    return f"{ps}ps"


def format_time_short(ps: int) -> str:
    """Picoseconds in at most 4 significant digits, for table cells: ``"35.79us"``."""
    if ps < 0:
        return "-" + format_time_short(-ps)
    if ps == 0:
        return "0ns"
    for unit, scale in (("s", 10**12), ("ms", 10**9), ("us", 10**6), ("ns", 10**3)):
        if ps >= scale:
            value = ps / scale
            digits = max(0, 3 - len(str(int(value))))
            return f"{value:.{digits}f}{unit}"
    return f"{ps}ps"


def format_frequency(hz: int) -> str:
    for unit in ("GHz", "MHz", "kHz"):
        if hz >= _FREQ[unit]:
            return f"{_trim(Decimal(hz) / _FREQ[unit])}{unit}"
    return f"{hz}Hz"


def format_bandwidth(bytes_per_s: int) -> str:
    for unit in ("TB", "GB", "MB", "KB"):
        if bytes_per_s >= _SIZE[unit]:
            return f"{_trim(Decimal(bytes_per_s) / _SIZE[unit])}{unit}/s"
    return f"{bytes_per_s}B/s"


def _trim(value: Decimal) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".")
