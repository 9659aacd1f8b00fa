"""Trace files: `kernbench run --record FILE` writes one, `kernbench replay FILE` reads it.

A trace is gzip-compressed JSON: a header (format, version, kernel,
parameters, seed, topology by name and file), the host's
allocations (address, bytes, name), and per PE the `tl` calls of its kernel
(see `lang.trace`). It holds no values and no costs: a replay re-times the
same commands under any cost table.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from typing import Any

from kernbench_cli.errors import KernbenchError
from kernbench_cli.fileio import atomic_write

FORMAT = "kernbench-trace"
VERSION = 1


class TraceError(KernbenchError):
    """A trace file that cannot be read, or does not fit the topology asked for."""


def write_trace(path: Path, trace: dict[str, Any]) -> None:
    """Write `trace` atomically: the whole file or none."""
    data = json.dumps({"format": FORMAT, "version": VERSION, **trace}, sort_keys=True,
                      separators=(",", ":")).encode()

    def write(raw) -> None:
        with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as out:
            out.write(data)

    atomic_write(path, write, "--record")


def read_trace(path: Path) -> dict[str, Any]:
    """Read and check a trace file; TraceError names what is wrong."""
    try:
        with gzip.open(path, "rb") as handle:
            data = json.loads(handle.read())
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TraceError(f"{path}: not a kernbench trace ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise TraceError(f"{path}: not a kernbench trace (no format {FORMAT!r})")
    if data.get("version") != VERSION:
        raise TraceError(f"{path}: trace version {data.get('version')!r} is not one this "
                         f"kernbench reads ({VERSION})")
    for key in ("kernel", "params", "topology", "memory", "pes"):
        if key not in data:
            raise TraceError(f"{path}: trace has no {key!r}")
    return data
