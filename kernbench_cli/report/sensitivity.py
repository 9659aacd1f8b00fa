"""Sensitivity by replay as a Rich table: each key made 2x better, ranked by what it saves."""

from __future__ import annotations

from rich.table import Table

from kernbench_cli.config.units import format_time_ps


def sensitivity_table(sensitivity, width: int | None = None) -> Table:
    """One row per key: what it was set to, the latency then, its change, the bound then
    (left out when the table would not fit `width` columns)."""
    from kernbench_cli.report.fit import drop_to_fit, dropped_caption

    table, dropped = drop_to_fit(lambda out: _table(sensitivity, out), ("bound by",), width)
    if dropped:
        table.caption = dropped_caption(dropped, width)
    return table


def _table(sensitivity, dropped) -> Table:
    table = Table(title=f"Sensitivity: each key 2x better, the run re-timed by replay "
                        f"(latency {format_time_ps(sensitivity.latency_ps)})")
    columns = [c for c in ("key", "set to", "latency", "change", "bound by") if c not in dropped]
    for col in columns:
        table.add_column(col, justify="right" if col in ("latency", "change") else "left",
                         no_wrap=col != "set to")
    for c in sensitivity.changes:
        value = c.items[0].split("=", 1)[1] if len(c.items) == 1 else \
            f"each halved ({len(c.items)} keys)"
        cells = {"key": c.key, "set to": value, "latency": format_time_ps(c.latency_ps),
                 "change": f"{c.change:+.1%}", "bound by": c.bound}
        table.add_row(*(cells[col] for col in columns))
    return table
