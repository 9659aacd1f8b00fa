"""Sensitivity by replay as a Rich table: each key made 2x better, ranked by what it saves."""

from __future__ import annotations

from rich.table import Table

from kernbench_cli.config.units import format_time_ps


def sensitivity_table(sensitivity) -> Table:
    """One row per key: what it was set to, the latency then, its change, the bound then."""
    table = Table(title=f"Sensitivity: each key 2x better, the run re-timed by replay "
                        f"(latency {format_time_ps(sensitivity.latency_ps)})")
    for col in ("key", "set to", "latency", "change", "bound by"):
        table.add_column(col, justify="right" if col in ("latency", "change") else "left",
                         no_wrap=col != "set to")
    for c in sensitivity.changes:
        value = c.items[0].split("=", 1)[1] if len(c.items) == 1 else \
            f"each halved ({len(c.items)} keys)"
        table.add_row(c.key, value, format_time_ps(c.latency_ps), f"{c.change:+.1%}", c.bound)
    return table
