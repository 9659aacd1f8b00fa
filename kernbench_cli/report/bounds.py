"""A kernel's analytic bounds without a run (`kernbench run --bounds-only`): the JSON object
and the Rich summary, and a sweep's bounds per point (`sweep --bounds-only`).

The JSON object (schema_version 1) says ``"analytic": true`` and has no ``latency_ps``:
nothing was simulated. `bounds_ps` and `bounds_how` are the kernel's `bounds()`;
`lower_bound` names the largest, `lower_bound_ps` is its value.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from kernbench_cli.config.units import format_time_ps
from kernbench_cli.sim.bounds import largest

SCHEMA_VERSION = 1


def stated(module, amap, items: list[str]) -> dict[str, Any]:
    """The `run --bounds-only --json` object of the bounds kernel `module` states on `amap`
    for the ``KEY=value`` parameter `items`, its parameters as a run would take them
    (`batch = 0` as the batch it chooses). KernbenchError if they are refused."""
    from kernbench_cli.sim.bounds import stated_for
    from kernbench_cli.sim.hooks import resolved
    from kernbench_cli.sim.kernels import parse_params

    params = parse_params(module, items, amap.topology.num_pes)
    found, digests = stated_for(module, amap, params)
    return to_json(module.name, amap.topology, resolved(module, amap.topology, params),
                   found, digests)


def to_json(kernel: str, topology, params: dict[str, Any], bounds: dict[str, tuple[int, str]],
            file_digests: dict[str, str]) -> dict[str, Any]:
    """The `run --bounds-only --json` object of `kernel`'s `bounds` on `topology` (the
    files its parameters named: `file_digests`, as a run's)."""
    from kernbench_cli import __version__
    from kernbench_cli.config.loader import config_digest

    found = largest(bounds)
    return {
        "schema_version": SCHEMA_VERSION,
        "kernbench_version": __version__,
        "analytic": True,
        "kernel": kernel,
        "topology": topology.name,
        "costs": topology.cost_table.name,
        "topology_digest": config_digest(topology),
        "costs_digest": config_digest(topology.cost_table),
        **({"file_digests": file_digests} if file_digests else {}),
        "overrides": list(topology.overrides),
        "pes": topology.num_pes,
        "params": params,
        "bounds_ps": {name: ps for name, (ps, _) in sorted(bounds.items())},
        "bounds_how": {name: how for name, (_, how) in sorted(bounds.items())},
        "lower_bound": found[0] if found else None,
        "lower_bound_ps": found[1] if found else None,
    }


def param_text(name: str, value: Any, digests: dict[str, str]) -> str:
    """A parameter's value as reports show it: a file the kernel read (`digests`, a
    result's `file_digests`) with its digest, ``path #1a2b3c4d``."""
    return f"{value} #{digests[name]}" if name in digests else str(value)


def summary(data: dict[str, Any]) -> Table:
    """The bounds of a `to_json` object as the run summary shows them: the kernel and
    topology, each bound, then the largest, labelled a lower bound."""
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    digests = data.get("file_digests", {})
    params = " ".join(f"{k}={param_text(k, v, digests)}"
                      for k, v in sorted(data["params"].items()))
    table.add_row("kernel", f"{data['kernel']}  ({params})")
    table.add_row("topology", f"{data['topology']} #{data['topology_digest']}: {data['pes']} "
                              f"PEs; costs {data['costs']} #{data['costs_digest']}")
    if data["overrides"]:
        table.add_row("set", " ".join(data["overrides"]))
    for name, ps in data["bounds_ps"].items():
        table.add_row(f"{name} bound", f"{format_time_ps(ps)} = {data['bounds_how'][name]}")
    table.add_row("lower bound", lower_bound_text(data))
    return table


def lower_bound_text(data: dict[str, Any]) -> str:
    """The "lower bound" row of a bounds-only summary."""
    if data["lower_bound"] is None:
        return "none: the kernel's bounds() states no bound for these parameters"
    return (f"{format_time_ps(data['lower_bound_ps'])}, the {data['lower_bound']} bound: a "
            "lower bound on the latency (analytic, from the kernel's bounds(); nothing was "
            "simulated)")


def sweep_table(rows: list[dict[str, Any]], width: int | None = None) -> Table:
    """A bounds-only sweep's rows (`explore.sweep.bounds_row`): per point the axes that
    vary, the lower bound and which bound it is, then every bound any point states; given
    the terminal's `width`, bound columns are left out until the table fits (the caption
    names them)."""
    from kernbench_cli.report.fit import drop_to_fit, dropped_caption

    names = sorted({n for r in rows for n in (r.get("bounds") or {}).get("bounds_ps", {})})
    table, dropped = drop_to_fit(lambda out: _bounds_table(rows, [n for n in names
                                                                  if n not in out]),
                                 names, width)
    if dropped:
        table.caption = dropped_caption(dropped, width)
    return table


def _bounds_table(rows: list[dict[str, Any]], names: list[str]) -> Table:
    from kernbench_cli.config.units import format_time_short

    keys = list(rows[0]["axes"]) if rows else []
    varying = [k for k in keys if len({r["axes"].get(k) for r in rows}) > 1] or keys
    fixed = " ".join(f"{k}={rows[0]['axes'][k]}" for k in keys if k not in varying)
    table = Table(title=f"Bounds: {len(rows)} points, analytic (nothing simulated)"
                  + (f"; {fixed}" if fixed else ""), title_style="bold")
    table.add_column("#", justify="right", no_wrap=True)
    for name in varying:
        head, _, last = name.rpartition(".")
        table.add_column(f"{head}.\n{last}" if head else name)
    table.add_column("lower\nbound", justify="right", no_wrap=True)
    table.add_column("by", no_wrap=True)
    for name in names:
        table.add_column(name, justify="right", no_wrap=True)
    for row in rows:
        found = row.get("bounds")
        cells = ([f"error: {row['error']}"] + [""] * (len(names) + 1) if found is None else
                 ["-", "none"] + [""] * len(names) if found["lower_bound"] is None else
                 [format_time_short(found["lower_bound_ps"]), found["lower_bound"],
                  *(format_time_short(found["bounds_ps"][n]) if n in found["bounds_ps"]
                    else "-" for n in names)])
        table.add_row(str(row["point"]), *(str(row["axes"].get(k, "")) for k in varying),
                      *cells)
    return table


def sweep_csv(rows: list[dict[str, Any]], axes: list[str]) -> tuple[list[str], list[list]]:
    """A bounds-only sweep's rows as CSV: (header, rows): the point, its axes, the lower
    bound (its name and ps), each bound in ps (``bounds_ps.NAME``), the error."""
    names = sorted({n for r in rows for n in (r.get("bounds") or {}).get("bounds_ps", {})})
    header = ["point", *axes, "lower_bound", "lower_bound_ps",
              *(f"bounds_ps.{n}" for n in names), "error"]
    out = []
    for row in rows:
        found = row.get("bounds") or {}
        ps = found.get("bounds_ps", {})
        out.append([row["point"], *(row["axes"].get(k, "") for k in axes),
                    found.get("lower_bound") or "", _blank(found.get("lower_bound_ps")),
                    *(_blank(ps.get(n)) for n in names), row["error"] or ""])
    return header, out


def _blank(value: Any) -> Any:
    return "" if value is None else value
