"""A sweep's points as a Rich table: the axes that vary, then what each point gave."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from kernbench_cli.config.units import format_time_ps


def sweep_table(rows: list[dict[str, Any]]) -> Table:
    """One row per point, in the order given; latency with its change against the first."""
    keys = list(rows[0]["axes"]) if rows else []
    varying = [k for k in keys if len({r["axes"].get(k) for r in rows}) > 1] or keys
    table = Table(title=f"Sweep: {len(rows)} points", title_style="bold")
    table.add_column("#", justify="right")
    for name in varying:  # "pe.gemm.rows" headed "pe.gemm" over "rows"
        head, _, last = name.rpartition(".")
        widest = max(len(str(r["axes"].get(name, ""))) for r in rows)
        table.add_column(f"{head}\n{last}" if head else name, overflow="fold",
                         min_width=min(max(widest, len(last)), 20))
    for name in ("latency", "vs first", "bound by", "GEMM MAC", "result"):
        table.add_column(name, justify="left" if name in ("bound by", "result") else "right",
                         min_width=11 if name == "result" else None,
                         max_width=36 if name == "result" else None)
    first = next((r["result"]["latency_ps"] for r in rows[:1] if r["result"]), None)
    for row in rows:
        result = row["result"]
        cells = [str(row["point"]), *(row["axes"].get(k, "") for k in varying)]
        if result is None:
            cells += ["-", "-", "-", "-", f"error: {row['error']}"]
        else:
            latency = result["latency_ps"]
            change = f"{(latency - first) / first:+.1%}" if first else "-"
            verdict = row["error"] or {True: "PASS", False: "FAIL", None: "timing only"}[
                result["verified"]]
            cells += [format_time_ps(latency), change, result["bound"]["engine"] or "latency",
                      f"{result['gemm_mac_utilization']:.1%}", verdict]
        table.add_row(*cells)
    return table
