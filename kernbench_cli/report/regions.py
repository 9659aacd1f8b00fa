"""The regions table and JSON: time and energy per named region (`sim.regions`)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from kernbench_cli.config.units import format_energy_aj
from kernbench_cli.config.units import format_time_short as short
from kernbench_cli.sim.result import RunResult

#: the most regions the table shows, in the order first entered (then the time outside
#: them); a kernel naming a region per loop step may name tens of thousands
MOST_ROWS = 100


def region_table(result: RunResult) -> Table:
    """A row per region (nested ones indented under theirs; the first `MOST_ROWS`, the
    caption says how many more), then the time outside them: the critical path's time in
    it, by engine, its span, its commands' dynamic energy."""
    latency = result.latency_ps
    shown = result.regions[:MOST_ROWS] + result.regions[-1:] \
        if len(result.regions) > MOST_ROWS + 1 else result.regions
    more = len(result.regions) - len(shown)
    table = Table(title="Regions: the critical path's time and the commands' energy in "
                        "each (nested ones in theirs)",
                  caption=f"and {more:,} more regions, after the first {MOST_ROWS} (--json "
                          "has every one)" if more else None)
    for col, justify in (("region", "left"), ("on path", "right"), ("share", "right"),
                         ("mostly", "left"), ("span", "right"),
                         ("commands", "right"), ("energy", "right")):
        table.add_column(col, justify=justify, overflow="fold")
    for region in shown:
        depth = region.name.count("/")
        top = ", ".join(f"{engine} {ps / region.path_ps:.0%}"
                        for engine, ps in list(region.by_engine.items())[:1]) \
            if region.path_ps else "-"
        table.add_row("  " * depth + region.name.rsplit("/", 1)[-1],
                      short(region.path_ps),
                      f"{region.path_ps / latency:.1%}" if latency else "-", top,
                      short(region.span_ps) if region.span_ps else "-",
                      f"{region.commands:,}", format_energy_aj(region.energy_aj))
    return table


def regions_json(result: RunResult) -> list[dict[str, Any]]:
    return [{"name": r.name, "path_ps": r.path_ps, "by_engine": r.by_engine,
             "span_ps": r.span_ps, "commands": r.commands, "energy_aj": r.energy_aj}
            for r in result.regions]
