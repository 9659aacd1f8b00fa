"""`kernbench topology show` and `kernbench topology validate`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernbench_cli.address import load_address_map
from kernbench_cli.cli.common import CostsOpt, SetOpt

app = typer.Typer(help="Inspect and check topology files.", no_args_is_help=True)

TopologyArg = Annotated[
    str | None,
    typer.Argument(help="Topology name (default, sip, rack) or TOML path.", show_default="default"),
]


@app.command()
def show(
    topology: TopologyArg = None,
    costs: CostsOpt = None,
    sets: SetOpt = None,
    toml: Annotated[bool, typer.Option(
        "--toml", help="Print every key as TOML instead, defaults filled in.")] = False,
) -> None:
    """Print the system tree and the compiled PE resource map."""
    amap = load_address_map(topology, costs, sets or ())
    if toml:
        from kernbench_cli.config.writer import topology_toml

        typer.echo(topology_toml(amap.topology), nl=False)
        return
    from rich.console import Console

    from kernbench_cli.cli.common import echo_rich
    from kernbench_cli.report.topology import resource_table, system_tree

    echo_rich(system_tree(amap), resource_table(amap, Console().width))


@app.command()
def validate(
    topology: Annotated[Path, typer.Argument(help="Topology TOML file.")],
    costs: CostsOpt = None,
    sets: SetOpt = None,
) -> None:
    """Check a topology (and its cost table): exit 0, or list every problem and exit 2."""
    amap = load_address_map(str(topology), costs, sets or ())
    topo = amap.topology
    s = topo.system
    print(f"{topology}: ok: {s.racks} rack x {s.sips_per_rack} SIP x {s.cubes_per_sip} cubes x "
          f"{s.pes_per_cube} PEs = {topo.num_pes} PEs; costs {_costs_shown(topo)}")


def _costs_shown(topo) -> str:
    from kernbench_cli.shipped import shipped_costs_name

    name = shipped_costs_name(topo.cost_table.source)
    return f"{name} (shipped)" if name else str(topo.cost_table.source)
