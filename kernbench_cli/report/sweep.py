"""A sweep's points as a Rich table: the axes that vary, then what each point gave: the
latency and its change against the first point that has one, then a column per metric the
kernel states (`report.metrics`: a decode step's time per token, tokens/s, energy per token,
…), then the energy, power, bound and verdict (a pruned point's: its lower bound over the
limit)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from kernbench_cli.config.units import format_energy_aj, format_time_ps
from kernbench_cli.report import metrics
from kernbench_cli.report.fit import drop_to_fit, dropped_caption


def _verdict(row: dict[str, Any]) -> str:
    if row.get("pruned"):
        return "pruned"
    if row["result"] is None:
        return f"error: {row['error']}"
    return row["error"] or {True: "PASS", False: "FAIL", None: "timing only"}[
        row["result"]["verified"]]


#: Result columns (the kernel's metrics go after "vs first"), and those a narrow terminal
#: drops, in order, after the metrics that are the same at every point.
COLUMNS = ("latency", "vs\nfirst", "energy", "power", "bound\nby", "GEMM\nMAC", "result")
OPTIONAL = ("GEMM\nMAC", "power", "energy")


def sweep_table(rows: list[dict[str, Any]], width: int | None = None) -> Table:
    """One row per point, in the order given; latency with its change against the first
    point that has one, then the kernel's metrics (every one any point states, by name).

    Numbers never wrap; axis values and the result text do when the terminal
    is tight. A result all points share ("timing only") goes in the title.
    Given the terminal's `width`, columns are left out until the table fits:
    first the metrics that are the same at every point, then those of
    `OPTIONAL`; the caption names them."""
    keys = list(rows[0]["axes"]) if rows else []
    heads = metrics.headings(metrics.names(r["result"] for r in rows),
                             [*keys, *(c.replace("\n", " ") for c in COLUMNS)])
    same = [h for n, h in heads.items()
            if len({metrics.cell(n, metrics.value(r["result"], n)) for r in rows}) == 1]
    table, dropped = drop_to_fit(lambda out: _table(rows, heads, out), same + list(OPTIONAL),
                                 width)
    if dropped:
        table.caption = dropped_caption(dropped, width)
    return table


def _table(rows: list[dict[str, Any]], heads: dict[str, str], dropped: list[str]) -> Table:
    keys = list(rows[0]["axes"]) if rows else []
    varying = [k for k in keys if len({r["axes"].get(k) for r in rows}) > 1] or keys
    verdicts = [_verdict(row) for row in rows]
    common = verdicts[0] if verdicts and len(set(verdicts)) == 1 else None
    fixed = " ".join(f"{k}={rows[0]['axes'][k]}" for k in keys if k not in varying)
    table = Table(title=f"Sweep: {len(rows)} points" + (f", {common}" if common else "")
                  + _pruned_title(rows) + (f"; {fixed}" if fixed else ""), title_style="bold")
    table.add_column("#", justify="right", no_wrap=True)
    for name in varying:  # "pe.gemm.rows" headed "pe.gemm." over "rows"
        head, _, last = name.rpartition(".")
        widest = max(len(str(r["axes"].get(name, ""))) for r in rows)
        table.add_column(f"{head}.\n{last}" if head else name, no_wrap=widest <= 12)
    kept = {n: h for n, h in heads.items() if h not in dropped}
    shown = [c for c in COLUMNS if c not in dropped and not (c == "result" and common)]
    shown[2:2] = kept.values()  # after the latency and "vs first"
    for name in shown:
        table.add_column(name, justify="left" if name in ("bound\nby", "result") else "right",
                         no_wrap=name != "result", max_width=36 if name == "result" else None)
    first = next((r["result"]["latency_ps"] for r in rows if r["result"]), None)
    for row, verdict in zip(rows, verdicts, strict=True):
        cells = _cells(row["result"], first)
        if row.get("pruned"):  # never run: its latency is at least its lower bound
            cells["latency"] = f">={format_time_ps(row['bounds']['lower_bound_ps'])}"
        cells.update((h, metrics.cell(n, metrics.value(row["result"], n)))
                     for n, h in kept.items())
        cells["result"] = verdict
        table.add_row(str(row["point"]), *(str(row["axes"].get(k, "")) for k in varying),
                      *(cells[name] for name in shown))
    return table


def _pruned_title(rows: list[dict[str, Any]]) -> str:
    """The title's word on the points `--prune-above` left out: how many, and the limit."""
    pruned = [row for row in rows if row.get("pruned")]
    if not pruned:
        return ""
    return (f", {len(pruned)} pruned (lower bound above "
            f"{format_time_ps(pruned[0]['pruned']['limit_ps'])})")


def _cells(result: dict[str, Any] | None, first: int | None) -> dict[str, str]:
    """A point's result cells by column (`-` where it has no result)."""
    if result is None:
        return dict.fromkeys(COLUMNS, "-")
    latency = result["latency_ps"]
    energy = (result.get("energy_pj") or {}).get("total")
    bound = result.get("bound") or {}
    power, mac = result.get("average_power_w"), result.get("gemm_mac_utilization")
    return {"latency": format_time_ps(latency),
            "vs\nfirst": f"{(latency - first) / first:+.1%}" if first else "-",
            "energy": "-" if energy is None else format_energy_aj(round(energy * 10**6)),
            "power": "-" if power is None else f"{power:.3g} W",
            "bound\nby": bound.get("by") or bound.get("engine") or "latency",
            "GEMM\nMAC": "-" if mac is None else f"{mac:.1%}"}
