"""A run's timeline in the Trace Event format (ui.perfetto.dev, chrome://tracing).

Processes and tracks:

- one process per PE, with a track per engine, each showing only what that
  engine did, one slice at a time:
  - ``CPU``: issuing each command (``issue load``, ``cycles``) and every wait
    (``stall: queue full``, ``wait for TCM``, ``wait``, ``recv``, ``read``,
    ``wait for IPCQ credit``);
  - ``scheduler``: planning composites (``plan``) and holding one whose
    tiles do not fit the free TCM (``wait for TCM``); a counter
    ``scheduler queue`` of the commands holding queue slots;
  - ``DMA``: each transfer while it holds the engine, setup to its last byte
    leaving (a wait for a busy HBM slice, SRAM port or link included, args
    ``wait_ns``); ``GEMM`` and ``MATH``: each command or tile operation (a GEMM's
    args ``m``, ``k``, ``n``: the DOT's or the tile's shape, M x K by K x N);
  - async tracks: ``queued`` (a command from its issue to its engine taking
    it), ``in flight`` (a transfer's bytes from leaving to arriving: the
    path latency) and ``composite`` (a composite from issue to its last tile);
- ``shared resources``: a track per HBM slice, SRAM port and link a transfer
  used, a slice per transfer while it streams over it;
- ``IPCQ rings``: a counter per ring used, its slots whose credit is out
  (from a sender taking it to its return);
- flow arrows along the critical path, from each of its steps to the next.

Times are whole nanoseconds, floored from the model's picoseconds (the op log
and JSON keep picoseconds); floor keeps slices that do not overlap in
picoseconds from overlapping here. Slices carry the command's kernel line.
Keys are sorted, so equal runs give equal files.
"""

from __future__ import annotations

import bisect
import itertools
import json
from typing import Any

from kernbench_cli.address.physaddr import AddressMap
from kernbench_cli.errors import AddressError
from kernbench_cli.hw.engines import ENGINES
from kernbench_cli.hw.oplog import OpLog
from kernbench_cli.report.trace_filter import TraceFilter
from kernbench_cli.sim.result import RunResult


def kernel_line(result: RunResult, pid: int, command: int) -> int:
    """The kernel line that issued command `command` of PE `pid` (0: not known, as in a
    result without lines)."""
    lines = result.lines[pid] if pid < len(result.lines) else ()
    return lines[command] if 0 <= command < len(lines) else 0


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


def _us(ns: int) -> float:
    """Trace time (microseconds) of `ns` nanoseconds: exact to the nanosecond when read back."""
    return ns / 1000


class _Builder:
    def __init__(self, result: RunResult, amap: AddressMap, keep: TraceFilter | None = None):
        self.result, self.amap = result, amap
        self.keep = keep or TraceFilter()
        self.events: list[dict[str, Any]] = []
        self.slices: dict[tuple[int, int], list[tuple[int, int]]] = {}  # track -> (ns, ns)
        self.async_id = 0
        self.cache: dict[int, str] = {}

    def line(self, pid: int, command: int) -> int:
        return kernel_line(self.result, pid, command)

    def meta(self, pid: int, tid: int | None, name: str, sort: int) -> None:
        if tid is None:
            self.events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                                "args": {"name": name}})
            self.events.append({"ph": "M", "name": "process_sort_index", "pid": pid,
                                "tid": 0, "args": {"sort_index": sort}})
        else:
            self.events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                                "args": {"name": name}})
            self.events.append({"ph": "M", "name": "thread_sort_index", "pid": pid,
                                "tid": tid, "args": {"sort_index": sort}})

    def slice(self, pid: int, tid: int, name: str, start_ps: int, end_ps: int,
              args: dict[str, Any], cat: str) -> None:
        if not self.keep.overlaps(start_ps, end_ps):
            return
        start, end = start_ps // 1000, end_ps // 1000
        self.events.append({"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid,
                            "ts": _us(start), "dur": _us(end - start), "args": args})
        self.slices.setdefault((pid, tid), []).append((start, end))

    def span(self, pid: int, name: str, start_ps: int, end_ps: int,
             args: dict[str, Any], cat: str | None = None) -> None:
        """An async slice of process `pid` (its own row in the `cat` group, `name` by
        default)."""
        if not self.keep.overlaps(start_ps, end_ps):
            return
        self.async_id += 1
        common = {"cat": cat or name, "name": name, "pid": pid, "tid": 0,
                  "id": self.async_id}
        self.events.append({**common, "ph": "b", "ts": _us(start_ps // 1000), "args": args})
        self.events.append({**common, "ph": "e", "ts": _us(end_ps // 1000)})

    def counter(self, pid: int, name: str, key: str, changes: list[tuple[int, int]]) -> None:
        """A counter track from (time in ps, +n/-n) changes: its value at each time it moves
        (in the window: from its start, with the value then)."""
        value, last = 0, None
        points: list[tuple[int, int]] = [(0, 0)]
        for t, delta in sorted(changes):
            value += delta
            ns = t // 1000
            if points[-1][0] == ns:
                points[-1] = (ns, value)
            else:
                points.append((ns, value))
        keep = self.keep
        if keep.start_ps or keep.end_ps is not None:
            first, end = keep.start_ps // 1000, keep.end_ps
            before = [v for ns, v in points if ns <= first]
            points = [(first, before[-1])] + [(ns, v) for ns, v in points if ns > first and (
                end is None or ns <= end // 1000)]
        for ns, value in points:
            if value != last:
                self.events.append({"ph": "C", "name": name, "pid": pid, "tid": 0,
                                    "ts": _us(ns), "args": {key: value}})
                last = value

    # ------------------------------------------------------------------ the parts

    def pes(self, log: OpLog) -> None:
        result, kept = self.result, self.keep.pe
        for pid, label in enumerate(result.pe_labels):
            if not kept(pid):
                continue
            self.meta(pid, None, f"PE {pid} ({label})", pid)
            for tid, engine in enumerate(ENGINES):
                self.meta(pid, tid, engine, tid)  # a track per engine, by its name
        cpu, sched = ENGINES.index("cpu"), ENGINES.index("scheduler")
        for tid, slices in ((cpu, log.cpu), (sched, log.scheduler)):
            for s in slices:
                if kept(s.pid):
                    self.slice(s.pid, tid, s.name, s.start_ps, s.end_ps,
                               {"line": self.line(s.pid, s.command)}, ENGINES[tid])
        queue: dict[int, list[tuple[int, int]]] = {}
        dma_free: dict[int, int] = {}  # per PE: when its DMA's last transfer stopped streaming
        streams, amap, cache = log.streams, self.amap, self.cache
        for seq, pid, engine, kind, issue, start, end, nbytes, flops, src, dst in log:
            if not kept(pid):
                continue
            line = self.line(pid, log.command[seq])
            if log.queued[seq]:
                queue.setdefault(pid, []).extend(((issue, 1), (start, -1)))
                if start > issue:
                    self.span(pid, "queued", issue, start, {"kind": kind, "line": line})
            if engine == "cpu":  # PE_CPU's time is in `log.cpu`
                continue
            args = {"line": line, "bytes": nbytes, "flops": flops,
                    "src": decoded(amap, src, cache), "dst": decoded(amap, dst, cache)}
            if engine == "scheduler":  # a composite: its life, not scheduler time
                self.span(pid, "composite", issue, end, args)
                continue
            held_until = streams[2 * seq + 1]
            if end > held_until:  # a transfer's latency, PE_MATH's pipeline
                self.span(pid, "in flight", held_until, end, {"kind": kind, "line": line})
            if engine == "gemm":  # a DOT's or a composite tile's shape
                args["m"], args["k"], args["n"] = log.shapes[log.shape[seq]]
            if engine == "dma":
                args["wait_ns"] = (streams[2 * seq] - start) // 1000
                # a setup that overlapped the transfer before shows from that one's end
                args["setup_from_ns"] = start // 1000
                start = max(start, dma_free.get(pid, 0))
                dma_free[pid] = held_until
            self.slice(pid, ENGINES.index(engine), kind, start, held_until, args, engine)
        for pid in sorted(queue):
            self.counter(pid, "scheduler queue", "commands", queue[pid])
        for pid, path, start, end in result.region_spans:  # tl.region stretches
            if self.keep.pe(pid):
                self.span(pid, path, start, end, {"region": path}, cat="region")

    def resources(self, log: OpLog, pid: int) -> dict[str, int]:
        """The shared-resources process `pid`: a track per resource a kept transfer used;
        their tids by name."""
        keep, streams = self.keep, log.streams
        kept = [(seq, pe, kind, nbytes) for seq, pe, _, kind, _, _, _, nbytes, _, _, _ in log
                if log.via[seq] >= 0 and keep.pe(pe)
                and keep.overlaps(streams[2 * seq], streams[2 * seq + 1])]
        names = sorted({name for seq, *_ in kept for name in log.paths[log.via[seq]]})
        tids = {name: tid for tid, name in enumerate(names)}
        if not names:
            return tids
        self.meta(pid, None, "shared resources", pid)
        for name, tid in tids.items():
            self.meta(pid, tid, name, tid)
        for seq, pe, kind, nbytes in kept:
            via = log.via[seq]
            at, until = streams[2 * seq], streams[2 * seq + 1]
            args = {"pe": pe, "bytes": nbytes, "line": self.line(pe, log.command[seq])}
            for name in log.paths[via]:
                self.slice(pid, tids[name], kind, at, until, args, "resource")
        return tids

    def rings(self, log: OpLog, pid: int) -> None:
        """The IPCQ rings process `pid`: a counter per ring of a kept PE (named "PE (its
        coordinates) direction ring")."""
        index = {label: n for n, label in enumerate(self.result.pe_labels)}
        names = [name for name in sorted(log.rings)
                 if self.keep.pe(index.get(name[name.find("(") + 1:name.find(")")], -1))]
        if not names:
            return
        self.meta(pid, None, "IPCQ rings", pid)
        for name in names:
            self.counter(pid, name, "slots", log.rings[name])

    def flows(self, resources: dict[str, int], resource_pid: int) -> None:
        """Arrows from each step of the critical path to the next, each end inside a slice of
        the step's track (steps with no slice there, e.g. a credit's way back, are skipped)."""
        path = self.result.critical_path
        if path is None:
            return
        points = []
        for step in path.steps:
            if step.engine in ENGINES:
                track = (step.pid, ENGINES.index(step.engine))
            elif step.resource in resources:
                track = (resource_pid, resources[step.resource])
            else:
                continue
            point = self._inside(track, step.start_ps // 1000, step.end_ps // 1000)
            if point is not None and (not points or points[-1] != (track, point)):
                points.append((track, point))
        for n, ((a, at), (b, bt)) in enumerate(itertools.pairwise(points)):
            common = {"cat": "critical path", "name": "critical path", "id": n + 1}
            self.events.append({**common, "ph": "s", "pid": a[0], "tid": a[1], "ts": _us(at)})
            self.events.append({**common, "ph": "f", "bp": "e", "pid": b[0], "tid": b[1],
                                "ts": _us(bt)})

    def _inside(self, track: tuple[int, int], start: int, end: int) -> int | None:
        """A time in [start, end] inside a slice of `track` (strictly inside if it can be)."""
        slices = self.slices.get(track)
        if not slices:
            return None
        i = bisect.bisect_right(slices, (end, end)) - 1  # the last slice starting by `end`
        while i >= 0 and slices[i][1] >= start:  # (a track's slices do not overlap)
            s0, s1 = slices[i]
            lo, hi = max(s0, start), min(s1, end)
            if lo <= hi:
                return min(max((lo + hi) // 2, s0 + 1), s1 - 1) if s1 - s0 >= 2 else s0
            i -= 1
        return None

    def build(self) -> dict[str, Any]:
        result, log = self.result, self.result.oplog
        self.pes(log)
        shared = result.num_pes
        resources = self.resources(log, shared)
        self.rings(log, shared + 1)
        for track in self.slices.values():
            track.sort()
        self.flows(resources, shared)
        return {"displayTimeUnit": "ns", "traceEvents": self.events,
                "otherData": {"kernel": result.kernel, "topology": result.topology,
                              "latency_ps": result.latency_ps, **self.keep.to_dict()}}


def chrome_trace(result: RunResult, amap: AddressMap,
                 keep: TraceFilter | None = None) -> dict[str, Any]:
    """The Trace Event object of `result` (run with an op log), of what `keep` keeps (by
    default, everything)."""
    return _Builder(result, amap, keep).build()


def dumps(trace: dict[str, Any]) -> str:
    return json.dumps(trace, sort_keys=True, separators=(",", ":"))
