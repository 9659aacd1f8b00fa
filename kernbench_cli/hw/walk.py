"""One PE's walk over its stream in the timing pass: the loop and a step per command kind.

A `Walk` holds what the PE's steps share (its columns, records, engines, route
caches, composites in flight); `Walk.steps` is the generator the PE's SimPy
callbacks resume (`proc.Proc`). It yields only where the PE must wait (see
`hw.timing`). The steps of the many small commands (LOAD/STORE, MATH, DOT) are
closures made once per PE, plain calls that hand back a generator only where
they must wait (tile operations to run first, a path other PEs book); the
rarer steps that may wait (composites, IPCQ) are generators, the others plain
methods. Besides the times, each step records per command its issue,
its start and why it started then (`proc.why`, see `CAUSES`), and how PE_CPU
got to its issue (`proc.cpu`) or waited after it (`proc.after`): the critical
path walks them.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator
from heapq import heappush
from typing import TYPE_CHECKING

from kernbench_cli.hw.engine import cycles_to_ps
from kernbench_cli.hw.gemm import gemm_work
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
    by,
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
        heap, advance = comps.heap, self.timing._advance
        pe, n, cpus, issued = self.pe, proc.n, self.cpus, self.issued
        transfer, math, dot = self._transfer_step(), self._math_step(), self._dot_step()
        send, recv = self.timing._send, self.timing._recv
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
                yield from self.timing._dispatch(proc, pe, comps, i)
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

    def _transfer_step(self) -> Callable:
        """The step of a LOAD `i` (`load`: memory to TCM) or a STORE `i` (its value's
        producer ended first) on PE_DMA: ``step(i, load)`` returns (issue, end), or, where
        it must wait first (tile operations issued before it, a path other PEs book), a
        generator to run for what it waited for, to book with ``step(i, load, waited)``.
        Made once per PE, what it uses bound (it runs per command, the pass's hot loop; the
        two functions refer to no one that refers to them: no cycle for the collector)."""
        proc, pe, dma, stream, timing, comps = self.proc, self.pe, self.pe.dma, self.stream, \
            self.timing, self.comps
        enqueue, cpu, sched = self.sched.enqueue, self.cpu, self.sched
        c_load, c_store = self.issue.load, self.issue.store
        src, dst, col_a, size, rows, arg = stream.src, stream.dst, stream.a, stream.size, \
            stream.rows, stream.arg
        end, starts, whys, held, made, base = self.end, self.starts, self.whys, self.held, \
            self.made, self.base
        path, shift, log, heap = timing._path, self.shift, self.log, comps.heap
        inbound, outbound, leaf = self.inbound, self.outbound, self.leaf

        def waits(i, load, t, ready, why, addr, route, private, pages):
            proc.at = i
            if heap:
                yield from timing._advance(proc, pe, comps, ready)
            if leaf is not None:  # after the tile operations, which set their own
                dma.region = leaf[i]
            if private:
                start, done = dma.transfer(ready, size[i], route, pages)
            else:
                start, done = yield from timing._shared(proc, dma, t, ready, size[i], route,
                                                        pages)
            return t, ready, why, addr, route, start, done

        def step(i, load, waited=None):  # `waited`: what `waits` returned
            if waited is None:
                t, ready = enqueue(cpu, c_load if load else c_store)
                if load:
                    addr, routes = src[i], inbound
                else:
                    addr, routes = dst[i], outbound
                hit = routes.get(addr >> shift) if shift < 64 else None
                if hit is None:
                    hit = routes[addr >> shift] = path(proc.pid, addr, load)
                route, private = hit
                why = None
                if not load:
                    a = col_a[i]
                    if end[a] > ready:
                        ready, why = end[a], BY_PRODUCER | made.get(a, base | a)
                pages = transfer_pages(route, addr, rows[i], size[i], arg[i])
                if heap or not private:
                    return waits(i, load, t, ready, why, addr, route, private, pages)
                if leaf is not None:
                    dma.region = leaf[i]
                start, done = dma.transfer(ready, size[i], route, pages)
            else:
                t, ready, why, addr, route, start, done = waited
            me = base | i
            whys[i] = (because(ENGINE, dma.last) if start > ready else why if why is not None
                       else because(SCHEDULER, sched.last) if ready > t else BY_ISSUE | me)
            dma.last = me
            if dma.waited_on is not None:
                proc.waits[me] = (dma.waited_on, dma.waited)
            heappush(held, (start, me))
            starts[i], end[i] = start, done
            if not load and done > self.landed[0]:
                self.landed = (done, i)
            if log is not None:
                tcm = tcm_at(self.tcm_base, dst[i] if load else src[i])
                log.append(proc.pid, DMA, self.codes["load" if load else "store"], t, start,
                           done, size[i], 0, addr if load else tcm, tcm if load else addr, i,
                           True, (dma.stream_at, dma.free_at), log.path(route[0]))
            return t, done

        return step

    def _math_step(self) -> Callable:
        """The step of a MATH `i` on PE_MATH, once its operands are ready: ``step(i)``
        returns (issue, end). Made once per PE (see `_transfer_step`)."""
        vec, stream, timing, sched, cpu = self.pe.math, self.stream, self.timing, self.sched, \
            self.cpu
        enqueue, cost, col_a, col_b, size, arg = sched.enqueue, self.issue.math, stream.a, \
            stream.b, stream.size, stream.arg
        end, starts, whys, held, made, base = self.end, self.starts, self.whys, self.held, \
            self.made, self.base
        math_ps, log, pid = timing._math_ps, self.log, self.pid

        def step(i):
            t, ready = enqueue(cpu, cost)
            queued, after = ready > t, -1  # what it waits for: the scheduler, a producer
            a, b = col_a[i], col_b[i]
            if a >= 0 and end[a] > ready:
                ready, after = end[a], a
            if b >= 0 and end[b] > ready:
                ready, after = end[b], b
            key = (arg[i], size[i])
            costs = math_ps.get(key)
            if costs is None:  # (issue time, pipeline latency, op class)
                op_class = timing._math[key[0]][0]
                costs = math_ps[key] = (vec.duration_ps(op_class, key[1]),
                                        vec.latency[op_class], op_class)
            start, done = vec.occupy(ready, costs[0])
            done += costs[1]
            me = base | i
            whys[i] = (because(ENGINE, vec.last) if start > ready else
                       BY_PRODUCER | made.get(after, base | after) if after >= 0 else
                       because(SCHEDULER, sched.last) if queued else BY_ISSUE | me)
            vec.last = me
            vec.elements += key[1]
            vec.by_class[costs[2]] += key[1]
            heappush(held, (start, me))
            starts[i], end[i] = start, done
            if log is not None:
                log.append(pid, VEC, timing._math[key[0]][1], t, start, done, 0, key[1], None,
                           tcm_at(self.tcm_base, stream.dst[i]), i, True,
                           (start, done - costs[1]))
            return t, done

        return step

    def _dot_step(self) -> Callable:
        """The step of a DOT `i` on PE_GEMM, once its operands are ready and the tile
        operations issued before then have run: ``step(i)`` returns (issue, end), or, where
        tile operations must run first, a generator to run for them, to book with
        ``step(i, waited)``. Made once per PE (see `_transfer_step`)."""
        proc, pe, gemm, stream, timing, comps = self.proc, self.pe, self.pe.gemm, self.stream, \
            self.timing, self.comps
        sched, cpu, cost, col_a, col_b = self.sched, self.cpu, self.issue.dot, stream.a, stream.b
        enqueue, size, arg = sched.enqueue, stream.size, stream.arg
        end, starts, whys, held, made, base = self.end, self.starts, self.whys, self.held, \
            self.made, self.base
        shapes, gemm_ps, log, heap = timing.program.gemm_shapes, self.gemm_ps, self.log, \
            comps.heap

        def waits(i, t, ready, why):
            proc.at = i
            yield from timing._advance(proc, pe, comps, ready)
            return t, ready, why

        def step(i, waited=None):  # `waited`: what `waits` returned
            if waited is None:
                t, ready = enqueue(cpu, cost)
                why = because(SCHEDULER, sched.last) if ready > t else because(ISSUED, base | i)
                a, b = col_a[i], col_b[i]
                if end[a] > ready:
                    ready, why = end[a], because(PRODUCER, made.get(a, base | a))
                if end[b] > ready:
                    ready, why = end[b], because(PRODUCER, made.get(b, base | b))
                if heap:
                    return waits(i, t, ready, why)
            else:
                t, ready, why = waited
            shape = arg[i]
            costs = gemm_ps.get(shape)
            if costs is None:  # (duration on this PE's array, what it counts for energy)
                costs = gemm_ps[shape] = (gemm.duration_ps(*shapes[shape]),
                                          gemm_work(gemm.config, *shapes[shape]))
            start, done = gemm.occupy(ready, costs[0])
            me = base | i
            whys[i] = because(ENGINE, gemm.last) if start > ready else why
            gemm.last = me
            gemm.count(size[i], costs[1])  # a DOT's size is its flops, 2·m·k·n
            heappush(held, (start, me))
            starts[i], end[i] = start, done
            if log is not None:
                log.append(proc.pid, GEMM, self.codes["dot"], t, start, done, 0, size[i],
                           tcm_at(self.tcm_base, stream.src[i]),
                           tcm_at(self.tcm_base, stream.dst[i]), i, True,
                           shape=log.gemm_shape(*shapes[shape][:3]))
            return t, done

        return step

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
