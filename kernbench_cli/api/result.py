"""What `kb.run` and `kb.replay` return: a frozen `Result`, the `run --json` object with typed
fields.

A `Result` is built from the `run --json` object (`report.run.to_json`), which stays its one
source of truth: `to_dict()` gives that object back exactly (a fresh copy each time, keys no
field below names included), and every field is read from it, under the JSON key's own name
(`latency_ps`, `engines["gemm"].busy_ps`, `critical_path.by_engine`). A result of `kb.run` or
`kb.replay` also carries the live objects behind it (`raw`, `address_map`): the op log, the
trace `kb.replay` can re-time, the inputs and outputs. One rebuilt from a dict (a sweep's
point, a file) has none of them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from kernbench_cli.errors import (
    ArgumentError,
    KernbenchError,
    RaceError,
    VerificationError,
    clip,
)
from kernbench_cli.fileio import parse_json

#: What the one maker of each result class passes it (`Result.from_dict`,
#: `SweepResult.from_rows`, `kb.compare`): one made otherwise, as `dataclasses.replace`
#: makes a copy with other fields, would report fields its `to_dict()` does not.
MADE = object()


def sealed(result: Any, maker: str) -> None:
    """`result`'s `__post_init__`: `ArgumentError` unless its maker made it. The token is
    then dropped, so that a copy made from its fields is refused."""
    if result._made is not MADE:
        raise ArgumentError(f"a {type(result).__name__} is read-only and made by {maker}: a "
                            "copy with other fields (dataclasses.replace) would disagree "
                            "with its to_dict(); change the dict and make it again")
    object.__setattr__(result, "_made", None)


class ReadOnly(Mapping):
    """A read-only view of a dict (as `types.MappingProxyType`) that pickles and
    deep-copies as one: a result's `params`, `engines` or `metrics` go to another process,
    or into a copy, as a result does."""

    __slots__ = ("_data",)

    def __init__(self, data: dict):
        self._data = data

    def __getitem__(self, key: Any) -> Any:
        return self._data[key]

    def __iter__(self):
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: Any) -> bool:
        return key in self._data

    def __repr__(self) -> str:
        return repr(self._data)

    def __reduce__(self) -> tuple:
        return ReadOnly, (dict(self._data),)

    # hashable as the frozen results that hold it are (as a `frozenset` of its items; a
    # Mapping equals another of the same items, dict or not, so a dict's items hash alike)
    def __hash__(self) -> int:
        return hash(frozenset(self._data.items()))

    # a changed copy, as `MappingProxyType` gives: a dict (`prev.params | {"rows": 16}`)
    def copy(self) -> dict:
        return dict(self._data)

    def __or__(self, other: Any) -> dict:
        return {**self._data, **other} if isinstance(other, Mapping) else NotImplemented

    def __ror__(self, other: Any) -> dict:
        return {**other, **self._data} if isinstance(other, Mapping) else NotImplemented


def frozen(value: Any) -> Any:
    """JSON data made read-only: objects as `ReadOnly` mappings, arrays as tuples."""
    if isinstance(value, dict):
        return ReadOnly({k: frozen(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(frozen(v) for v in value)
    return value


def _rebuilt(text: str, race_lines: tuple[str, ...]) -> Result:
    """The `Result` a pickle or a deep copy holds (`Result.__reduce__`)."""
    return Result.from_dict(json.loads(text), race_lines=race_lines)


def _build(cls: type, data: Mapping[str, Any], **extra: Any) -> Any:
    """A `cls` from the JSON object `data`: each field from the key of its name (read-only)."""
    names = {f.name for f in fields(cls)}
    return cls(**{k: frozen(v) for k, v in data.items() if k in names}, **extra)


@dataclass(frozen=True)
class Engine:
    """One row of the engine table: a per-PE engine (`cpu`, `scheduler`, `dma`, `gemm`,
    `math`) or a shared level (`ipcq`, `hbm`, `noc`, …) over its `instances` units. Times are
    integer picoseconds, means over the units unless named min or max; `utilization` is the
    mean busy time over the latency."""

    name: str
    instances: int
    ops: int
    busy_ps: int
    busy_min_ps: int
    busy_max_ps: int
    wait_ps: int
    idle_ps: int
    utilization: float
    utilization_max: float

    @property
    def busy_ns(self) -> float:
        return self.busy_ps / 1000


@dataclass(frozen=True)
class Check:
    """One entry of `checks`: an output's verification (`kind` "verification": its dtype,
    largest error, tolerances; its `detail` what it could not measure, or how an argmax is
    checked) or a physical invariant (`kind` "invariant": its detail).
    `max_abs_err` is None where the error is not a finite number."""

    kind: str
    name: str
    passed: bool
    dtype: str | None = None
    max_abs_err: float | None = None
    atol: float | None = None
    rtol: float | None = None
    detail: str | None = None


@dataclass(frozen=True)
class Bound:
    """What bounds the run: `engine`, the one holding the largest share (`path_share`) of the
    critical path, or None (`by` is then "latency"); the busiest unit's engine and its
    utilisation beside it."""

    by: str
    engine: str | None
    path_share: float
    busiest_engine: str | None
    utilization: float


#: `CriticalPath.what_if_2x_faster_saves_ps`'s name in results of kernbench 0.2.0 and before
_WAS_WHAT_IF = "what_if_2x_faster_saves_at_most_ps"


@dataclass(frozen=True)
class CriticalPath:
    """The critical path summed by engine and by cause (picoseconds; each sums to the
    latency), the waits on named resources, its number of steps, and for the top two
    engines about how much sooner the run could end were they twice as fast (half their
    time on the path: an estimate, not a bound; `kb.sensitivity` measures)."""

    by_engine: Mapping[str, int]
    by_cause: Mapping[str, int]
    resource_waits: Mapping[str, int]
    steps: int
    what_if_2x_faster_saves_ps: Mapping[str, int]

    @property
    def what_if_2x_faster_saves_at_most_ps(self) -> Mapping[str, int]:
        """`what_if_2x_faster_saves_ps` under its name of 0.2.0 (deprecated: the figure is
        an estimate, not a bound)."""
        return self.what_if_2x_faster_saves_ps


@dataclass(frozen=True)
class TcmHighWater:
    """The PE whose TCM held the most: how many bytes, when, at which kernel line, of how
    many."""

    pe: str
    bytes: int
    time_ps: int
    line: int
    tcm_bytes: int


@dataclass(frozen=True)
class Energy:
    """The run's energy in pJ (`sim.energy`: each count x its `[energy]` entry, plus static
    power x the latency): `total` = `dynamic` + `static`, `static` = `static_pe` +
    `static_cube`, and the dynamic energy of each part the run used (`parts`)."""

    total: float
    dynamic: float
    static: float
    static_pe: float
    static_cube: float
    parts: Mapping[str, float]


@dataclass(frozen=True)
class Result:
    """One run or replay, as `kernbench run --json` reports it (docs/running.md, "The
    `--json` object"): the fields are its keys, typed and read-only; `to_dict()` is the
    object itself.

    `races` and `per_pe` are None unless asked for (`races=True`, `per_pe=True`), as their
    keys are absent from the JSON then; `race_lines` are the races as the CLI prints them.
    """

    kernel: str
    params: Mapping[str, Any]
    seed: int
    timing_only: bool
    topology: str
    costs: str
    topology_digest: str
    costs_digest: str
    overrides: tuple[str, ...]
    pes: int
    latency_ps: int
    verified: bool | None
    max_abs_err: float | None
    checks: tuple[Check, ...]
    commands: int
    engines: Mapping[str, Engine]
    bound: Bound
    gemm_mac_utilization: float
    gemm_array_utilization: float
    hbm_gbps: float
    hbm_peak_gbps: float
    bounds_ps: Mapping[str, int]
    metrics: Mapping[str, float]
    #: the largest of `bounds_ps` (its name, ps) and the latency over it (None: the kernel
    #: states no bound, or, for the gap, a bound of 0 ps)
    lower_bound: str | None = None
    lower_bound_ps: int | None = None
    bound_gap: float | None = None
    #: per parameter naming a file the kernel read (a model's config.json), its digest:
    #: which file made the result (absent from results before it: empty)
    file_digests: Mapping[str, str] = field(default_factory=lambda: ReadOnly({}))
    #: the kernbench that ran it (the model is in its code, not only the topology and cost
    #: table: a result of another version may time the same files otherwise; empty in
    #: results before it was kept)
    kernbench_version: str = ""
    #: the digest of the kernel file as loaded (8 hex digits; a replay's, as the recorded
    #: run loaded it; empty where unknown: results and traces before it)
    kernel_digest: str = ""
    #: a replay's: the topology its streams were recorded on (`topology`, its
    #: `topology_digest` when the trace kept it, `pes`); empty for a run
    recorded_on: Mapping[str, Any] = field(default_factory=lambda: ReadOnly({}))
    energy_pj: Energy | None = None
    average_power_w: float | None = None
    critical_path: CriticalPath | None = None
    tcm_high_water: TcmHighWater | None = None
    races: tuple[Mapping[str, Any], ...] | None = None
    regions: tuple[Mapping[str, Any], ...] | None = None
    per_pe: tuple[Mapping[str, Any], ...] | None = None
    race_lines: tuple[str, ...] = ()
    #: the simulator's own result (`sim.result.RunResult`: op log, trace, inputs, outputs)
    #: and the compiled topology it ran on; None for a result rebuilt from a dict
    raw: Any = field(default=None, repr=False, compare=False)
    address_map: Any = field(default=None, repr=False, compare=False)
    _json: str = field(default="{}", repr=False)
    _made: Any = field(default=None, repr=False, compare=False)  # `sealed`

    def __post_init__(self) -> None:
        sealed(self, "Result.from_dict(data)")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, raw: Any = None, address_map: Any = None,
                  race_lines: tuple[str, ...] = ()) -> Result:
        """The result a `run --json` object (or a sweep row's `result`) describes;
        `ArgumentError` naming the key if `data` is not one (a key missing or of another
        type)."""
        if isinstance(race_lines, str) or not isinstance(race_lines, tuple | list) or not all(
                isinstance(line, str) for line in race_lines):
            raise ArgumentError(f"Result.from_dict: race_lines={clip(race_lines)}: expected "
                                "a tuple of lines (str)")
        # key order kept: engines as the report lists them, the path's by the time spent
        data, text = json_copy(data, "Result.from_dict")
        path = data.get("critical_path")
        if isinstance(path, dict) and _WAS_WHAT_IF in path and "what_if_2x_faster_saves_ps" \
                not in path:  # the figure's name before it was called an estimate
            path["what_if_2x_faster_saves_ps"] = path.pop(_WAS_WHAT_IF)
            text = json.dumps(data)
        check_fields(cls, data, "")
        problem = _inconsistent(data)
        if problem is not None:
            raise ArgumentError(f"Result.from_dict: {problem}")
        if "latency_ns" in data and data["latency_ns"] != data["latency_ps"] / 1000:
            data["latency_ns"] = data["latency_ps"] / 1000  # derived: a changed latency_ps
            text = json.dumps(data)  # carries it (the field and `to_dict()` agree)
        parts = {
            "checks": tuple(_build(Check, c) for c in data["checks"]),
            "engines": ReadOnly({name: _build(Engine, row, name=name)
                                         for name, row in data["engines"].items()}),
            "bound": _build(Bound, data["bound"]),
            "critical_path": _build(CriticalPath, data["critical_path"])
            if "critical_path" in data else None,
            "tcm_high_water": _build(TcmHighWater, data["tcm_high_water"])
            if "tcm_high_water" in data else None,
            "energy_pj": _build(Energy, data["energy_pj"]) if "energy_pj" in data else None,
        }
        plain = {f.name for f in fields(cls)} - parts.keys()
        return cls(**{k: frozen(v) for k, v in data.items() if k in plain}, **parts,
                   race_lines=tuple(race_lines), raw=raw, address_map=address_map, _json=text,
                   _made=MADE)

    def __reduce__(self) -> tuple:
        """Pickled (across processes) and deep-copied as its `run --json` object: the copy is
        `Result.from_dict(to_dict())`, without the live `raw` and `address_map` (a copy
        module's `copy` keeps them: the result is read-only, so it is its own copy)."""
        return _rebuilt, (self._json, self.race_lines)

    def __copy__(self) -> Result:
        return self

    def __repr__(self) -> str:
        bound = self.bound.engine or self.bound.by
        return (f"Result(kernel={self.kernel!r}, topology={self.topology!r}, "
                f"overrides={self.overrides!r}, latency_ps={self.latency_ps}, "
                f"verified={self.verified}, bound={bound!r})")

    def to_dict(self) -> dict[str, Any]:
        """The `run --json` object of this result (a fresh copy: changing it changes nothing
        here)."""
        return json.loads(self._json)

    @property
    def latency_ns(self) -> float:
        return self.latency_ps / 1000

    @property
    def inputs(self) -> Mapping[str, Any]:
        """The kernel's input arrays by name (empty for a replay or a rebuilt result)."""
        return ReadOnly(self.raw.inputs if self.raw is not None else {})

    @property
    def outputs(self) -> Mapping[str, Any]:
        """The kernel's output arrays by name (empty when timing only, for a replay or a
        rebuilt result)."""
        return ReadOnly(self.raw.outputs if self.raw is not None else {})

    def check(self) -> None:
        """Raise what the CLI reports after the tables: `RaceError` if races were found,
        `VerificationError` if an output failed verification; nothing otherwise."""
        if self.race_lines:
            raise RaceError(list(self.race_lines))
        if self.verified is False:
            checks = self.raw.checks if self.raw is not None else [
                c for c in self.checks if c.kind == "verification"]
            raise VerificationError(verification_failure(self.kernel, checks))

    def tables(self) -> dict[str, list[dict[str, Any]]]:
        """The result as tables of records (lists of dicts), the rows of `to_pandas()`:
        `summary` (one row), `engines`, `checks`, `critical_path` (by engine and by cause,
        with each share of the latency), `bounds` and, when asked for, `per_pe`."""
        from kernbench_cli.api import tables

        return tables.result_tables(self)

    def to_pandas(self) -> dict[str, Any]:
        """`tables()` as pandas DataFrames, by the same names. Needs pandas, which kernbench
        does not install (`PandasMissing`, an ImportError, says so)."""
        from kernbench_cli.api import tables

        return tables.result_frames(self)


#: The JSON type each annotation of the result classes takes (None allowed where it says
#: `| None`); a class name is an object of its own fields, checked in turn.
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,), "int": (int,), "float": (int, float), "bool": (bool,)}
_PARTS: dict[str, type] = {}  # class name -> class, of the result's parts (filled below)


#: keys a `run --json` object leaves out when a run has none (never null)
_LEFT_OUT = ("energy_pj", "average_power_w", "critical_path", "tcm_high_water", "races",
             "regions", "per_pe")


def _inconsistent(data: dict[str, Any]) -> str | None:
    """What in `data` (of the fields' types) no `run --json` object says: another schema,
    a negative time or count, a file digest of no parameter, a `recorded_on` of another
    shape, a `verified` that disagrees with the checks, a key it leaves out given as null.
    None if nothing."""
    from kernbench_cli.report.run import schema_problem

    problem = schema_problem(data)
    if problem is not None:
        return problem
    if data["latency_ps"] < 0:  # as `kernbench compare` refuses it in a file
        return f"latency_ps {data['latency_ps']} is not a time"
    for key in ("pes", "commands"):
        if data[key] < 0:
            return f"{key} {data[key]} is not a count"
    stray = sorted(set(data.get("file_digests", {})) - set(data["params"]))
    if stray:
        return f"file_digests names {clip(stray[0])}, which is not one of the params"
    was = data.get("recorded_on", {})
    digest = was.get("topology_digest", "0" * 8)
    if was and not (set(was) <= {"topology", "topology_digest", "pes"}
                    and isinstance(was.get("topology"), str) and was["topology"]
                    and isinstance(digest, str) and len(digest) == 8
                    and all(c in "0123456789abcdef" for c in digest)
                    and type(was.get("pes")) is int and was["pes"] > 0):
        return ("recorded_on is not a replay's recorded topology (topology: a name, pes: a "
                "count, topology_digest: 8 hex digits)")
    null = next((key for key in _LEFT_OUT if key in data and data[key] is None), None)
    if null is not None:
        return f"{null} is null: a `run --json` object leaves it out when a run has none"
    failed = [c["name"] for c in data["checks"] if c["kind"] == "verification"
              and not c["passed"]]
    if data["verified"] is not None and data["verified"] != (not failed):
        return "verified is false, but no verification check failed" if not failed else \
            f"verified is true, but the verification of {failed[0]} failed"
    return None


def json_copy(data: Any, who: str) -> tuple[dict[str, Any], str]:
    """A private copy of `data` in JSON's types, with numbers a `--json` file can hold (no
    NaN or Infinity), and its JSON text; ArgumentError (`who`: the caller) if it is not a
    dict of JSON data."""
    if not isinstance(data, Mapping):
        raise ArgumentError(f"{who}: data={clip(data)}: expected {_WHO[who]} (a dict), got "
                            f"{type(data).__name__}")
    try:
        text = json.dumps(data)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ArgumentError(f"{who}: not JSON data ({exc})") from None
    try:
        return parse_json(text, who), text
    except KernbenchError as exc:
        raise ArgumentError(str(exc)) from None


#: what each `from_dict` reads, by its name (for its messages)
_WHO = {"Result.from_dict": "a `run --json` object",
        "Bounds.from_dict": "a `run --bounds-only --json` object"}


def check_fields(cls: type, data: Any, where: str, who: str = "Result.from_dict") -> None:
    """ArgumentError (`who`: the caller, in its message) unless `data` is an object with
    each field `cls` requires, of its type (a part, such as `Bound` or a `Check`, checked
    field by field in turn)."""
    if not isinstance(data, dict):
        raise ArgumentError(f"{who}: {where or 'data'}: expected an object, got {clip(data)}")
    for f in fields(cls):
        if f.name.startswith("_") or f.name in ("raw", "address_map", "race_lines") or (
                cls is Engine and f.name == "name"):  # an engine's name is its key
            continue
        key = f"{where}.{f.name}" if where else f.name
        if f.name not in data:
            if f.default is MISSING and f.default_factory is MISSING:
                raise ArgumentError(f"{who}: no key {key}: not {_WHO[who]}")
            continue
        _check_value(str(f.type), data[f.name], key, who)


def _check_value(annotation: str, value: Any, key: str, who: str) -> None:
    """`value` against one field's `annotation` (as written in the class)."""
    kind = annotation.replace(" | None", "")
    if (value is None and kind != annotation) or kind == "Any":  # a bool parameter too
        return
    outer, _, inner = kind.partition("[")
    args = _arguments(inner.removesuffix("]"))
    if outer == "tuple":
        ok = isinstance(value, list)
        items = list(enumerate(value)) if ok else []
        item = args[0]
    elif outer == "Mapping":
        ok = isinstance(value, dict)
        items = list(value.items()) if ok else []
        item = args[1]
    else:
        types = _JSON_TYPES.get(kind)
        if types is None:  # a part: an object of its own fields
            check_fields(_PARTS[kind], value, key, who)
            return
        ok = isinstance(value, types) and (bool in types or not isinstance(value, bool))
        items = []
    if not ok:
        raise ArgumentError(f"{who}: {key}: expected {kind}, got {clip(value)}")
    for index, part in items:
        if item in _PARTS:
            check_fields(_PARTS[item], part, f"{key}[{index!r}]", who)
        else:
            _check_value(item, part, f"{key}[{index!r}]", who)


def _arguments(inner: str) -> list[str]:
    """The type arguments of an annotation's brackets, split at its top-level commas."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            out.append(inner[start:i].strip())
            start = i + 1
    return [*out, inner[start:].strip()]


def verification_failure(kernel: str, checks) -> str:
    """The message of a failed verification of `kernel`'s outputs: each failing output,
    its error and tolerance (an error that is not a number, None in the JSON, shows as
    nan)."""
    def err(value: float | None) -> float:
        return float("nan") if value is None else value

    return f"{kernel}: verification failed: " + "; ".join(
        f"{c.name} max |err| {err(c.max_abs_err):.3g} exceeds atol {c.atol:g} + rtol {c.rtol:g}"
        for c in checks if not c.passed)


_PARTS.update({c.__name__: c for c in (Engine, Check, Bound, CriticalPath, TcmHighWater,
                                        Energy)})
