"""Results as tables: plain records (a list of dicts, one per row) and, where pandas is
installed, DataFrames built from them.

kernbench does not depend on pandas: `pandas()` imports it only when a `to_pandas()` asks,
and says how to get it otherwise. Everything else about a table (its rows, columns, order)
is decided here without it, so it is the same with or without pandas.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kernbench_cli.errors import KernbenchError


class PandasMissing(KernbenchError, ImportError):
    """`to_pandas()` was asked for, and pandas is not installed (it is not a dependency)."""


def pandas():
    """The pandas module, imported now; `PandasMissing` (an ImportError) if it is not there."""
    try:
        import pandas
    except ImportError:
        raise PandasMissing("to_pandas() needs pandas, which kernbench does not install: "
                            "pip install pandas") from None
    return pandas


def frame(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], index: str | None = None):
    """A DataFrame of `rows` with exactly `columns` (in that order; a missing value is None),
    indexed by the column `index` if one is named."""
    pd = pandas()
    table = pd.DataFrame([[row.get(c) for c in columns] for row in rows], columns=list(columns))
    return table.set_index(index) if index is not None else table


# ---------------------------------------------------------------------- a run's tables

#: The columns of each table of a `Result` (`per_pe`: its JSON keys, sorted).
RESULT_COLUMNS = {
    "summary": ("kernel", "topology", "costs", "pes", "latency_ps", "latency_ns", "verified",
                "max_abs_err", "commands", "bound_by", "gemm_mac_utilization",
                "gemm_array_utilization", "hbm_gbps", "hbm_peak_gbps"),
    "engines": ("engine", "instances", "ops", "busy_ps", "busy_min_ps", "busy_max_ps",
                "wait_ps", "idle_ps", "utilization", "utilization_max"),
    "checks": ("kind", "name", "passed", "dtype", "max_abs_err", "atol", "rtol", "detail"),
    "critical_path": ("by", "name", "ps", "share"),
    "bounds": ("name", "ps", "latency_ratio"),
}


def result_tables(result) -> dict[str, list[dict[str, Any]]]:
    """A `Result`'s tables as records (see `Result.tables`)."""
    latency = result.latency_ps
    summary = {c: getattr(result, c) for c in RESULT_COLUMNS["summary"] if c != "bound_by"}
    summary["bound_by"] = result.bound.by
    engines = [{"engine": e.name, **{c: getattr(e, c) for c in RESULT_COLUMNS["engines"][1:]}}
               for e in result.engines.values()]
    checks = [{c: getattr(check, c) for c in RESULT_COLUMNS["checks"]}
              for check in result.checks]
    path = []
    if result.critical_path is not None:
        for by, table in (("engine", result.critical_path.by_engine),
                          ("cause", result.critical_path.by_cause)):
            path += [{"by": by, "name": name, "ps": ps, "share": ps / latency if latency else 0.0}
                     for name, ps in table.items()]
    bounds = [{"name": name, "ps": ps, "latency_ratio": latency / ps if ps else None}
              for name, ps in result.bounds_ps.items()]
    out = {"summary": [summary], "engines": engines, "checks": checks, "critical_path": path,
           "bounds": bounds}
    if result.per_pe is not None:
        out["per_pe"] = [dict(row) for row in result.per_pe]
    return out


def result_frames(result) -> dict[str, Any]:
    """A `Result`'s tables as DataFrames (see `Result.to_pandas`)."""
    pandas()  # before any work: without pandas, say so first
    out = {}
    for name, rows in result_tables(result).items():
        columns = RESULT_COLUMNS.get(name) or sorted(rows[0] if rows else ())
        out[name] = frame(rows, columns)
    return out
