"""A loaded configuration back to TOML: every key, defaults filled in, exact units.

`kernbench topology show T --toml` prints it; loading that text gives the same
topology, so it is the resolved form of a file that leaves keys out.
"""

from __future__ import annotations

import re
from dataclasses import fields
from decimal import Decimal
from typing import Any

import tomli_w

from kernbench_cli.config import units
from kernbench_cli.config.schema import Topology
from kernbench_cli.shipped import shipped_costs_name

_EXACT = {
    "time": (("s", 10**12), ("ms", 10**9), ("us", 10**6), ("ns", 10**3), ("ps", 1)),
    "frequency": (("GHz", 10**9), ("MHz", 10**6), ("kHz", 10**3), ("Hz", 1)),
    "bandwidth": (("TB/s", 10**12), ("GB/s", 10**9), ("MB/s", 10**6), ("KB/s", 10**3),
                  ("B/s", 1)),
    "power": (("W", 10**6), ("mW", 10**3), ("uW", 1)),
}


def exact(kind: str, value: int) -> Any:
    """`value` in its kind's units, exactly: the largest unit it is at least 1 of."""
    if kind == "size":
        return units.format_size(value)
    if kind == "energy":
        return f"{format((Decimal(value) / 10**6).normalize(), 'f')}pJ"
    if kind in _EXACT:
        for unit, scale in _EXACT[kind]:
            if value >= scale or scale == 1:
                number = Decimal(value) / scale
                text = format(number.normalize(), "f")
                return f"{text}{unit}"
    if kind == "mesh":
        return list(value)
    return value


def _table(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(obj):
        if f.metadata.get("internal"):
            continue
        value = getattr(obj, f.name)
        if "section" in f.metadata:
            out[f.name] = _table(value)
        else:
            out[f.name] = exact(f.metadata["kind"], value)
    return out


def topology_toml(topology: Topology) -> str:
    """The whole topology as portable TOML: its cost table by name when it is a shipped
    one (else by absolute path), meshes on one line, resource starts in hex."""
    data = _table(topology)
    source = topology.cost_table.source
    data["costs"] = shipped_costs_name(source) or (str(source.resolve()) if source else "")
    text = tomli_w.dumps(data)
    text = re.sub(r"\[\n((?:    -?\d+,\n)+)\]",
                  lambda m: "[" + ", ".join(re.findall(r"-?\d+", m.group(1))) + "]", text)
    return re.sub(r"^(start|offset) = (\d+)$", lambda m: f"{m.group(1)} = {int(m.group(2)):#x}",
                  text, flags=re.MULTILINE)
