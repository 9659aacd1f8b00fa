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
import hashlib
import json
import numbers
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, fields, is_dataclass, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

from kernbench_cli import gc_control
from kernbench_cli.config.schema import KINDS, REQUIRED, CostTable, Topology
from kernbench_cli.errors import ConfigError, KernbenchError, clip
from kernbench_cli.fileio import is_a, read_input
from kernbench_cli.shipped import costs_dir

#: Bytes of a TOML file worth reading: the shipped rack topology is 2 KiB.
MAX_TOML_BYTES = 16 * 2**20


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file; every failure becomes a one-line ConfigError."""
    try:
        data = read_input(path, MAX_TOML_BYTES, "a TOML file")
        with gc_control.paused(collect=False):
            return tomllib.loads(data.decode())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{path}: invalid TOML: {exc}"]) from None
    except UnicodeDecodeError:
        raise ConfigError([f"{path}: invalid TOML: not UTF-8 text"]) from None
    except RecursionError:
        raise ConfigError([f"{path}: invalid TOML: arrays or tables nested too deep"]) from None
    except ValueError as exc:  # an integer of thousands of digits
        raise ConfigError([f"{path}: invalid TOML: {str(exc).split(';')[0]}"]) from None
    except KernbenchError as exc:
        raise ConfigError([str(exc)]) from None


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
            path = _as_given(f"{where}.{name}" if where else name)  # a quoted TOML key
            if len(problems) > ConfigError.SHOWN:  # past what is shown: counted, not advised
                problems.append(f"{file}: {path}: unknown key")
                continue
            problems.append(f"{file}: {path}: unknown key{_tip(name, known)}")
    return cls(**kwargs)


def check_set_keys(items: Sequence[str]) -> None:
    """ConfigError for the first `--set` item whose key no topology (or, under ``costs.``,
    no cost table) has, in the words loading would use: a sweep refuses it before its
    points run, each of which would fail alike. Only the key's tables are walked: what a
    value's kind takes, and every value, are loading's to check."""
    for item in items:
        key, sep, _ = item.partition("=")
        key = key.strip()
        keys = key.endswith(".*")  # a table's keys: the table must be one
        key = key.removesuffix(".*")
        if not sep or any(not part for part in key.split(".")):
            continue  # not KEY=VALUE: `parse_sets` says so
        prefix = COSTS_PREFIX if key.startswith(COSTS_PREFIX) else ""
        cls: Any = CostTable if prefix else Topology
        where, item = "", _as_given(item)
        for part in key[len(prefix):].split("."):
            if cls is None:
                raise ConfigError([f"--set {item}: {prefix}{_as_given(where)} is a value, not "
                                   "a table"])
            known = [f.name for f in fields(cls) if not f.metadata.get("internal")]
            where = f"{where}.{part}" if where else part
            if part not in known:
                raise ConfigError([f"--set {item}: {prefix}{_as_given(where)}: unknown "
                                   f"key{_tip(part, known)}"])
            cls = next(f for f in fields(cls) if f.name == part).metadata.get("section")
        if keys and cls is None:
            raise ConfigError([f"--set {item}: {prefix}{_as_given(where)} is a value, not a "
                               "table"])


def _tip(name: str, known: list[str]) -> str:
    """What an unknown key `name` may have meant, of the `known` ones, or all of them."""
    hint = " or ".join(repr(h) for h in difflib.get_close_matches(name, known, n=2))
    return f"; did you mean {hint}?" if hint else f" (known: {', '.join(known)})"


def _has_required(cls: type) -> bool:
    return any(f.metadata.get("default", None) is REQUIRED for f in fields(cls))


#: The prefix of a `--set` key that addresses the cost table rather than the topology.
COSTS_PREFIX = "costs."


def parse_sets(items: Sequence[str]) -> dict[str, tuple[Any, str]]:
    """`--set KEY=VALUE` items as {dotted key: (value, the item as given)}.

    VALUE is read as a TOML value when it is one (``4``, ``[4, 2]``, ``true``,
    ``"os"``) and as a string otherwise (``204.8GB/s``, ``80ns``, ``os``), so
    it is then checked exactly as the same value in a file would be.
    """
    out: dict[str, tuple[Any, str]] = {}
    problems = []
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")):
            problems.append(f"--set {clip(item)}: expected KEY=VALUE, KEY a dotted TOML path "
                            "(hbm.bandwidth=409.6GB/s, costs.issue.composite=80ns)")
            continue
        value = read_set_value(raw)
        out[key] = (value, _as_given(item))
    if problems:
        raise ConfigError(problems)
    return out


def _as_given(item: str) -> str:
    """A `--set` item (or key) as a message quotes it: a control character escaped (a
    newline, a terminal escape: the message stays one line and prints as text), cut past
    80 characters."""
    item = "".join(c if c.isprintable() else repr(c)[1:-1] for c in item)
    return item if len(item) <= 80 else f"{item[:60]}… ({len(item):,} characters)"


def read_set_value(raw: str) -> Any:
    """A `--set` VALUE as the loader reads it: the TOML value it is (``64``, ``[8, 4]``,
    ``true``), or else its text (``409.6GB/s``, ``80ns``, ``ws``)."""
    try:
        with gc_control.paused(collect=False):
            return tomllib.loads(f"v = {raw}")["v"]
    except (ValueError, RecursionError):  # not TOML (or a number of 10^5 digits): text
        return raw.strip()


def set_items(sets: Mapping[str, Any] | Sequence[str] | None) -> list[str]:
    """The `--set KEY=VALUE` items of the API's ``set=``: a mapping of dotted key to value,
    or already a sequence of items (taken as they are).

    A string value is written as given, so it reads as it would on the command line
    (``"204.8GB/s"``, ``"ws"``; ``"8"`` is the number 8); any other value as its TOML
    literal (``8``, ``0.5``, ``true``, ``[4, 2]``), which `read_set_value` reads back as the
    same value. A value TOML cannot hold is a ConfigError naming the key.
    """
    if sets is None:
        return []
    if isinstance(sets, str | bytes | bytearray) or not isinstance(sets, Mapping | Sequence):
        raise ConfigError([f"set={clip(sets)}: expected a mapping of key: value (or a list "
                           "of KEY=VALUE items)"])
    if not isinstance(sets, Mapping):
        bad = [item for item in sets if not isinstance(item, str)]
        if bad:
            raise ConfigError([f"set: {clip(bad[0])} is not a KEY=VALUE item"])
        return list(sets)
    items = []
    for key, value in sets.items():
        if not isinstance(key, str) or "=" in key:
            raise ConfigError([f"set: key {clip(key)}: expected a dotted TOML path "
                               "(hbm.bandwidth, costs.issue.composite)"])
        try:
            text = value if isinstance(value, str) else toml_literal(value)
        except ValueError:
            raise ConfigError([f"--set {_as_given(key)}={clip(value)}: not a TOML value (a "
                               "number, string or boolean, or an array or table of them)"]
                              ) from None
        items.append(f"{key}={text}")
    return items


def toml_literal(value: Any) -> str:
    """`value` as a one-line TOML literal; ValueError if TOML has no such value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        return repr(float(value))  # shortest round trip; nan and inf are TOML too
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {toml_literal(v)}"
                               for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_literal(v) for v in value) + "]"
    raise ValueError(f"no TOML literal for {type(value).__name__}")


def _apply_sets(table: dict[str, Any], sets: dict[str, tuple[Any, str]],
                problems: list[str], prefix: str = "") -> dict[str, Any]:
    """`table` with the `sets` written in at their dotted keys (`prefix`: what the keys
    were given with, as messages name them)."""
    for key, (value, item) in sets.items():
        *parents, last = key.split(".")
        at = table
        for depth, part in enumerate(parents):
            nxt = at.setdefault(part, {})
            if not isinstance(nxt, dict):
                problems.append(f"--set {item}: {prefix}{'.'.join(parents[:depth + 1])} is a "
                                "value, not a table")
                break
            at = nxt
        else:
            at[last] = value
    return table


def _blame_sets(problems: list[str], file: Path, sets: dict[str, tuple[Any, str]],
                prefix: str = "") -> list[str]:
    """Problems at a key a `--set` gave (or under a table it made) blamed on the `--set`."""
    out = []
    for problem in problems:
        for key, (_, item) in sets.items():
            for path in (key, *(key.rsplit(".", n)[0] for n in range(1, key.count(".") + 1))):
                shown = _as_given(path)
                start = f"{file}: {shown}: "
                if problem.startswith(start):
                    problem = f"--set {item}: {prefix}{shown}: {problem[len(start):]}"
                    break
            else:
                continue
            break
        out.append(problem)
    return out


def load_costs(path: Path | str, sets: dict[str, tuple[Any, str]] | None = None) -> CostTable:
    """Load a cost table (ADR-0064) from TOML, with `sets` (keys relative to the table)."""
    path = Path(path)
    problems: list[str] = []
    raw = _apply_sets(read_toml(path), sets or {}, problems, COSTS_PREFIX)
    table = build(CostTable, raw, "", path, problems)
    if problems:
        raise ConfigError(_blame_sets(problems, path, sets or {}, COSTS_PREFIX))
    return replace(table, name=table.name or path.stem, source=path)


def load_topology(path: Path | str, costs: Path | str | None = None,
                  sets: Sequence[str] = ()) -> Topology:
    """Load a topology and the cost table it names (`costs` overrides that), with the
    `--set KEY=VALUE` overrides `sets` (``costs.``-prefixed keys go to the cost table).

    A VALUE of ``xF`` scales the key's value (``hbm.bandwidth=x2``, ``=x0.5``), and a key
    ending in ``.*`` stands for every quantity of that table (``costs.issue.*=x0.5``): both
    are resolved against the configuration the other items give, into plain items (which
    the topology's `overrides` then hold, so a replay of it needs no base to scale).
    The cost-table path in the file is relative to the topology file.
    """
    if any(_relative(item) for item in sets):
        base = load_topology(path, costs, [i for i in sets if not _relative(i)])
        sets = _resolved(base, sets)
    path = Path(path)
    problems: list[str] = []
    parsed = parse_sets(sets)
    topo_sets = {k: v for k, v in parsed.items() if not k.startswith(COSTS_PREFIX)}
    cost_sets = {k[len(COSTS_PREFIX):]: v for k, v in parsed.items()
                 if k.startswith(COSTS_PREFIX)}
    raw = _apply_sets(read_toml(path), topo_sets, problems)
    topo: Topology = build(Topology, raw, "", path, problems)
    if not problems:
        problems.extend(_check_meshes(topo, path))
    problems = _blame_sets(problems, path, topo_sets)
    cost_path = Path(costs) if costs is not None else _cost_path(path, topo.costs)
    if costs is None and topo.costs and not problems and cost_path is None:
        problems.append(f"{path}: costs: no such file {str(path.parent / topo.costs)!r} and no "
                        f"shipped cost table {Path(topo.costs).stem!r} (shipped: "
                        f"{', '.join(p.stem for p in sorted(costs_dir().glob('*.toml')))})")
    if problems:
        raise ConfigError(problems)
    cost_table = load_costs(cost_path, cost_sets)
    return replace(topo, name=topo.name or path.stem, source=path, cost_table=cost_table,
                   overrides=tuple(item for _, item in parsed.values()))


_SCALE = re.compile(r"^x([0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)$")
#: Kinds of key a factor may scale: the quantities (numbers of a unit, or counts).
_SCALABLE = ("count", "cycles", "size", "time", "frequency", "bandwidth", "energy", "power")


def _relative(item: str) -> bool:
    """Whether a `--set` item scales a value (``=x2``) or names a table's keys (``.*=``)."""
    key, _, raw = item.partition("=")
    return key.strip().endswith(".*") or _SCALE.match(raw.strip()) is not None


def _resolved(base: Topology, sets: Sequence[str]) -> list[str]:
    """`sets` with each relative item resolved (`resolve_relative`) in order: a factor
    scales what the items before it set the key to (`hbm.bandwidth=x2` then `=x3` is x6),
    or `base`'s value, the file's with the plain items, if none did."""
    out: list[str] = []
    given: dict[str, str] = {}  # key -> its value as the latest item gave it
    for item in sets:
        for plain in resolve_relative(base, item, given) if _relative(item) else [item]:
            out.append(plain)
            key, _, raw = plain.partition("=")
            given[key.strip()] = raw.strip()
    return out


#: Characters of a factor worth reading (``x0.5``, ``x1e3``).
_LONGEST_FACTOR = 32


def resolve_relative(base: Topology, item: str,
                     given: Mapping[str, str] | None = None) -> list[str]:
    """The plain `--set` items `item` (``KEY=xF``, ``TABLE.*=VALUE``) stands for on `base`;
    a key in `given` (key -> value as an earlier item set it) is scaled from that value."""
    key, _, raw = item.partition("=")
    key, raw = key.strip(), raw.strip()
    scale = _SCALE.match(raw)
    item = _as_given(item)
    try:
        keys = _table_keys(base, key[:-2], item) if key.endswith(".*") else [key]
        if scale is not None:
            for name in keys:
                _node(base, name, item)
    except LookupError:  # an unknown key: the loader names it, with what it may have meant
        return [f"{key}={raw}"]
    if scale is None:
        return [f"{name}={raw}" for name in keys]
    factor = scale.group(1)
    if len(factor) > _LONGEST_FACTOR:
        raise ConfigError([f"--set {item}: a factor of {len(factor):,} characters; a factor "
                           "is a plain number such as x2, x0.5 or x1e3"])
    return [f"{name}={_scaled(base, name, factor, item, (given or {}).get(name))}"
            for name in keys]


def _scaled(base: Topology, name: str, factor: str, item: str, earlier: str | None) -> Any:
    """Key `name` of `base` (or as an earlier item gave it, `earlier`) times `factor`, as a
    `--set` value: a whole number of the key's unit, below 2^62 of it."""
    from kernbench_cli.config.units import LIMIT
    from kernbench_cli.config.writer import exact

    value, kind = _value_of(base, name, item)
    if kind not in _SCALABLE:
        raise ConfigError([f"--set {item}: {name} is not a quantity; only numbers "
                           "and quantities with units scale"])
    if earlier is not None:
        value = _parsed(name, kind, earlier, item)
    try:
        scaled = Decimal(value) * Decimal(factor)
        out_of_range = scaled >= LIMIT
        whole = not out_of_range and scaled == scaled.to_integral_value()
    except ArithmeticError:  # decimal.Overflow: a factor like 1e999999999
        out_of_range, whole = True, False
    if out_of_range:
        raise ConfigError([f"--set {item}: {name} = {exact(kind, value)} x {factor} is out "
                           "of range: it must be below 2^62 of the key's unit"])
    if not whole:
        raise ConfigError([f"--set {item}: {name} = {exact(kind, value)} x "
                           f"{factor} is not a whole number of its unit"])
    return str(int(scaled)) if kind in ("count", "cycles") else exact(kind, int(scaled))


def _parsed(name: str, kind: str, text: str, item: str) -> int:
    """The value an earlier `--set` item gave key `name` (as the loader reads it)."""
    try:
        return KINDS[kind][0](read_set_value(text))
    except ValueError as exc:
        raise ConfigError([f"--set {item}: {name}: the value before it, {clip(text)}: "
                           f"{exc}"]) from None


def _node(base: Topology, dotted: str, item: str) -> tuple[Any, Any]:
    """(the config object or value at `dotted`, its dataclass field) in `base`."""
    obj: Any = base.cost_table if dotted.startswith(COSTS_PREFIX) else base
    parts = dotted[len(COSTS_PREFIX):].split(".") if dotted.startswith(COSTS_PREFIX) \
        else dotted.split(".")
    spec = None
    for part in parts:
        spec = next((f for f in fields(obj) if f.name == part and
                     not f.metadata.get("internal")), None) if is_dataclass(obj) else None
        if spec is None:
            raise LookupError(dotted)
        obj = getattr(obj, part)
    return obj, spec


def _value_of(base: Topology, dotted: str, item: str) -> tuple[Any, str]:
    value, spec = _node(base, dotted, item)
    if "kind" not in spec.metadata:
        raise ConfigError([f"--set {item}: {dotted} is a table; give one of its keys or "
                           f"{dotted}.*"])
    return value, spec.metadata["kind"]


def _table_keys(base: Topology, dotted: str, item: str) -> list[str]:
    """The keys of table `dotted` that hold values (not sub-tables), in declaration order."""
    table, _ = _node(base, dotted, item)
    if not is_dataclass(table):
        raise ConfigError([f"--set {item}: {dotted} is a value, not a table"])
    return [f"{dotted}.{f.name}" for f in fields(table)
            if "kind" in f.metadata and not f.metadata.get("internal")]


def _cost_path(topology_file: Path, costs: str) -> Path | None:
    """The cost table a topology names: a path relative to the topology file (or absolute);
    failing that, a shipped table of that name (``"default"`` or ``"costs/default.toml"``),
    so a shipped topology copied anywhere still loads. No `costs` key: the shipped default."""
    if not costs:
        return costs_dir() / "default.toml"
    beside = topology_file.parent / costs
    if beside.is_file() or (os.path.lexists(beside) and not is_a(beside, "dir")):
        return beside  # a FIFO, a device, a loop of symlinks: reading it says what it is
    shipped = costs_dir() / f"{Path(costs).stem}.toml"
    return shipped if shipped.is_file() and Path(costs).suffix in ("", ".toml") else None


def config_digest(config: Any) -> str:
    """8 hex digits of a hash of a configuration's resolved values (not its name, description,
    file or cost-table path): equal digests, equal configurations. A `late` key (one added
    after digests were published) counts only where it differs from its default, so a
    configuration that leaves it alone keeps the digest it had."""
    def values(obj: Any) -> Any:
        if is_dataclass(obj):
            return tuple((f.name, values(getattr(obj, f.name))) for f in fields(obj)
                         if not f.metadata.get("internal")
                         and f.name not in ("name", "description", "costs")
                         and not (f.metadata.get("late") and getattr(obj, f.name) == (
                             f.default_factory() if f.default is MISSING else f.default)))
        return obj
    return hashlib.sha256(repr(values(config)).encode()).hexdigest()[:8]


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
    hbm = topo.hbm
    if hbm.page_size & (hbm.page_size - 1):  # rows are whole columns of a power of two
        problems.append(f"{path}: hbm.page_size: {hbm.page_size:,} B is not a power of two "
                        "(a DRAM row is 2^n bytes; kernels align per-layer buffers to it)")
    if hbm.refresh_time >= hbm.refresh_interval:
        problems.append(f"{path}: hbm.refresh_time: {hbm.refresh_time:,} ps is not shorter than "
                        f"hbm.refresh_interval ({hbm.refresh_interval:,} ps): the slice would "
                        "never be free")
    elif hbm.bandwidth * (hbm.refresh_interval - hbm.refresh_time) < hbm.refresh_interval:
        # a slice streams at bandwidth x (1 - refresh_time / refresh_interval) B/s, whole
        free = hbm.refresh_interval - hbm.refresh_time
        least = -(-hbm.refresh_interval // free)
        problems.append(f"{path}: hbm.bandwidth: {hbm.bandwidth:,} B/s streams less than 1 B/s "
                        "once refresh takes its share (1 - hbm.refresh_time / "
                        f"hbm.refresh_interval); it needs at least {least:,} B/s")
    return problems
