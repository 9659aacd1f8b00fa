"""A sweep's points as a Rich table: the axes that vary, then what each point gave."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from kernbench_cli.config.units import format_time_ps


def _verdict(row: dict[str, Any]) -> str:
    if row["result"] is None:
        return f"error: {row['error']}"
    return row["error"] or {True: "PASS", False: "FAIL", None: "timing only"}[
        row["result"]["verified"]]


def sweep_table(rows: list[dict[str, Any]]) -> Table:
    """One row per point, in the order given; latency with its change against the first.

    Numbers never wrap; axis values and the result text do when 80 columns are
    tight. A result all points share ("timing only") goes in the title."""
    keys = list(rows[0]["axes"]) if rows else []
    varying = [k for k in keys if len({r["axes"].get(k) for r in rows}) > 1] or keys
    verdicts = [_verdict(row) for row in rows]
    common = verdicts[0] if verdicts and len(set(verdicts)) == 1 else None
    table = Table(title=f"Sweep: {len(rows)} points" + (f", {common}" if common else ""),
                  title_style="bold")
    table.add_column("#", justify="right", no_wrap=True)
    for name in varying:  # "pe.gemm.rows" headed "pe.gemm" over "rows"
        head, _, last = name.rpartition(".")
        widest = max(len(str(r["axes"].get(name, ""))) for r in rows)
        table.add_column(f"{head}\n{last}" if head else name, no_wrap=widest <= 12)
    for name in ("latency", "vs\nfirst", "bound\nby", "GEMM\nMAC", "result"):
        if name == "result" and common:
            continue
        table.add_column(name, justify="left" if name in ("bound\nby", "result") else "right",
                         no_wrap=name in ("latency", "vs\nfirst", "GEMM\nMAC"),
                         max_width=36 if name == "result" else None)
    first = next((r["result"]["latency_ps"] for r in rows[:1] if r["result"]), None)
    for row, verdict in zip(rows, verdicts, strict=True):
        result = row["result"]
        cells = [str(row["point"]), *(row["axes"].get(k, "") for k in varying)]
        if result is None:
            cells += ["-", "-", "-", "-"]
        else:
            latency = result["latency_ps"]
            change = f"{(latency - first) / first:+.1%}" if first else "-"
            cells += [format_time_ps(latency), change, result["bound"].get("by") or
                      result["bound"]["engine"] or "latency",
                      f"{result['gemm_mac_utilization']:.1%}"]
        table.add_row(*cells, *([] if common else [verdict]))
    return table
