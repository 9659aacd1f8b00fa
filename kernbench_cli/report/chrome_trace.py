"""The op log as a Chrome trace (chrome://tracing, ui.perfetto.dev).

One process per PE, one thread per engine, one complete event ("X") per op
log record: name = the command kind, time in microseconds (picosecond
precision), args = bytes, flops, and the decoded source and destination.
Keys are sorted, so equal runs give equal files.
"""

from __future__ import annotations

import json
from typing import Any

from kernbench_cli.address.physaddr import AddressMap
from kernbench_cli.errors import AddressError
from kernbench_cli.hw.timing import OP_FIELDS
from kernbench_cli.sim.result import RunResult

ENGINE_ORDER = ("cpu", "scheduler", "dma", "gemm", "math")


def decoded(amap: AddressMap, addr: int | None, cache: dict[int, str]) -> str | None:
    """The human form of `addr` (None stays None), memoised in `cache`."""
    if addr is None:
        return None
    text = cache.get(addr)
    if text is None:
        try:
            text = amap.decode(addr).text
        except AddressError:
            text = f"{addr:#x}"
        cache[addr] = text
    return text


def chrome_trace(result: RunResult, amap: AddressMap) -> dict[str, Any]:
    events: list[dict[str, Any]] = []
    for pid, label in enumerate(result.pe_labels):
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                       "args": {"name": f"PE {pid} ({label})"}})
        for tid, engine in enumerate(ENGINE_ORDER):
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                           "args": {"name": engine}})
    cache: dict[int, str] = {}
    for record in result.oplog:
        op = dict(zip(OP_FIELDS, record, strict=True))
        args = {"bytes": op["bytes"], "flops": op["flops"], "issue_ps": op["issue_ps"],
                "src": decoded(amap, op["src"], cache), "dst": decoded(amap, op["dst"], cache)}
        events.append({"ph": "X", "name": op["kind"], "cat": op["engine"], "pid": op["pid"],
                       "tid": ENGINE_ORDER.index(op["engine"]), "ts": op["start_ps"] / 1e6,
                       "dur": (op["end_ps"] - op["start_ps"]) / 1e6, "args": args})
    return {"displayTimeUnit": "ns", "traceEvents": events,
            "otherData": {"kernel": result.kernel, "topology": result.topology,
                          "latency_ps": result.latency_ps}}


def dumps(trace: dict[str, Any]) -> str:
    return json.dumps(trace, sort_keys=True, separators=(",", ":"))
