"""The timing pass's composites: dispatch into free TCM, tile operations in issue order.

`CompositeRuns` is held by `hw.timing.Timing` (`timing.composites`). PE_SCHEDULER
plans a composite's tiles at dispatch (`composite.plan_gemm`) into the TCM
free then and holds the plan's buffers until the composite ends; with no plan
fitting, it holds the composite until running ones free theirs. The tiles run
one operation at a time (`composite.tile_ops`), across a PE's composites in
issue order (ties to the earlier composite), each on PE_DMA or PE_GEMM
(`Tiles`) as its operands or buffers allow.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from heapq import heappush
from typing import TYPE_CHECKING

from kernbench_cli.formats import SIZES, gemm_datapath
from kernbench_cli.formats import nbytes as bytes_of
from kernbench_cli.hw.causes import (
    CAUSE_SHIFT,
    ENGINE,
    ISSUED,
    PE_SHIFT,
    PRODUCER,
    SCHEDULER,
    TCM,
    because,
    by,
)
from kernbench_cli.hw.composite import (
    ACC_BYTES,
    DEQUANT_TILE,
    GEMM_TILE,
    LOAD_TILE,
    Operand,
    TileOp,
    dequantised,
    plan_gemm,
    tile_ops,
    traffic,
)
from kernbench_cli.hw.dma import strided_pages
from kernbench_cli.hw.engine import InOrderEngine, tcm_at
from kernbench_cli.hw.engines import PE_DMA, PE_GEMM, PE_MATH, PE_SCHEDULER
from kernbench_cli.hw.network import Path
from kernbench_cli.hw.oplog import Slice
from kernbench_cli.hw.pe import Pe
from kernbench_cli.hw.process import PENDING, Composites, PeProcess, Running, TimingError
from kernbench_cli.stream import NONE, Composite

if TYPE_CHECKING:
    from kernbench_cli.hw.timing import Timing

#: `because(PRODUCER, ref)` as ``BY_PRODUCER | ref``: a tile operation's `after` is a
#: reference (>= 0), or a why of its own (a cause set: `composite.tile_ops`)
BY_PRODUCER = by(PRODUCER)


class CompositeRuns:
    """The composites' side of timing pass `timing` (see the module)."""

    __slots__ = ("env", "fair", "issue", "leaves", "plan_ps", "program", "routes", "system",
                 "tcm_bytes", "tiles", "timing")

    def __init__(self, timing: Timing):
        self.timing = timing  # its op log and planned bytes
        self.env, self.system, self.program = timing.env, timing.system, timing.program
        self.issue, self.plan_ps, self.tcm_bytes = timing.issue, timing.plan_ps, \
            timing.tcm_bytes
        self.fair, self.leaves, self.routes = timing.fair, timing.leaves, timing.routes
        self.tiles: dict[int, Tiles] = {}  # per PE: how its composites run tiles

    def dispatch(self, proc: PeProcess, pe: Pe, comps: Composites, i: int) -> Iterator[None]:
        """Issue composite `i`: plan its tiles into the TCM free at dispatch, start them.

        With no plan fitting, PE_SCHEDULER holds the composite (and the commands behind
        it) until running composites free their tile buffers.
        """
        pid = pe.pid
        me = pid << PE_SHIFT | i
        stream = self.program.streams[pid]
        cpu, sched, end = pe.cpu, pe.scheduler, proc.end
        t, dispatched = sched.enqueue(cpu, self.issue.composite, self.plan_ps)
        proc.issue[i] = t
        planned = dispatched
        log = self.timing.oplog
        if log is not None and self.plan_ps:
            log.scheduler.append(Slice(pid, dispatched - self.plan_ps, dispatched, "plan", i))
        why = (because(SCHEDULER, sched.last) if dispatched > t + self.plan_ps else
               because(ISSUED, me))
        if stream.arg[i] == NONE:  # never planned: the kernel failed in it
            heappush(sched.held, (dispatched, me))
            end[i] = proc.start[i] = dispatched
            proc.why[i] = why
            return
        desc = self.program.composites[stream.arg[i]]
        yield from self.advance(proc, pe, comps, dispatched)
        tiling, dispatched, why = yield from self._plan(proc, pe, comps, i, desc, dispatched,
                                                        why)
        sched.free_at = max(sched.free_at, dispatched)  # it held the queue's head until now
        if log is not None and dispatched > planned:
            log.scheduler.append(Slice(pid, planned, dispatched, "wait for TCM", i))
        sched.last = me
        heappush(sched.held, (dispatched, me))
        ready, sent = dispatched, why  # what set the dispatch: the first streamed tiles'
        for dep in (stream.a[i], stream.b[i]):
            if dep >= 0:
                if end[dep] == PENDING:
                    yield from self.advance(proc, pe, comps, stop=comps.by_index[dep])
                if end[dep] > ready:
                    ready, why = end[dep], because(PRODUCER, proc.made.get(dep, pid << PE_SHIFT
                                                                         | dep))
        proc.start[i], proc.why[i] = ready, why  # ready to run: where its tiles start from
        array, a, b = _operands(desc)
        out = desc.out_addr if desc.out_addr >= 0 else None
        planned = traffic(tiling, a, b, desc.n, out is not None, desc.out_format)
        self.timing.planned_bytes += planned
        proc.planned += planned
        if a.dequant or b.dequant:
            proc.dequant[i] = dequantised(tiling, a, b, desc.n)
        ops = tile_ops(ready, me, tiling, a, b, desc.n, desc.trans_b, out, desc.out_format,
                       desc.out_row_stride, loads_from=(dispatched, sent))
        routes = self.routes
        private = all(routes.path(pid, addr, into)[1] for addr, into in routes.operand_ends(desc))
        sizes = proc.tile_buffers[i] = [{}, 0]
        running = Running(i, t, dispatched, ops, tiling, private,
                          array,
                          self.leaves[pid][i] if self.leaves else None, sizes)
        used = stream.tcm[i] + comps.buffers(dispatched) + tiling.tcm_bytes
        if used > proc.tcm_peak[0]:
            proc.tcm_peak = (used, dispatched, i)
        end[i] = PENDING
        comps.start(running)
        comps.seq += 1
        issued, first = next(ops)
        heappush(comps.heap, (issued, comps.seq, running, first))

    def _plan(self, proc: PeProcess, pe: Pe, comps: Composites, i: int, desc: Composite,
              dispatched: int, why: int) -> Iterator[None]:
        """Plan composite `i` (`desc`) into the TCM free at `dispatched`, waiting for running
        composites to free tile buffers while no plan fits; returns (the plan, when it was
        made, why then)."""
        gemm, tcm = pe.gemm, self.program.streams[pe.pid].tcm[i]
        while True:
            free = self.tcm_bytes - tcm - comps.buffers(dispatched)
            tiling = plan_gemm(desc.m, desc.k, desc.n, desc.a_format, desc.b_format,
                               desc.out_format, desc.a_tcm, desc.b_tcm, gemm.rows,
                               gemm.cols, gemm.dataflow, free,
                               self.routes.plan_costs(pe.pid, desc), desc.a_row_stride,
                               desc.b_row_stride, desc.trans_b)
            if tiling is not None:
                return tiling, dispatched, why
            release = yield from self._next_release(proc, pe, comps, dispatched)
            if release is None:
                raise TimingError(f"tl.composite: no tile plan for a {desc.m}x{desc.k}x"
                                  f"{desc.n} GEMM fits the {free} B of free TCM", pe.pid, i,
                                  pe.cpu.time)
            dispatched, freer = release
            why = because(TCM, freer)

    def advance(self, proc: PeProcess, pe: Pe, comps: Composites, until: int | None = None,
                stop: Running | None = None, any_end: bool = False) -> Iterator[None]:
        """Run tile operations in issue order across the PE's composites (ties to the
        earlier composite): those issued up to `until` (all, if None); or until `stop`
        ends; or, with `any_end`, until one composite ends."""
        heap, peek = comps.heap, self.env.peek
        tiles = self.tiles.get(proc.pid)
        if tiles is None:
            tiles = self.tiles[proc.pid] = Tiles(self.timing, proc, pe)
        while heap:
            if stop is not None:
                if stop.end != PENDING:
                    return
            elif not any_end and until is not None and heap[0][0] > until:
                return
            issued, seq, running, tile_ops = heap[0]
            if not running.private and not self.fair and issued >= peek():
                proc.wake_at(issued)  # circuit: book shared calendars in issue order
                yield
            tiles.running = running
            done = []
            for op in tile_ops:
                kind = op[0]
                if kind == GEMM_TILE:
                    done.append(tiles.gemm(op))
                elif kind == DEQUANT_TILE:
                    done.append(tiles.dequant(*op[1:]))
                else:
                    got = tiles.move(op)
                    done.append(got if type(got) is tuple else (yield from got))
            # The composite stays at the heap's head while its operations run (nothing else
            # of this PE's runs meanwhile), then gives way to its next ones
            try:
                issued, tile_ops = running.ops.send(done)
                heapq.heapreplace(heap, (issued, seq, running, tile_ops))
            except StopIteration as finished:
                heapq.heappop(heap)
                self._finish(proc, pe, comps, running, *finished.value)
                if any_end:
                    return

    def _next_release(self, proc: PeProcess, pe: Pe, comps: Composites,
                      t: int) -> Iterator[None]:
        """(when, what) the first composite holding tile buffers at `t` ends (running tiles as
        far as it takes to know), what being its last tile operation; None if none holds any."""
        while True:
            holders = comps.holders(t)
            if not holders:
                return None
            ended = [end for end in holders if isinstance(end, tuple)]
            if ended:  # one still running might end before the first known end: run to it
                yield from self.advance(proc, pe, comps, min(ended)[0])
                return min(end for end in comps.holders(t) if isinstance(end, tuple))
            yield from self.advance(proc, pe, comps, any_end=True)

    def _finish(self, proc: PeProcess, pe: Pe, comps: Composites, running: Running,
                done: int, last: int) -> None:
        running.end = proc.end[running.index] = done
        proc.made[running.index] = last
        comps.finish(running, last)
        sizes = proc.tile_buffers.pop(running.index, None)
        if sizes is not None:  # `depth` buffers per streamed operand, two f32 accumulators
            used = running.depth * sum(sizes[0].values()) + 2 * ACC_BYTES * sizes[1]
            if used - running.tcm_bytes > proc.tile_worst[0] - proc.tile_worst[1]:
                proc.tile_worst = (used, running.tcm_bytes, running.index)
        proc.last_end = max(proc.last_end, done)
        log = self.timing.oplog
        if log is not None:
            stream = self.program.streams[pe.pid]
            i = running.index
            desc = self.program.composites[stream.arg[i]]
            tcm_base = self.system.amap.pe_tcm_addr(*pe.coord, 0)
            size = self.timing.tcm_bytes
            src = stream.src[i] if not desc.a_tcm else tcm_at(tcm_base, stream.src[i], size) or 0
            dst = stream.dst[i] if desc.out_addr >= 0 else tcm_at(tcm_base, stream.dst[i], size)
            log.append(pe.pid, PE_SCHEDULER, log.code("composite"), running.issued,
                       running.dispatched, done, stream.size[i], 2 * desc.m * desc.k * desc.n, src,
                       dst, i, True)

    def tcm_room(self, proc: PeProcess, pe: Pe, comps: Composites, tensors: int) -> Iterator[None]:
        """Stall PE_CPU until its tensors (`tensors` bytes) and the running composites' tile
        buffers fit the TCM together."""
        t = pe.cpu.time
        while tensors + comps.buffers(t) > self.tcm_bytes:
            t, proc.tcm_wait = yield from self._next_release(proc, pe, comps, t)
            pe.cpu.wait_until(t)
        used = tensors + comps.buffers(t)
        if used > proc.tcm_peak[0]:
            proc.tcm_peak = (used, t, proc.at)


class Tiles:
    """How PE `pe`'s composites run tile operations; each is recorded in `proc.tiles` (its
    reference: the PE's command count plus its position there). `running` is the
    composite whose operations run."""

    def __init__(self, timing: Timing, proc: PeProcess, pe: Pe):
        self.timing, self.proc, self.pe = timing, proc, pe
        self.routes = timing.routes
        self.base = pe.pid << PE_SHIFT
        log = timing.oplog
        self.codes = (tuple(log.code(k) for k in ("gemm_tile", "load_tile", "store_tile",
                                                  "dequant_tile"))
                      if log is not None else (0, 0, 0, 0))
        self.running: Running | None = None

    def _record(self, engine: InOrderEngine, code: int, ready: int, after: int, start: int,
                end: int) -> int:
        proc = self.proc
        why = because(ENGINE, engine.last) if start > ready else \
            after if after >> CAUSE_SHIFT else BY_PRODUCER | after  # a why: see `tile_ops`
        me = self.base | (proc.n + proc.tiles.append((start, end, why, code,
                                                      self.running.index)))
        engine.last = me
        return me

    def gemm(self, op: TileOp) -> tuple[int, int, int]:
        """A GEMM_TILE `op`: (start, end, reference)."""
        _, ready, after, m, k, n = op
        running = self.running
        start, end = self.pe.gemm.run(ready, m, k, n, running.width)
        sizes = running.sizes
        if m * n > sizes[1]:
            sizes[1] = m * n
        me = self._record(self.pe.gemm, PE_GEMM, ready, after, start, end)
        log = self.timing.oplog
        if log is not None:
            log.append(self.pe.pid, PE_GEMM, self.codes[0], ready, start, end, 0, 2 * m * k * n,
                       None, None, running.index, shape=log.gemm_shape(m, k, n))
        return start, end, me

    def dequant(self, ready: int, after: int, elements: int) -> tuple[int, int, int]:
        """A tile's dequantisation on PE_MATH, once it landed; (start, end, reference)."""
        pe_math, log = self.pe.math, self.timing.oplog
        start, end = pe_math.run(ready, "dequant", elements)
        pe_math.elements += elements
        pe_math.by_class["dequant"] += elements
        me = self._record(pe_math, PE_MATH, ready, after, start, end)
        if log is not None:
            log.append(self.pe.pid, PE_MATH, self.codes[3], ready, start, end, 0, elements, None,
                       None, self.running.index)
        return start, end, me

    def move(self, op: TileOp):
        """A tile load (LOAD_TILE `op`: operand, first row and column, rows, columns) or an
        output tile's store (STORE_TILE: address, rows, row bytes, stride bytes): (start,
        end, reference), or, where it is fair-shared with other PEs' transfers, a generator
        to run for them."""
        inbound = op[0] == LOAD_TILE
        if inbound:
            _, ready, after, operand, r0, c0, rows, cols = op
            size, block = SIZES[operand.code]  # `formats.nbytes`, inlined
            addr = operand.addr + (r0 * operand.row_stride + c0) * size // block
            row_bytes, stride = cols * size // block, operand.row_stride * size // block
            largest = self.running.sizes[0]  # a dequantised tile has its wide copy beside it
            wide = bytes_of(operand.dequant, rows * cols) if operand.dequant else 0
            if rows * row_bytes + wide > largest.get(id(operand), 0):
                largest[id(operand)] = rows * row_bytes + wide
        else:
            _, ready, after, addr, rows, row_bytes, stride = op
        timing, dma = self.timing, self.pe.dma
        route, private = self.routes.path(self.pe.pid, addr, inbound)
        nbytes = rows * row_bytes
        pages = strided_pages(route, addr, rows, row_bytes, stride)
        region = self.running.region
        if region is not None:  # the composite's region
            dma.region = region
        if private or not timing.fair:
            start, end = dma.transfer(ready, nbytes, route, pages)
            return self._moved(inbound, ready, after, start, end, addr, nbytes, route)
        return self._shared(inbound, ready, after, addr, nbytes, route, pages)

    def _shared(self, inbound: bool, ready: int, after: int, addr: int, nbytes: int,
                route: Path, pages: int) -> Iterator[None]:
        start, end = yield from self.routes.flow(self.proc, self.pe.dma, ready, nbytes, route,
                                                  pages)
        return self._moved(inbound, ready, after, start, end, addr, nbytes, route)

    def _moved(self, inbound: bool, ready: int, after: int, start: int, end: int, addr: int,
               nbytes: int, route: Path) -> tuple[int, int, int]:
        proc, dma = self.proc, self.pe.dma
        me = self._record(dma, PE_DMA, ready, after, start, end)
        if dma.waited_on is not None:
            proc.waits[me] = (dma.waited_on, dma.waited)
        log = self.timing.oplog
        if log is not None:
            log.append(self.pe.pid, PE_DMA, self.codes[1 if inbound else 2], ready, start, end,
                       nbytes, 0, addr if inbound else None, None if inbound else addr,
                       self.running.index, False, (dma.stream_at, dma.free_at),
                       log.path(route[0]))
        return start, end, me


def _operands(desc: Composite) -> tuple[int, Operand, Operand]:
    """The GEMM datapath of composite `desc` and its operands as its tiles stream them (an
    operand in memory that the datapath dequantises names that datapath's format)."""
    array, a_dq, b_dq = gemm_datapath(desc.a_format, desc.b_format)
    a = Operand(desc.m, desc.k, desc.a_format, desc.a_tcm, desc.a_addr, desc.a_row_stride,
                array if a_dq and not desc.a_tcm else 0)
    b_shape = (desc.n, desc.k) if desc.trans_b else (desc.k, desc.n)
    b = Operand(*b_shape, desc.b_format, desc.b_tcm, desc.b_addr, desc.b_row_stride,
                array if b_dq and not desc.b_tcm else 0)
    return array, a, b
