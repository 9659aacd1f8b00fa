"""TOML -> validated, frozen `Topology` / `CostTable`.

The loader walks the `key()`/`section()` declarations of `config.schema`, so
every problem is reported the same way: ``FILE: key.path: what is wrong``.
It collects every problem in a file before raising one `ConfigError`, so
`kernbench topology validate` can list them all at once.

Checks here are those the configuration alone can make (types, units,
unknown and missing keys, mesh shapes). What the address layout imposes
(field widths, window sizes, the PE resource ranges) is checked where the
layout lives, in `address.physaddr.AddressMap.compile`.
"""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from kernbench_cli.config.schema import KINDS, REQUIRED, CostTable, Topology
from kernbench_cli.errors import ConfigError
from kernbench_cli.resources import data_dir


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file; every failure becomes a one-line ConfigError."""
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError([f"{path}: no such file"]) from None
    except IsADirectoryError:
        raise ConfigError([f"{path}: is a directory, expected a TOML file"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{path}: invalid TOML: {exc}"]) from None
    except UnicodeDecodeError:
        raise ConfigError([f"{path}: invalid TOML: not UTF-8 text"]) from None


def build(cls: type, table: dict[str, Any], where: str, file: Path, problems: list[str]) -> Any:
    """Build dataclass `cls` from `table`, appending problems instead of raising."""
    kwargs: dict[str, Any] = {}
    known = [f.name for f in fields(cls) if not f.metadata.get("internal")]
    for f in fields(cls):
        if f.metadata.get("internal"):
            continue
        path = f"{where}.{f.name}" if where else f.name
        sub = f.metadata.get("section")
        if f.name not in table:
            if sub is None and f.metadata["default"] is REQUIRED:
                unit = KINDS[f.metadata["kind"]][1]
                problems.append(f"{file}: {path}: missing required key ({unit})")
            elif sub is not None and _has_required(sub):
                problems.append(f"{file}: {path}: missing required table [{path}]")
            continue
        value = table[f.name]
        if sub is not None:
            if not isinstance(value, dict):
                problems.append(f"{file}: {path}: expected a table [{path}], got {value!r}")
                continue
            # A table with its own defaults (a link level, a resource range) fills the keys
            # the file leaves out from those, not from the generic class defaults.
            merged = {**f.metadata.get("default", {}), **value}
            kwargs[f.name] = build(sub, merged, path, file, problems)
            continue
        try:
            kwargs[f.name] = KINDS[f.metadata["kind"]][0](value)
        except ValueError as exc:
            problems.append(f"{file}: {path}: {exc}")
    for name in table:
        if name not in known:
            path = f"{where}.{name}" if where else name
            hint = " or ".join(repr(h) for h in difflib.get_close_matches(name, known, n=2))
            tip = f"; did you mean {hint}?" if hint else f" (known: {', '.join(known)})"
            problems.append(f"{file}: {path}: unknown key{tip}")
    return cls(**kwargs)


def _has_required(cls: type) -> bool:
    return any(f.metadata.get("default", None) is REQUIRED for f in fields(cls))


def load_costs(path: Path | str) -> CostTable:
    """Load a cost table (ADR-0064) from TOML."""
    path = Path(path)
    problems: list[str] = []
    table = build(CostTable, read_toml(path), "", path, problems)
    if problems:
        raise ConfigError(problems)
    return replace(table, name=table.name or path.stem, source=path)


def load_topology(path: Path | str, costs: Path | str | None = None) -> Topology:
    """Load a topology and the cost table it names (`costs` overrides that).

    The cost-table path in the file is relative to the topology file.
    """
    path = Path(path)
    problems: list[str] = []
    topo: Topology = build(Topology, read_toml(path), "", path, problems)
    if not problems:
        problems.extend(_check_meshes(topo, path))
    if costs is not None:
        cost_path = Path(costs)
    elif topo.costs:
        cost_path = path.parent / topo.costs
    else:
        cost_path = data_dir("topologies") / "costs" / "default.toml"
    if costs is None and topo.costs and not problems and not cost_path.is_file():
        problems.append(f"{path}: costs: no such file {str(cost_path)!r}")
    if problems:
        raise ConfigError(problems)
    cost_table = load_costs(cost_path)
    return replace(topo, name=topo.name or path.stem, source=path, cost_table=cost_table)


def _check_meshes(topo: Topology, path: Path) -> list[str]:
    s = topo.system
    problems = []
    for mesh_key, count_key, what in (("cube_mesh", "cubes_per_sip", "cubes"),
                                      ("pe_mesh", "pes_per_cube", "PEs")):
        cols, rows = getattr(s, mesh_key)
        count = getattr(s, count_key)
        if cols * rows != count:
            problems.append(
                f"{path}: system.{mesh_key}: [{cols}, {rows}] holds {cols * rows} {what} "
                f"but system.{count_key} is {count}")
    return problems
