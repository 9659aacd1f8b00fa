"""The critical path of a run: the chain of operations that set its latency, and why.

The timing pass records for every operation (a command, or a tile operation
of a composite) when it started and the one constraint that set that start
(`hw.causes.CAUSES`): PE_CPU issuing it, an operand's producer, its engine
busy with an earlier operation, an IPCQ message not yet sent or a ring credit
not yet back; and for PE_CPU, what it waited for (a queue slot, TCM held by
tile buffers, a value, a message). Walking back from whatever ended last,
each step lands on the operation that bound the one after it, so the steps
tile the run from time 0 to its latency with no gap and no overlap:

- an operation running: its engine (a transfer is DMA setup and streaming,
  plus, when it waited for an HBM slice, SRAM port or link, that wait under
  the resource's name);
- PE_CPU issuing a command ("CPU issue");
- PE_SCHEDULER holding a command before dispatch (planning a composite).

`by_engine` sums the steps by where the time went and `by_cause` by what
kind of step it was; each sums to the latency exactly. Were the run's order of
work fixed, shortening anything off the path could not shorten the run, and
shortening something on it would shorten the run by at most as much (another
path may then set the latency). It is not fixed: the in-order engines take
work in the order it reaches them, which the times decide, so a faster engine
can also take a wait off the path (a tile load no longer queued behind a
receive). The what-if figures, half an engine's path time, are estimates.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from operator import itemgetter

from kernbench_cli.hw.causes import (
    CAUSE_SHIFT,
    CREDIT,
    ENGINE,
    ISSUED,
    MESSAGE,
    PE_SHIFT,
    PRODUCER,
    QUEUE,
    SCHEDULER,
    TCM,
)
from kernbench_cli.hw.engine import cycles_to_ps
from kernbench_cli.hw.engines import PE_CPU, PE_DMA, PE_GEMM, PE_MATH, PE_SCHEDULER
from kernbench_cli.hw.process import PENDING
from kernbench_cli.hw.system import System
from kernbench_cli.hw.timing import Timing, issue_costs
from kernbench_cli.stream import (
    COMPOSITE,
    CYCLES,
    DOT,
    KINDS,
    LOAD,
    MATH,
    READ,
    RECV,
    SEND,
    STORE,
    WAIT,
)

#: Engine of a command's own operation, by kind.
_ENGINE_OF = {LOAD: "dma", STORE: "dma", SEND: "dma", DOT: "gemm", MATH: "math",
              COMPOSITE: "scheduler", WAIT: "cpu", RECV: "dma", CYCLES: "cpu", READ: "cpu"}
_TILE_ENGINE = {PE_DMA: "dma", PE_GEMM: "gemm", PE_MATH: "math", PE_CPU: "cpu",
                PE_SCHEDULER: "scheduler"}
_REF_MASK = (1 << PE_SHIFT) - 1
_PID_MASK = (1 << (CAUSE_SHIFT - PE_SHIFT)) - 1


@dataclass(frozen=True)
class Step:
    """One stretch of the critical path: [start_ps, end_ps) spent on `engine`."""

    pid: int
    command: int  # the kernel's command (for a tile operation: its composite)
    line: int  # the kernel line that issued it
    kind: str  # "load", "gemm_tile", "issue load", …
    engine: str  # where the time went: "gemm", "dma", "cpu", "hbm", "noc", …
    cause: str  # "execute", "transfer", "CPU issue", "CPU cycles", "resource wait", "scheduler"
    start_ps: int
    end_ps: int
    resource: str = ""  # for a resource wait: which one


@dataclass
class CriticalPath:
    latency_ps: int
    steps: list[Step] = field(default_factory=list)  # from time 0 to the latency

    def _sum(self, key) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.steps:
            out[key(s)] = out.get(key(s), 0) + s.end_ps - s.start_ps
        return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))

    @property
    def by_engine(self) -> dict[str, int]:
        """Picoseconds of the path per engine or shared resource level; sums to the latency."""
        return self._sum(lambda s: s.engine)

    @property
    def by_cause(self) -> dict[str, int]:
        """Picoseconds of the path per kind of step; sums to the latency."""
        return self._sum(lambda s: s.cause)

    def busiest_pe(self, engine: str) -> int | None:
        """The PE whose `engine` holds the most of the path."""
        per_pe: dict[int, int] = {}
        for s in self.steps:
            if s.engine == engine:
                per_pe[s.pid] = per_pe.get(s.pid, 0) + s.end_ps - s.start_ps
        return min(per_pe, key=lambda p: (-per_pe[p], p)) if per_pe else None

    def resource_waits(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.steps:
            if s.resource:
                out[s.resource] = out.get(s.resource, 0) + s.end_ps - s.start_ps
        return out


class _Walk:
    """The walk back over the records of one timing pass."""

    def __init__(self, system: System, timing: Timing):
        self.system, self.timing = system, timing
        self.procs, self.streams = timing.procs, timing.program.streams
        topo = system.topology
        self.costs = issue_costs(topo.cost_table.issue)
        self.setup = topo.pe.dma.setup
        self.clock = topo.pe.clock
        self.steps: list[Step] = []

    # what an operation is
    def op(self, pid: int, index: int) -> tuple[int, int, int, str, int]:
        """(start, end, why, engine, command) of operation `index` of PE `pid`."""
        proc = self.procs[pid]
        if index < proc.n:
            kind = self.streams[pid].op[index]
            return (proc.start[index], proc.end[index], proc.why[index], _ENGINE_OF[kind], index)
        start, end, why, engine, command = proc.tiles[index - proc.n]
        return start, end, why, _TILE_ENGINE[engine], command

    def kind(self, pid: int, index: int) -> str:
        proc = self.procs[pid]
        if index < proc.n:
            return KINDS[self.streams[pid].op[index]]
        engine = proc.tiles[index - proc.n][3]
        return {PE_GEMM: "gemm_tile", PE_DMA: "transfer_tile",
                PE_MATH: "dequant_tile"}.get(engine, "tile")

    def add(self, pid: int, command: int, kind: str, engine: str, cause: str, start: int,
            end: int, resource: str = "") -> None:
        if end > start:
            line = self.streams[pid].line[command] if command < len(self.streams[pid]) else 0
            self.steps.append(Step(pid, command, line, kind, engine, cause, start, end,
                                   resource))

    # the walk
    def run(self, latency: int) -> list[Step]:
        state = self.last(latency)
        t = latency
        limit = 4 * sum(p.n + len(p.tiles) for p in self.procs) + 16
        while t > 0 and state is not None and limit:
            limit -= 1
            state, t = self.step(state, t)
        if t > 0:  # nothing recorded explains the rest (a bug): keep the sums exact anyway
            self.steps.append(Step(0, 0, 0, "unexplained", "unexplained", "unexplained", 0, t))
        self.steps.reverse()
        return self.steps

    def last(self, latency: int) -> tuple | None:
        """Where the run ends: the operation, or PE_CPU, that finished last."""
        for proc, pe in zip(self.procs, self.system.pes, strict=True):
            for index in range(proc.n - 1, -1, -1):
                if proc.end[index] == latency and self.streams[proc.pid].op[index] != COMPOSITE:
                    return ("end", proc.pid, index)
            for k in range(len(proc.tiles) - 1, -1, -1):
                if proc.tiles[k][1] == latency:
                    return ("end", proc.pid, proc.n + k)
            if proc.n and pe.cpu.time == latency:
                return ("after", proc.pid, proc.n - 1)
        return None

    def step(self, state: tuple, t: int) -> tuple[tuple | None, int]:
        where, pid, index = state
        if where == "end":
            start, end, why, engine, command = self.op(pid, index)
            if end > t and index < self.procs[pid].n and self.streams[pid].op[index] == RECV:
                return self.copy(pid, index, t)
            start = min(start, t)
            self.execute(pid, index, engine, command, start, t)
            return self.follow(pid, index, command, why, start)
        if where == "start":
            start, _, why, _, command = self.op(pid, index)
            start = min(start, t)
            if start < t:  # a composite ready before its tile ran: the scheduler held it
                self.add(pid, command, "dispatch", "scheduler", "scheduler", start, t)
            return self.follow(pid, index, command, why, start)
        if where == "issue":
            return self.issue(pid, index, t)
        return self.after(pid, index, t)

    def copy(self, pid: int, index: int, t: int) -> tuple[tuple | None, int]:
        """Receive `index` at `t`, before it ended: its copy out of a ring slot that ended at
        `t` (a credit it gave back was waited for), else the last to start before `t`
        (PE_DMA's next operation waited for it; with overlapped setup, the one before may
        end after); a chunk copied aside while the receive waited for another sender's."""
        copies = self.procs[pid].copies.get(index) or []
        k = bisect_left(copies, t, key=itemgetter(0)) - 1
        if k < 0:  # before its first copy: the receive as one operation
            start, _, why, _, _ = self.op(pid, index)
            return self.follow(pid, index, index, why, min(start, t))
        if k and copies[k][1] != t and copies[k - 1][1] == t:
            k -= 1
        start, _, why = copies[k]
        self.add(pid, index, "recv copy", "dma", "transfer", start, t)
        return self.follow(pid, index, index, why, start)

    def execute(self, pid: int, index: int, engine: str, command: int, start: int,
                end: int) -> None:
        """An operation's own time: its engine; a transfer's wait under the resource."""
        kind = self.kind(pid, index)
        if engine != "dma":
            cause = "CPU issue" if engine == "cpu" else "execute"
            self.add(pid, command, kind, engine, cause, start, end)
            return
        ref = pid << PE_SHIFT | index
        wait = self.procs[pid].waits.get(ref)
        if wait is None:
            self.add(pid, command, kind, "dma", "transfer", start, end)
            return
        cal, waited = wait
        setup_end = min(start + self.setup, end)
        wait_end = min(setup_end + waited, end)
        self.add(pid, command, kind, "dma", "transfer", wait_end, end)
        self.add(pid, command, kind, cal.level, "resource wait", setup_end, wait_end,
                 f"{cal.level} {cal.name}")
        self.add(pid, command, kind, "dma", "transfer", start, setup_end)

    def follow(self, pid: int, index: int, command: int, why: int, t: int,
               after: bool = False) -> tuple[tuple | None, int]:
        """From `t`, the start of operation `index` (or with `after`, the end of PE_CPU's
        wait after command `index`), to what set it."""
        cause = why >> CAUSE_SHIFT
        ref = why & ((1 << CAUSE_SHIFT) - 1)
        to_pid, to_index = ref >> PE_SHIFT & _PID_MASK, ref & _REF_MASK
        if cause in (ISSUED, SCHEDULER):  # PE_CPU issued it; the scheduler may have held it
            issued = min(self.procs[pid].issue[command], t)
            self.add(pid, command, "dispatch", "scheduler", "scheduler", issued, t)
            return ("issue", pid, command), issued
        if to_index == _REF_MASK:  # points at nothing: the run's start
            return None, t
        if cause == CREDIT:  # back to the copy out of the slot that gave the credit back
            copied = self.procs[pid].credited.get(~index if after else index)
            if copied is not None and copied <= t:
                self.add(pid, command, "IPCQ credit", "ipcq", "IPCQ credit", copied, t)
                return ("end", to_pid, to_index), copied
        if cause in (PRODUCER, ENGINE, MESSAGE, TCM, CREDIT):
            if to_index < self.procs[to_pid].n and \
                    self.streams[to_pid].op[to_index] == COMPOSITE:
                return ("start", to_pid, to_index), t  # its tiles start where it started
            end = self.op(to_pid, to_index)[1]
            moment = min(end, t) if end != PENDING else t
            if moment < t:  # e.g. a credit's way back
                label = "IPCQ credit" if cause == CREDIT else "IPCQ message" \
                    if cause == MESSAGE else "wait"
                self.add(pid, command, label, "ipcq" if cause in (CREDIT, MESSAGE) else "cpu",
                         label, moment, t)
            return ("end", to_pid, to_index), moment
        if cause == QUEUE:  # a slot freed when that operation started on its engine
            return ("start", to_pid, to_index), t
        return None, t

    def issue(self, pid: int, i: int, t: int) -> tuple[tuple | None, int]:
        """PE_CPU at the issue of command `i`: the issue cost, or what it waited for."""
        proc = self.procs[pid]
        cpu = proc.cpu[i]
        if cpu and cpu >> CAUSE_SHIFT == QUEUE:  # it paid its issue, then waited for a slot
            return self.follow(pid, i, i, cpu, t)
        op = self.streams[pid].op[i]
        cost = cycles_to_ps(self.streams[pid].arg[i], self.clock) if op == CYCLES else \
            self.costs[op]
        start = max(t - cost, 0)
        if op == CYCLES:
            self.add(pid, i, "cycles", "cpu", "CPU cycles", start, t)
        else:
            self.add(pid, i, f"issue {KINDS[op]}", "cpu", "CPU issue", start, t)
        if cpu:  # before issuing it waited for TCM
            return self.follow(pid, i, i, cpu, start)
        if i == 0:
            return None, start
        return ("after", pid, i - 1), start

    def after(self, pid: int, i: int, t: int) -> tuple[tuple | None, int]:
        """PE_CPU after command `i`: done issuing it, or waiting for something."""
        waited = self.procs[pid].after.get(i)
        if waited is not None and waited[0] >= t:
            return self.follow(pid, i, i, waited[1], t, after=True)
        return ("issue", pid, i), min(self.procs[pid].issue[i], t)


def critical_path(system: System, timing: Timing) -> CriticalPath:
    """The critical path of the run `timing` timed on `system`."""
    latency = timing.latency_ps
    return CriticalPath(latency, _Walk(system, timing).run(latency))
