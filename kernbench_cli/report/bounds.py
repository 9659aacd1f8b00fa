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


def to_json(kernel: str, topology, params: dict[str, Any],
            bounds: dict[str, tuple[int, str]]) -> dict[str, Any]:
    """The `run --bounds-only --json` object of `kernel`'s `bounds` on `topology`."""
    from kernbench_cli.config.loader import config_digest

    found = largest(bounds)
    return {
        "schema_version": SCHEMA_VERSION,
        "analytic": True,
        "kernel": kernel,
        "topology": topology.name,
        "costs": topology.cost_table.name,
        "topology_digest": config_digest(topology),
        "costs_digest": config_digest(topology.cost_table),
        "overrides": list(topology.overrides),
        "pes": topology.num_pes,
        "params": params,
        "bounds_ps": {name: ps for name, (ps, _) in sorted(bounds.items())},
        "bounds_how": {name: how for name, (_, how) in sorted(bounds.items())},
        "lower_bound": found[0] if found else None,
        "lower_bound_ps": found[1] if found else None,
    }


def summary(data: dict[str, Any]) -> Table:
    """The bounds of a `to_json` object as the run summary shows them: the kernel and
    topology, each bound, then the largest, labelled a lower bound."""
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    params = " ".join(f"{k}={v}" for k, v in sorted(data["params"].items()))
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
