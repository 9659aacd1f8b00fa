"""One PE's walk over its stream in the timing pass: the loop and a step per command kind.

A `Walk` holds what the PE's steps share (its columns, records, engines, route
caches, composites in flight); `Walk.steps` is the generator the PE's SimPy
callbacks resume (`process.PeProcess`). It yields only where the PE must wait (see
`hw.timing`). Each engine's module owns the step of its many small commands:
`dma.transfer_step` (LOAD, STORE), `pe_math.math_step` (MATH) and
`gemm.dot_step` (DOT), closures made once per PE over the walk's state, plain
calls that hand back a generator only where they must wait (tile operations
to run first, a path other PEs book). The rarer steps that may wait are the
timing pass's parts' generators (composites: `timing.composites`, IPCQ:
`timing.ipcq`); PE_CPU's own (WAIT, CYCLES, READ) are methods here. Besides
the times, each step records per command its issue, its start and why it
started then (`proc.why`, see `hw.causes`), and how PE_CPU got to its issue
(`proc.cpu`) or waited after it (`proc.after`): the critical path walks them.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from typing import TYPE_CHECKING

from kernbench_cli.hw.causes import (
    ISSUED,
    PE_SHIFT,
    PRODUCER,
    QUEUE,
    TCM,
    because,
    by,
)
from kernbench_cli.hw.dma import transfer_step
from kernbench_cli.hw.engine import cycles_to_ps, tcm_at
from kernbench_cli.hw.engines import PE_CPU
from kernbench_cli.hw.gemm import dot_step
from kernbench_cli.hw.network import Path
from kernbench_cli.hw.pe import Pe
from kernbench_cli.hw.pe_math import math_step
from kernbench_cli.hw.process import PENDING, Composites, PeProcess, TimingError
from kernbench_cli.stream import (
    COMPOSITE,
    CYCLES,
    DOT,
    LOAD,
    MATH,
    READ,
    RECV,
    SEND,
    WAIT,
)

if TYPE_CHECKING:
    from kernbench_cli.hw.timing import Timing

#: `because(ISSUED, ref)` and `because(PRODUCER, ref)` as ``BY_… | ref`` for a known `ref`
#: (>= 0), in the per-command steps
BY_ISSUE, BY_PRODUCER = by(ISSUED), by(PRODUCER)


class Walk:
    """PE `pe`'s walk over its stream in timing pass `timing` (see the module)."""

    __slots__ = ("base", "codes", "col_a", "col_b", "col_tcm", "comps", "cpu", "cpus", "end",
                 "gemm_ps", "held", "inbound", "issue", "issued", "landed", "leaf", "log",
                 "made", "marks", "outbound", "pe", "pid", "proc", "sched", "shift", "starts",
                 "stream", "tcm_base", "timing", "whys")

    def __init__(self, timing: Timing, proc: PeProcess, pe: Pe):
        self.timing, self.proc, self.pe = timing, proc, pe
        self.pid = pid = pe.pid
        self.stream = stream = timing.program.streams[pid]
        self.col_a, self.col_b, self.col_tcm = stream.a, stream.b, stream.tcm
        n = proc.n = len(stream.op)
        zeros = bytes(8 * n)
        self.end = proc.end = array("q", zeros)  # per command: when its result is ready
        self.starts = proc.start = array("q", zeros)
        self.issued = proc.issue = array("q", zeros)
        self.whys = proc.why = array("q", zeros)
        self.cpus = proc.cpu = array("q", zeros)
        self.cpu, self.sched = pe.cpu, pe.scheduler
        self.held = pe.scheduler.held  # `hold(t)` is heappush(held, t), inlined
        self.issue = timing.issue
        self.shift = timing.routes.region_shift
        self.inbound: dict[int, tuple[Path, bool]] = {}  # this PE's routes, by address region
        self.outbound: dict[int, tuple[Path, bool]] = {}
        #: gemm shape -> (duration, its `gemm_work`)
        self.gemm_ps: dict[int, tuple[int, tuple[str, int]]] = {}
        self.comps = Composites()
        self.made = proc.made  # composite -> its last tile operation (what its result waits for)
        self.base = pid << PE_SHIFT  # this PE's op references: base | command index
        self.landed = (0, -1)  # (when, command) the latest of its stores lands (tl.fence)
        self.leaf = timing.leaves[pid] if timing.leaves else None  # each command's region
        self.log = log = timing.oplog
        if log is not None:
            self.tcm_base = timing.system.amap.pe_tcm_addr(*pe.coord, 0)
            self.codes = {k: log.code(k) for k in ("load", "store", "dot", "wait", "cycles")}
            self.marks = array("q")  # PE_CPU's time per command: on reaching it, before issue

    def steps(self) -> Iterator[None]:
        """Time the stream; yields (after arranging to be resumed) where it must wait."""
        proc, cpu, sched, comps, log = self.proc, self.cpu, self.sched, self.comps, self.log
        ops, col_a, col_b, col_tcm, end = self.stream.op, self.col_a, self.col_b, self.col_tcm, \
            self.end
        heap, advance = comps.heap, self.timing.composites.advance
        pe, n, cpus, issued = self.pe, proc.n, self.cpus, self.issued
        transfer, math, dot = transfer_step(self), math_step(self), dot_step(self)
        send, recv = self.timing.ipcq.send, self.timing.ipcq.recv
        last_end = tcm_peak = 0
        for i in range(n):
            op = ops[i]
            if log is not None:
                self.marks.append(cpu.time)
            if comps.pending or comps.held:  # composites hold tile buffers (`comps` is true):
                # tensors may have to wait for room
                yield from self._room(i, tcm_peak)
                tcm_peak = proc.tcm_peak[0]
            elif col_tcm[i] > tcm_peak:  # the TCM high water, tensors alone
                tcm_peak = col_tcm[i]
                proc.tcm_peak = (tcm_peak, cpu.time, i)
            if heap:  # a command waiting for a composite's result runs its tiles to the end
                a, b = col_a[i], col_b[i]
                if a >= 0 and end[a] == PENDING:
                    proc.at = i
                    yield from advance(proc, pe, comps, stop=comps.by_index[a])
                if b >= 0 and end[b] == PENDING:
                    proc.at = i
                    yield from advance(proc, pe, comps, stop=comps.by_index[b])
            if log is not None:
                self.marks.append(cpu.time)
            if proc.tcm_wait >= 0:  # PE_CPU waited for TCM before this command
                cpus[i], proc.tcm_wait = because(TCM, proc.tcm_wait), -1
            if op <= DOT:  # LOAD, STORE or DOT
                got = transfer(i, op == LOAD) if op != DOT else dot(i)
                if type(got) is not tuple:  # it must wait first: wait, then book it
                    waited = yield from got
                    got = transfer(i, op == LOAD, waited) if op != DOT else dot(i, waited)
                t, done = got
            elif op == MATH:
                t, done = math(i)
            elif op == COMPOSITE:
                proc.at = i
                yield from self.timing.composites.dispatch(proc, pe, comps, i)
                if sched.stalled_by >= 0:
                    cpus[i] = because(QUEUE, sched.stalled_by)
                continue
            elif op == WAIT:
                t, done = self._wait(i)
            elif op == SEND:
                t, done = yield from send(proc, pe, comps, i)
            elif op == RECV:
                t, done = yield from recv(proc, pe, comps, i)
            elif op == CYCLES:
                t = done = self._cycles(i)
            elif op == READ:
                self._read(i)
                continue
            else:
                raise TimingError(f"unknown command kind {op}", self.pid, i, cpu.time)
            issued[i] = t
            if sched.stalled_by >= 0 and op not in (WAIT, RECV, CYCLES):
                cpus[i] = because(QUEUE, sched.stalled_by)
            if done > last_end:
                last_end = done
        proc.at = n - 1
        yield from advance(proc, pe, comps, None)  # the composites still running
        proc.last_end = max(proc.last_end, last_end)
        if log is not None:
            self.marks.append(cpu.time)
            log.cpu.extend(self.timing.cpu_slices(proc, self.marks))

    def tcm(self, offset: int) -> int | None:
        """The address of a TCM offset in the stream on this PE (op log only)."""
        return tcm_at(self.tcm_base, offset, self.timing.tcm_bytes)

    def _room(self, i: int, peak: int) -> Iterator[None]:
        """Before command `i`, with composites holding tile buffers: run the tile operations
        issued by PE_CPU's time, stall PE_CPU until the command's tensors fit beside the
        buffers, and note a TCM high water above `peak` (the walk's, as it last saw it)."""
        proc, comps, col_tcm, timing = self.proc, self.comps, self.col_tcm, self.timing
        proc.at = i
        t = self.cpu.time
        heap = comps.heap
        if heap and heap[0][0] <= t:
            yield from timing.composites.advance(proc, self.pe, comps, t)
        used = col_tcm[i] + comps.buffers(t, prune=True)
        if used > timing.tcm_bytes:
            # Only a command that takes TCM waits for it. Without one, the excess is a plan
            # made (and counted) at issue for a composite the scheduler holds until the
            # buffers before it free: those never coexist.
            if col_tcm[i] > (col_tcm[i - 1] if i else 0):
                yield from timing.composites.tcm_room(proc, self.pe, comps, col_tcm[i])
        elif used > peak:
            proc.tcm_peak = (used, t, i)

    def _wait(self, i: int) -> tuple[int, int]:
        """WAIT `i` on a composite, or (tl.fence) on every store before it; (issue, end)."""
        cpu = self.cpu
        t = cpu.issue(self.issue.wait)
        a = self.col_a[i]
        until, a = (self.end[a], a) if a >= 0 else self.landed
        if until > t:
            self.proc.after[i] = (until, because(PRODUCER, self.made.get(a, self.base | a)))
        cpu.wait_until(until)
        self.starts[i], self.whys[i] = t, because(ISSUED, self.base | i)
        if self.log is not None:
            self.log.append(self.pid, PE_CPU, self.codes["wait"], t, t, cpu.time, 0, 0, None,
                            None, i)
        return t, cpu.time

    def _cycles(self, i: int) -> int:
        """CYCLES `i`: PE_CPU busy for that many cycles; its end."""
        cpu = self.cpu
        t0 = cpu.time
        cpu.issue(cycles_to_ps(self.stream.arg[i], self.timing.clock_hz))
        self.starts[i], self.whys[i] = t0, because(ISSUED, self.base | i)
        if self.log is not None:
            self.log.append(self.pid, PE_CPU, self.codes["cycles"], t0, t0, cpu.time, 0, 0, None,
                            None, i)
        return cpu.time

    def _read(self, i: int) -> None:
        """READ `i`: PE_CPU waits for the value the kernel reads (no issue cost)."""
        a, cpu, end = self.col_a[i], self.cpu, self.end
        t = cpu.time
        if end[a] > t:
            self.proc.after[i] = (end[a], because(PRODUCER, self.made.get(a, self.base | a)))
        cpu.wait_until(end[a])
        self.issued[i] = self.starts[i] = t
        self.whys[i] = because(ISSUED, self.base | i)
