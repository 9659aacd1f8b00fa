"""What the hardware IS: TOML topology and cost tables as frozen, validated dataclasses."""

from kernbench_cli.config.loader import load_costs, load_topology
from kernbench_cli.config.schema import CostTable, Topology

__all__ = ["CostTable", "Topology", "load_costs", "load_topology"]
