"""PE_DMA: moves bytes between memories over the shared network; its step in the walk."""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappush
from typing import TYPE_CHECKING

from kernbench_cli.config.schema import DmaConfig
from kernbench_cli.hw.causes import ENGINE, ISSUED, PRODUCER, SCHEDULER, because, by
from kernbench_cli.hw.engine import InOrderEngine
from kernbench_cli.hw.engines import PE_DMA
from kernbench_cli.hw.network import Calendar, Path, book, pages_opened, transfer_ps

if TYPE_CHECKING:
    from kernbench_cli.hw.walk import Walk

#: `because(ISSUED, ref)` and `because(PRODUCER, ref)` as ``BY_… | ref`` for a known `ref`
#: (>= 0), in the per-command steps
BY_ISSUE, BY_PRODUCER = by(ISSUED), by(PRODUCER)
#: The most solo times a DMA engine keeps (`DmaEngine.solo`): a stream of sizes that never
#: repeat costs no more memory than this
SOLO_KEPT = 1024


class DmaEngine(InOrderEngine):
    """In-order DMA: setup, then the bytes stream over the path, then its latency.

    A transfer is a two-stage pipeline: *setup* (`pe.dma.setup`: descriptor
    fetch, address translation), then *streaming*. With `setup_overlap` the
    next transfer's setup runs while the one before streams (it starts when
    that one began to stream); without it, setup starts when the engine is
    idle. Streaming waits until every resource of the path is free (see
    `hw.network`) and takes the longest of:

    - ``bytes / the path's bottleneck bandwidth``;
    - the window: with `outstanding` = W bytes in flight and a round trip R,
      the first W bytes stream at the bottleneck rate and each next W may
      start one round trip (or, if longer, W at the bottleneck rate) after
      the W before: ``(ceil(bytes / W) - 1) x max(R, W / bw) + rest / bw``;
    - for an HBM end, the time to open the DRAM pages it touches
      (`Calendar.opening_ps`).

    The engine is held from its start to the end of streaming; `busy_ps`
    counts setup not hidden under the transfer before, and streaming at the
    solo rate; time lost to other transfers (waiting for a busy resource in
    the circuit model, a fair share below the solo rate) is `wait_ps`. The
    path latency (memory access, link hops) is added to the completion only.
    `local_bandwidth` is used for a copy that crosses no shared resource (an
    IPCQ slot copied to TCM).
    """

    __slots__ = ("bytes", "ledger", "local_bandwidth", "outstanding", "overlap", "region",
                 "setup_ps", "solo", "stream_at", "wait_ps", "waited", "waited_on", "weight")

    def __init__(self, config: DmaConfig, local_bandwidth: int):
        super().__init__()
        self.setup_ps = config.setup
        self.overlap = config.setup_overlap
        self.outstanding = config.outstanding
        self.local_bandwidth = local_bandwidth
        self.wait_ps = 0
        self.bytes = 0  # bytes moved
        self.waited_on: Calendar | None = None  # the resource the last transfer waited for
        self.waited = 0  # and how long
        self.stream_at = 0  # when the last transfer's bytes began to stream (to `free_at`)
        # What each transfer counts for energy, by the region of the command it serves
        # (`region`, set by whoever issues it): rows of `network.LEDGER`, shared by every
        # PE's engine, `weight` times (the PEs a representative stands for); None: kept
        # by no one.
        self.ledger: list[list[int]] | None = None
        self.region = 0
        self.weight = 1
        #: (bytes, pages, path) -> `stream_ps`: a PE moves the same few sizes over the same
        #: few paths again and again (layer after layer); at most `SOLO_KEPT` kept
        self.solo: dict[tuple[int, int, Path], int] = {}

    def stream_ps(self, nbytes: int, path: Path, pages: int = 0) -> int:
        """How long `nbytes` stream over `path` (opening `pages` DRAM pages at its HBM end)."""
        resources, _, round_trip = path
        bandwidth = (min(c.bandwidth for c in resources) if len(resources) > 1 else
                     resources[0].bandwidth if resources else self.local_bandwidth)
        duration = transfer_ps(nbytes, bandwidth)
        window = self.outstanding
        if nbytes > window:
            rounds = -(-nbytes // window) - 1
            windowed = (rounds * max(round_trip, transfer_ps(window, bandwidth))
                        + transfer_ps(nbytes - rounds * window, bandwidth))
            duration = max(duration, windowed)
        if pages and resources and resources[0].faw_ps:
            opening = resources[0].opening_ps(pages)
            if opening > duration:
                duration = opening
        return duration

    def begin(self, ready: int, nbytes: int, path: Path, pages: int = 0) -> tuple[int, int, int]:
        """A transfer that may start at `ready`: (when the engine takes it, when its bytes may
        begin to stream, how long they stream alone)."""
        if pages:  # counted once per transfer, at its HBM end (energy: activates)
            path[0][0].pages += pages
        if self.ledger is not None:
            row, weight = self.ledger[self.region], self.weight
            row[0] += nbytes * weight
            row[1] += pages * weight
            for cal in path[0]:
                row[cal.part] += nbytes * weight
        before = self.free_at
        start = self.stream_at if self.overlap else before
        if ready > start:
            start = ready
        setup_end = start + self.setup_ps
        key = (nbytes, pages, path)
        solo = self.solo.get(key)
        if solo is None:
            solo = self.stream_ps(nbytes, path, pages)
            if len(self.solo) < SOLO_KEPT:
                self.solo[key] = solo
        return start, setup_end if setup_end > before else before, solo

    def streamed(self, start: int, streams_from: int, solo_ps: int, stream_at: int,
                 stream_end: int, nbytes: int) -> None:
        """Account a transfer taken at `start`, free to stream from `streams_from`, whose
        bytes streamed in [stream_at, stream_end) (alone: `solo_ps`). Time beyond the solo
        time (waiting for a busy resource, or sharing one) is `waited`."""
        setup_end, before = start + self.setup_ps, self.free_at
        hidden = (setup_end if setup_end < before else before) - start  # under the one before
        self.stream_at = stream_at
        self.free_at = stream_end
        self.busy_ps += self.setup_ps - (hidden if hidden > 0 else 0) + solo_ps
        self.waited = stream_end - streams_from - solo_ps
        self.wait_ps += self.waited
        self.bytes += nbytes
        self.ops += 1

    def transfer(self, ready: int, nbytes: int, path: Path, pages: int = 0) -> tuple[int, int]:
        """Move `nbytes` over `path` (its HBM slice, if any, and links), opening `pages`
        DRAM pages at its HBM end, holding the path's resources for the transfer
        (circuit-style: a path only this PE uses, or `network.sharing = "circuit"`).

        Returns (start, end): the engine takes it at `start` (its setup begins);
        the data is at the destination at `end`.
        """
        start, streams_from, duration = self.begin(ready, nbytes, path, pages)
        resources = path[0]
        self.waited_on = None
        if len(resources) == 1:  # one's own HBM slice: the common case, kept lean
            cal = resources[0]
            stream_at = cal.book(streams_from, duration)
            cal.carry(stream_at, duration, nbytes)
            if stream_at > streams_from:
                self.waited_on = cal
        elif resources:
            stream_at, self.waited_on = book(resources, duration, streams_from)
            for cal in resources:
                cal.carry(stream_at, duration, nbytes)
        else:
            stream_at = streams_from
        self.streamed(start, streams_from, duration, stream_at, stream_at + duration, nbytes)
        return start, stream_at + duration + path[1]


def transfer_step(walk: Walk) -> Callable:
    """PE_DMA's step in `walk`: a LOAD `i` (`load`: memory to TCM) or a STORE `i` (its
    value's producer ended first). ``step(i, load)`` returns (issue, end), or, where it
    must wait first (tile operations issued before it, a path other PEs book), a
    generator to run for what it waited for, to book with ``step(i, load, waited)``.
    Made once per PE, what it uses bound (it runs per command, the pass's hot loop; the
    two functions refer to no one that refers to them: no cycle for the collector)."""
    proc, pe, dma, stream, comps = walk.proc, walk.pe, walk.pe.dma, walk.stream, walk.comps
    routes, advance = walk.timing.routes, walk.timing.composites.advance
    enqueue, cpu, sched = walk.sched.enqueue, walk.cpu, walk.sched
    c_load, c_store = walk.issue.load, walk.issue.store
    src, dst, col_a, size, rows, arg = stream.src, stream.dst, stream.a, stream.size, \
        stream.rows, stream.arg
    end, starts, whys, held, made, base = walk.end, walk.starts, walk.whys, walk.held, \
        walk.made, walk.base
    path, shared, shift, log, heap = routes.path, routes.shared, walk.shift, walk.log, \
        comps.heap
    inbound, outbound, leaf = walk.inbound, walk.outbound, walk.leaf

    def waits(i, load, t, ready, why, addr, route, private, pages):
        proc.at = i
        if heap:
            yield from advance(proc, pe, comps, ready)
        if leaf is not None:  # after the tile operations, which set their own
            dma.region = leaf[i]
        if private:
            start, done = dma.transfer(ready, size[i], route, pages)
        else:
            start, done = yield from shared(proc, dma, t, ready, size[i], route, pages)
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
        if not load and done > walk.landed[0]:
            walk.landed = (done, i)
        if log is not None:
            tcm = walk.tcm(dst[i] if load else src[i])
            log.append(proc.pid, PE_DMA, walk.codes["load" if load else "store"], t, start,
                       done, size[i], 0, addr if load else tcm, tcm if load else addr, i,
                       True, (dma.stream_at, dma.free_at), log.path(route[0]))
        return t, done

    return step


def transfer_pages(path: Path, addr: int, rows: int, nbytes: int, span: int) -> int:
    """DRAM pages a load or store of `rows` rows (`nbytes` in all, over `span` bytes from
    `addr`) opens at the HBM end of `path` (0 if it has none)."""
    if not nbytes:
        return 0
    row = nbytes // rows
    return strided_pages(path, addr, rows, row, (span - row) // (rows - 1) if rows > 1 else row)


def strided_pages(path: Path, addr: int, rows: int, row_bytes: int, stride: int) -> int:
    """DRAM pages `rows` rows of `row_bytes`, `stride` bytes apart from `addr`, open at the
    HBM end of `path` (0 if it has none)."""
    resources = path[0]
    page = resources[0].page_bytes if resources else 0
    return pages_opened(addr % page, rows, row_bytes, stride, page) if page else 0


#: The way of a copy inside a PE (an IPCQ slot to TCM): no shared resource, no latency.
LOCAL: Path = ((), 0, 0)
