"""One PE's walk over its stream in the timing pass: the loop and a step per command kind.

A `Walk` holds what the PE's steps share (its columns, records, engines, route
caches, composites in flight); `Walk.steps` is the generator the PE's SimPy
callbacks resume (`proc.Proc`). It yields only where the PE must wait (see
`hw.timing`): the steps that may wait (transfers, DOTs behind tile
operations, composites, IPCQ) are generators run with `yield from`, the others
plain methods. Besides the times, each step records per command its issue,
its start and why it started then (`proc.why`, see `CAUSES`), and how PE_CPU
got to its issue (`proc.cpu`) or waited after it (`proc.after`): the critical
path walks them.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from heapq import heappush
from typing import TYPE_CHECKING

from kernbench_cli.hw.engine import cycles_to_ps
from kernbench_cli.hw.network import Path
from kernbench_cli.hw.pe import Pe
from kernbench_cli.hw.proc import (
    CPU,
    DMA,
    ENGINE,
    GEMM,
    ISSUED,
    PE_SHIFT,
    PENDING,
    PRODUCER,
    QUEUE,
    SCHEDULER,
    TCM,
    VEC,
    Composites,
    Proc,
    TimingError,
    because,
)
from kernbench_cli.hw.routes import tcm_at, transfer_pages
from kernbench_cli.stream import (
    COMPOSITE,
    CYCLES,
    DOT,
    LOAD,
    MATH,
    READ,
    RECV,
    SEND,
    STORE,
    WAIT,
)

if TYPE_CHECKING:
    from kernbench_cli.hw.timing import Timing


class Walk:
    """PE `pe`'s walk over its stream in timing pass `timing` (see the module)."""

    def __init__(self, timing: Timing, proc: Proc, pe: Pe):
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
        self.shift = timing._region_shift
        self.inbound: dict[int, tuple[Path, bool]] = {}  # this PE's routes, by address region
        self.outbound: dict[int, tuple[Path, bool]] = {}
        self.gemm_ps: dict[int, tuple[int, int]] = {}  # gemm shape -> (duration, MAC passes)
        self.comps = Composites()
        self.made = proc.made  # composite -> its last tile operation (what its result waits for)
        self.base = pid << PE_SHIFT  # this PE's op references: base | command index
        self.landed = (0, -1)  # (when, command) the latest of its stores lands (tl.fence)
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
        heap, advance = comps.heap, self.timing._advance
        pe, n, cpus, issued = self.pe, proc.n, self.cpus, self.issued
        last_end = tcm_peak = 0
        for i in range(n):
            op = ops[i]
            if log is not None:
                self.marks.append(cpu.time)
            if comps:  # composites hold tile buffers: tensors may have to wait for room
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
            if op <= STORE:  # LOAD or STORE
                t, done = yield from self._transfer(i, op == LOAD)
            elif op == MATH:
                t, done = self._math(i)
            elif op == DOT:
                t, done = yield from self._dot(i)
            elif op == COMPOSITE:
                proc.at = i
                yield from self.timing._dispatch(proc, pe, comps, i)
                if sched.stalled_by >= 0:
                    cpus[i] = because(QUEUE, sched.stalled_by)
                continue
            elif op == WAIT:
                t, done = self._wait(i)
            elif op == SEND:
                t, done = yield from self._send(i)
            elif op == RECV:
                t, done = yield from self._recv(i)
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
            log.cpu.extend(self.timing._cpu_slices(proc, self.marks))

    def _room(self, i: int, peak: int) -> Iterator[None]:
        """Before command `i`, with composites holding tile buffers: run the tile operations
        issued by PE_CPU's time, stall PE_CPU until the command's tensors fit beside the
        buffers, and note a TCM high water above `peak` (the walk's, as it last saw it)."""
        proc, comps, col_tcm, timing = self.proc, self.comps, self.col_tcm, self.timing
        proc.at = i
        t = self.cpu.time
        heap = comps.heap
        if heap and heap[0][0] <= t:
            yield from timing._advance(proc, self.pe, comps, t)
        used = col_tcm[i] + comps.buffers(t, prune=True)
        if used > timing.tcm_bytes:
            # Only a command that takes TCM waits for it. Without one, the excess is a plan
            # made (and counted) at issue for a composite the scheduler holds until the
            # buffers before it free: those never coexist.
            if col_tcm[i] > (col_tcm[i - 1] if i else 0):
                yield from timing._tcm_room(proc, self.pe, comps, col_tcm[i])
        elif used > peak:
            proc.tcm_peak = (used, t, i)

    def _ready(self, i: int, t: int, ready: int, both: bool = True) -> tuple[int, int]:
        """(when, why) command `i`, issued at `t` and dispatched at `ready`, has its operands:
        its producer `a` (and `b` too, if `both`) ended."""
        end, made, base = self.end, self.made, self.base
        why = because(SCHEDULER, self.sched.last) if ready > t else because(ISSUED, base | i)
        a = self.col_a[i]
        if a >= 0 and end[a] > ready:
            ready, why = end[a], because(PRODUCER, made.get(a, base | a))
        if both:
            b = self.col_b[i]
            if b >= 0 and end[b] > ready:
                ready, why = end[b], because(PRODUCER, made.get(b, base | b))
        return ready, why

    def _transfer(self, i: int, load: bool) -> Iterator[None]:
        """LOAD `i` (`load`: from memory to TCM) or STORE `i` (its value's producer ended
        first) on PE_DMA; (issue, end)."""
        proc, dma, stream, timing = self.proc, self.pe.dma, self.stream, self.timing
        issue = self.issue
        t, ready = self.sched.enqueue(self.cpu, issue.load if load else issue.store)
        me = self.base | i
        if load:
            addr, routes = stream.src[i], self.inbound
        else:
            addr, routes = stream.dst[i], self.outbound
        shift = self.shift
        hit = routes.get(addr >> shift) if shift < 64 else None
        if hit is None:
            hit = routes[addr >> shift] = timing._path(self.pid, addr, load)
        route, private = hit
        ready, why = self._ready(i, t, ready, both=False) if not load else (ready, None)
        if self.comps.heap:
            proc.at = i
            yield from timing._advance(proc, self.pe, self.comps, ready)
        size = stream.size[i]
        pages = transfer_pages(route, addr, stream.rows[i], size, stream.arg[i])
        if private:
            start, done = dma.transfer(ready, size, route, pages)
        else:
            proc.at = i
            start, done = yield from timing._shared(proc, dma, t, ready, size, route, pages)
        if why is None:  # a load's: it waits for no producer
            why = because(SCHEDULER, self.sched.last) if ready > t else because(ISSUED, me)
        self.whys[i] = because(ENGINE, dma.last) if start > ready else why
        dma.last = me
        if dma.waited_on is not None:
            proc.waits[me] = (dma.waited_on, dma.waited)
        heappush(self.held, (start, me))
        self.starts[i], self.end[i] = start, done
        if not load and done > self.landed[0]:
            self.landed = (done, i)
        log = self.log
        if log is not None:
            src, dst = (addr, tcm_at(self.tcm_base, stream.dst[i])) if load else \
                (tcm_at(self.tcm_base, stream.src[i]), addr)
            log.append(self.pid, DMA, self.codes["load" if load else "store"], t, start, done,
                       size, 0, src, dst, i, True, (dma.stream_at, dma.free_at),
                       log.path(route[0]))
        return t, done

    def _math(self, i: int) -> tuple[int, int]:
        """MATH `i` on PE_MATH, once its operands are ready; (issue, end)."""
        vec, stream, timing = self.pe.math, self.stream, self.timing
        t, ready = self.sched.enqueue(self.cpu, self.issue.math)
        ready, why = self._ready(i, t, ready)
        key = (stream.arg[i], stream.size[i])
        cost = timing._math_ps.get(key)
        if cost is None:  # (issue time, pipeline latency, op class)
            op_class = timing._math[key[0]][0]
            cost = timing._math_ps[key] = (vec.duration_ps(op_class, key[1]),
                                           vec.latency[op_class], op_class)
        start, done = vec.occupy(ready, cost[0])
        done += cost[1]
        me = self.base | i
        self.whys[i] = because(ENGINE, vec.last) if start > ready else why
        vec.last = me
        vec.elements += key[1]
        vec.by_class[cost[2]] += key[1]
        heappush(self.held, (start, me))
        self.starts[i], self.end[i] = start, done
        log = self.log
        if log is not None:
            log.append(self.pid, VEC, timing._math[key[0]][1], t, start, done, 0, key[1], None,
                       tcm_at(self.tcm_base, stream.dst[i]), i, True, (start, done - cost[1]))
        return t, done

    def _dot(self, i: int) -> Iterator[None]:
        """DOT `i` on PE_GEMM, once its operands are ready and the tile operations issued
        before then have run; (issue, end)."""
        gemm, stream, timing = self.pe.gemm, self.stream, self.timing
        t, ready = self.sched.enqueue(self.cpu, self.issue.dot)
        ready, why = self._ready(i, t, ready)
        if self.comps.heap:
            self.proc.at = i
            yield from timing._advance(self.proc, self.pe, self.comps, ready)
        shape, shapes = stream.arg[i], timing.program.gemm_shapes
        cost = self.gemm_ps.get(shape)
        if cost is None:  # (duration on this PE's array, MACs x array passes)
            cost = self.gemm_ps[shape] = (gemm.duration_ps(*shapes[shape]),
                                          gemm.mac_passes_of(*shapes[shape]))
        start, done = gemm.occupy(ready, cost[0])
        me = self.base | i
        self.whys[i] = because(ENGINE, gemm.last) if start > ready else why
        gemm.last = me
        gemm.flops += stream.size[i]  # a DOT's size is its flops, 2·m·k·n
        gemm.mac_passes += cost[1]
        heappush(self.held, (start, me))
        self.starts[i], self.end[i] = start, done
        log = self.log
        if log is not None:
            log.append(self.pid, GEMM, self.codes["dot"], t, start, done, 0, stream.size[i],
                       tcm_at(self.tcm_base, stream.src[i]), tcm_at(self.tcm_base,
                                                                    stream.dst[i]), i, True,
                       shape=log.gemm_shape(*shapes[shape][:3]))
        return t, done

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
            self.log.append(self.pid, CPU, self.codes["wait"], t, t, cpu.time, 0, 0, None,
                            None, i)
        return t, cpu.time

    def _send(self, i: int) -> Iterator[None]:
        """SEND `i`, its data ready once its producer ended (`Messages._send`); (issue, end)."""
        t, ready = self.sched.enqueue(self.cpu, self.issue.send)
        if t >= self.timing.env.peek():
            self.proc.at = i
            self.proc.wake_at(t)
            yield
        ready, why = self._ready(i, t, ready, both=False)
        return t, (yield from self.timing._send(self.proc, self.pe, self.comps, i, t, ready,
                                                why))

    def _recv(self, i: int) -> Iterator[None]:
        """RECV `i` (`Messages._recv`); (issue, end)."""
        t = self.cpu.issue(self.issue.recv)
        if t >= self.timing.env.peek():
            self.proc.at = i
            self.proc.wake_at(t)
            yield
        done = self.end[i] = yield from self.timing._recv(self.proc, self.pe, self.comps, i, t)
        return t, done

    def _cycles(self, i: int) -> int:
        """CYCLES `i`: PE_CPU busy for that many cycles; its end."""
        cpu = self.cpu
        t0 = cpu.time
        cpu.issue(cycles_to_ps(self.stream.arg[i], self.timing.clock_hz))
        self.starts[i], self.whys[i] = t0, because(ISSUED, self.base | i)
        if self.log is not None:
            self.log.append(self.pid, CPU, self.codes["cycles"], t0, t0, cpu.time, 0, 0, None,
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
