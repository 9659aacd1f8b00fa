"""A kernel's own metrics (its `metrics()`: a decode step's `tpot_ps`, `tokens_per_s`,
`energy_per_token_uj`, …) in tables, comparisons and plots.

kernbench knows no metric by name: a run's metrics are the ``metrics`` object
of its `run --json`, whatever the kernel states. Where several runs are shown
(a sweep's points, runs compared), the metrics are every name any of them has,
by name; a run without one shows nothing there. A metric's unit is read from
the end of its name, as kernbench names its own fields:

=============================  ===============  ==================================
name ends in                   a cell shows     a plot's axis
=============================  ===============  ==================================
``_ps``, ``_ns``, ``_us``,     a time           us
``_ms``
``_pj``, ``_nj``, ``_uj``,     an energy        uJ
``_mj``
``_gbps``                      GB/s             GB/s
``_w``                         W                W
``_bytes``                     a size           GiB
anything else                  4 digits         the number as it is
=============================  ===============  ==================================
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kernbench_cli.config.units import format_energy_aj, format_size_human, format_time_ps

#: Name ending -> (kind, the unit's scale to the stored one: picoseconds or attojoules).
_UNITS = {"_ps": ("time", 1), "_ns": ("time", 10**3), "_us": ("time", 10**6),
          "_ms": ("time", 10**9), "_pj": ("energy", 10**6), "_nj": ("energy", 10**9),
          "_uj": ("energy", 10**12), "_mj": ("energy", 10**15), "_gbps": ("GB/s", 1),
          "_w": ("W", 1), "_bytes": ("size", 1)}

#: The prefix of a metric's column (a sweep's table and .csv) and row (compare): its path
#: in `run --json`, so it never takes the name of a column kernbench has of its own.
PREFIX = "metrics."


def names(results: Iterable[Mapping[str, Any] | None]) -> list[str]:
    """Every metric any of `results` (`run --json` objects; None: a failed point) states,
    sorted."""
    found = set()
    for result in results:
        metrics = (result or {}).get("metrics")
        if isinstance(metrics, Mapping):
            found.update(str(name) for name in metrics)
    return sorted(found)


def value(result: Mapping[str, Any] | None, name: str) -> float | None:
    """Metric `name` of `result` (a `run --json` object), None where it has none."""
    metrics = (result or {}).get("metrics")
    got = metrics.get(name) if isinstance(metrics, Mapping) else None
    return got if isinstance(got, int | float) and not isinstance(got, bool) else None


def _unit(name: str) -> tuple[str, str, int]:
    """(the name without its unit, kind, scale) of a metric; kind "" when unitless."""
    for ending, (kind, scale) in _UNITS.items():
        if name.lower().endswith(ending) and len(name) > len(ending):
            return name[:-len(ending)], kind, scale
    return name, "", 1


def heading(name: str) -> str:
    """What a table calls metric `name`: its words, the unit left to the cells
    (``tpot_ps`` -> ``tpot``, ``tokens_per_s`` -> ``tokens per s``), in lines of about 8
    characters (a column of numbers is not wider than its head)."""
    import textwrap

    bare, _, _ = _unit(name)
    return "\n".join(textwrap.wrap(bare.replace("_", " "), 8, break_long_words=False))


def headings(names: Iterable[str], taken: Iterable[str] = ()) -> dict[str, str]:
    """Each metric's `heading`, or its JSON path (``metrics.NAME``) where that heading is
    another's or one of `taken` (the table's own columns): no two columns share a head."""
    names = list(names)
    bare = [" ".join(heading(n).split()) for n in names]  # compared as one line
    clash = {*(" ".join(t.split()) for t in taken), *(h for h in bare if bare.count(h) > 1)}
    return {n: (PREFIX + n if h in clash else heading(n))
            for n, h in zip(names, bare, strict=True)}


def cell(name: str, number: float | None) -> str:
    """Metric `name`'s value with its unit (``1.234ms``, ``3.21mJ``, ``12.5 GB/s``), ``-``
    where there is none."""
    if number is None:
        return "-"
    _, kind, scale = _unit(name)
    if kind == "time":
        return format_time_ps(round(number * scale))
    if kind == "energy":
        return format_energy_aj(round(number * scale)) if number >= 0 else f"{number:.4g}"
    if kind == "size":
        return format_size_human(round(number)) if number >= 0 else f"{number:.4g}"
    if kind:
        return f"{_number(number)} {kind}"
    return _number(number)


def _number(number: float) -> str:
    """4 significant digits; a whole thousand or more as all its digits (``77,771``)."""
    if 1000 <= abs(number) < 1e12:
        return f"{number:,.0f}"
    return f"{number:.4g}"


def axis(name: str) -> tuple[str, float]:
    """(a plot's axis label, the factor from the metric's value to the plotted number):
    times in us, energies in uJ."""
    bare, kind, scale = _unit(name)
    words = bare.replace("_", " ")
    if kind == "time":
        return f"{words} (us)", scale / 10**6
    if kind == "energy":
        return f"{words} (uJ)", scale / 10**12
    if kind == "size":
        return f"{words} (GiB)", 1 / 2**30
    return (f"{words} ({kind})", 1.0) if kind else (words, 1.0)
