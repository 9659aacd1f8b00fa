"""What a golden keeps of a run, and how two of them differ.

A golden is JSON (schema_version 1, sorted keys, two-space indent): the
case, kernel, topology, cost table, parameters and seed; the latency and
every engine's total and largest busy time (and wait, where it waits) in
integer picoseconds with its op count; the number of commands and of op-log
records per kind; the SHA-256 of the op log; the number of data races
between PEs; the verification result with the largest error rounded to
three significant digits; and the energy by part in exact attojoules. No
wall-clock time, no paths.

Every field must match exactly, but one: `max_abs_err` may differ in the last
bit of a float32 `exp` or `log` (numpy picks its SIMD kernels by CPU), and one
f16 rounding the other way doubles it. (GEMM values are accumulated in float64,
so they do not depend on the BLAS's summation order.) Like gem5's verifier with its
volatile fields, `diff` lets it move within a factor of two; whether the
run verified is still compared exactly, and timing never depends on values.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

from kernbench_cli.errors import KernbenchError
from kernbench_cli.fileio import parse_json, read_input
from kernbench_cli.sim.result import RunResult

SCHEMA_VERSION = 1
MAX_GOLDEN_BYTES = 2**26  # a golden is a few KiB


class GoldenError(KernbenchError):
    """A golden file that does not parse or has an unknown schema."""


def oplog_digest(oplog: list[tuple]) -> str:
    """SHA-256 of the op log, one comma-separated line per record."""
    digest = hashlib.sha256()
    for record in oplog:
        digest.update((",".join("" if v is None else str(v) for v in record) + "\n").encode())
    return f"sha256:{digest.hexdigest()}"


def make_record(case: str, result: RunResult) -> dict[str, Any]:
    engines = {name: {"busy_ps_total": sum(s.busy_ps), "busy_ps_max": max(s.busy_ps),
                      "ops": sum(s.ops), "units": s.instances,
                      **({"wait_ps_total": sum(s.wait_ps)} if s.wait_ps else {})}
               for name, s in result.engines.items()}
    err = result.max_abs_err
    return {
        "schema_version": SCHEMA_VERSION,
        "case": case,
        "kernel": result.kernel,
        "topology": result.topology,
        "costs": result.costs,
        "params": result.params,
        "seed": result.seed,
        "latency_ps": result.latency_ps,
        "commands": result.commands,
        "engines": engines,
        "op_counts": dict(sorted(Counter(r[3] for r in result.oplog).items())),
        "oplog_digest": oplog_digest(result.oplog),
        "verified": result.verified,
        "races": len(result.races or []),
        "max_abs_err": None if err is None else float(f"{err:.3g}"),
        "energy_aj": {**{name: aj for name, aj in result.energy.dynamic.items() if aj},
                      "static": result.energy.static, "total": result.energy.total},
    }


def dumps(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, indent=2) + "\n"


def load(path: Path) -> dict[str, Any]:
    """Read a golden; GoldenError names the file and what is wrong with it."""
    try:
        data = parse_json(read_input(path, MAX_GOLDEN_BYTES, "a golden").decode(), str(path))
    except KernbenchError as exc:
        raise GoldenError(str(exc)) from None
    except (ValueError, RecursionError) as exc:
        raise GoldenError(f"{path}: not valid JSON: {str(exc)[:200]}") from None
    except UnicodeDecodeError:
        raise GoldenError(f"{path}: not valid JSON: not UTF-8 text") from None
    if not isinstance(data, dict) or "schema_version" not in data:
        raise GoldenError(f"{path}: not a golden (no schema_version)")
    if type(data["schema_version"]) is not int or data["schema_version"] != SCHEMA_VERSION:
        raise GoldenError(f"{path}: schema_version {data['schema_version']!r} is not one this "
                          f"kernbench reads ({SCHEMA_VERSION})")
    for key, kind in FIELDS.items():
        if key not in data:
            continue
        fields = {key: data[key]}
        if key in OBJECTS:  # an object (of objects) of `kind`
            if not isinstance(data[key], dict):
                raise GoldenError(f"{path}: {key} is {_shown(data[key])}, not an object")
            fields = flatten(data[key], f"{key}.")
        for field, value in fields.items():
            if kind is not None and not _is(value, kind):
                raise GoldenError(f"{path}: {field} is {_shown(value)}, not {kind}")
    return data


#: What each field of a golden holds: `load` refuses a golden where one holds something
#: else (a damaged file, not drift). Those in `OBJECTS` are objects of what they say
#: (`engines` of objects of counts; `params` of anything).
FIELDS = {"case": "a string", "kernel": "a string", "topology": "a string",
          "costs": "a string", "oplog_digest": "a string", "seed": "an integer",
          "latency_ps": "a count", "commands": "a count", "races": "a count",
          "verified": "true, false or null", "max_abs_err": "a number or null",
          "engines": "a count", "op_counts": "a count", "energy_aj": "a count",
          "params": None}
OBJECTS = frozenset({"engines", "op_counts", "energy_aj", "params"})


def _is(value: Any, kind: str) -> bool:
    if kind == "a string":
        return isinstance(value, str)
    if kind == "true, false or null":
        return value is None or isinstance(value, bool)
    if kind == "a number or null":
        return value is None or (type(value) in (int, float) and value >= 0)
    return type(value) is int and (kind == "an integer" or value >= 0)


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def flatten(record: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in record.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{path}."))
        else:
            out[path] = value
    return out


#: Fields compared within a factor of two (see the module docstring).
WITHIN_TWO = frozenset({"max_abs_err"})


def _same(field: str, a: Any, b: Any) -> bool:
    if field in WITHIN_TWO and isinstance(a, int | float) and isinstance(b, int | float):
        return a == b or (a > 0 and b > 0 and max(a, b) <= 2 * min(a, b))
    return a == b


def diff(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[tuple[str, Any, Any]]:
    """(field, old, new) for every field that differs; a missing side is None."""
    a, b = flatten(old or {}), flatten(new or {})
    return [(field, a.get(field), b.get(field)) for field in sorted(set(a) | set(b))
            if (field in a) != (field in b) or not _same(field, a.get(field), b.get(field))]
