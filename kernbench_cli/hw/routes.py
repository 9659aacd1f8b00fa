"""The timing pass's ways: DMA paths, IPCQ pairs and rings, shared calendars, transfers.

`Routes` is held by `hw.timing.Timing` (`timing.routes`) and owns the route
caches; it reads the pass's system, program and, while dedup times
representatives, their ghosts. Routes depend only on which PE owns an
address, so they are cached per aligned region one PE owns whole
(`region_shift`). A transfer
over a path another PE books too is booked in simulated-time order of issue
(circuit) or fair-shared (`hw.flows`); one over a private path is booked at
once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from kernbench_cli.formats import gemm_datapath
from kernbench_cli.hw.composite import PlanCosts
from kernbench_cli.hw.dma import DmaEngine
from kernbench_cli.hw.gemm import array_rate
from kernbench_cli.hw.ipcq import Ring
from kernbench_cli.hw.network import Path
from kernbench_cli.hw.process import PeProcess
from kernbench_cli.stream import COMPOSITE, LOAD, NONE, SEND, STORE, Composite

if TYPE_CHECKING:
    from kernbench_cli.hw.timing import Timing


class Routes:
    """The paths, rings and shared-calendar bookings of timing pass `timing` (see the
    module)."""

    __slots__ = ("clock_hz", "env", "fair", "flows", "pairs", "paths", "program",
                 "region_shift", "system", "timing")

    def __init__(self, timing: Timing):
        self.timing = timing  # its ghosts, representatives and op log change by pass
        self.system, self.program, self.env = timing.system, timing.program, timing.env
        self.flows, self.fair, self.clock_hz = timing.flows, timing.fair, timing.clock_hz
        # Routes depend only on which PE owns an address: cache them per aligned region
        # that one PE owns whole (a power-of-two HBM slice, or a PE's 1 GiB window).
        slice_bytes = self.system.topology.hbm.slice_size
        power_of_two = slice_bytes & (slice_bytes - 1) == 0
        self.region_shift = min(30, slice_bytes.bit_length() - 1) if power_of_two else 64
        self.paths: dict[tuple[int, bool, int], tuple[Path, bool]] = {}
        self.pairs: dict[tuple, tuple[str, Ring, Path, int, bool]] = {}

    def clear(self) -> None:
        """Forget the routes found (the calendars' sharing or the ghosts changed)."""
        self.paths.clear()
        self.pairs.clear()

    def path(self, pid: int, addr: int, inbound: bool) -> tuple[Path, bool]:
        """(path, private) of a DMA of PE `pid` from `addr` (inbound) or to it."""
        key = (pid, inbound, addr >> self.region_shift)
        hit = self.paths.get(key) if self.region_shift < 64 else None
        if hit is None:
            path = self.real_path(pid, addr, inbound)
            hit = (path, not any(cal.shared for cal in path[0]))
            if self.timing.ghosts is not None and pid in self.timing.ghosts.reps:
                hit = ((self.timing.ghosts.resources(pid, path[0], ("path", addr, inbound)),
                        *path[1:]), hit[1])
            if self.region_shift < 64:
                self.paths[key] = hit
        return hit

    def real_path(self, pid: int, addr: int, inbound: bool) -> Path:
        """The path of a DMA of PE `pid` from `addr` (inbound) or to it, on real calendars."""
        system = self.system
        owner, kind = system.amap.locate(addr)
        me = system.coords[pid]
        src, dst = (owner, me) if inbound else (me, owner)
        return system.network.path(src, dst, owner if kind == "hbm" else None,
                                   owner if kind == "sram" else None)

    def plan_costs(self, pid: int, desc: Composite) -> PlanCosts:
        """The planner's view of composite `desc` on PE `pid`: the rate, latency and pages of
        the memory its first operand in memory (or its output) lives in."""
        topo, clock = self.system.topology, self.clock_hz
        ends = self.operand_ends(desc)
        resources, latency, _ = self.path(pid, *ends[0])[0] if ends else ((), 0, 0)
        rate = min((c.bandwidth for c in resources), default=self.system.pes[pid].dma.
                   local_bandwidth)
        hbm = resources[0] if resources and resources[0].page_bytes else None
        passes, per_cell = array_rate(topo.pe.gemm,
                                      gemm_datapath(desc.a_format, desc.b_format)[0])
        math = topo.pe.math
        return PlanCosts(rate / clock, topo.pe.dma.setup * clock / 10**12,
                         latency * clock / 10**12, hbm.page_bytes if hbm else 0,
                         hbm.opening_ps(1) * clock / 10**12 if hbm else 0.0,
                         passes, topo.pe.dma.setup_overlap, per_cell,
                         math.op_cycles.dequant / math.lanes)

    def pair(self, src: int, dst: int,
             sending: bool = True) -> tuple[str, Ring, Path, int, bool]:
        """(ring direction, the receiver's ring, links, the credits' way back in ps, whether
        no other PE uses those links) of IPCQ messages from `src` to `dst`; the ring is that
        of `dst`'s representative, the links the sender's ghosts if it has them (`sending`;
        a receiver asks only for its ring)."""
        key = (src, dst) if sending else (src, dst, False)
        hit = self.pairs.get(key)
        if hit is None:
            system = self.system
            a, b = system.coords[src], system.coords[dst]
            direction = system.arrival_direction(a, b)
            route = system.network.route(a, b)
            back = system.network.route(b, a).latency_ps
            rep_of = self.timing.rep_of
            to = rep_of[dst] if rep_of is not None else dst  # who stands for dst
            ring = self.ring(to, direction)
            private = not any(cal.shared for cal in route.resources)
            links = route.resources
            if sending and self.timing.ghosts is not None and src in self.timing.ghosts.reps:
                links = self.timing.ghosts.resources(src, links, ("route", dst - src))
            hit = self.pairs[key] = (direction, ring, (links, route.latency_ps,
                                                               route.latency_ps + back), back,
                                             private)
        return hit

    def ring(self, pid: int, direction: str) -> Ring:
        """PE `pid`'s ring on side `direction`, its occupancy kept in the op log."""
        ring = self.system.pes[pid].rings[direction]
        if not ring.where:
            ring.where = (pid, direction)
            if self.timing.oplog is not None:
                ring.trail = self.timing.oplog.rings.setdefault(
                    f"PE ({self.system.coords[pid]}) {direction} ring", [])
        return ring


    def mark_shared(self) -> None:
        """Find, from every stream, the calendars more than one PE books (`Calendar.shared`):
        per PE, the paths of the first address of each region it loads from and stores to,
        of its composites' operands in memory, and the routes to the PEs it sends to (a
        calendar's users are a set: each once is enough)."""
        network, coords, shift = self.system.network, self.system.coords, self.region_shift
        for pid, stream in enumerate(self.program.streams):
            op = np.frombuffer(stream.op, dtype=np.uint8)
            for inbound, col, kind in ((True, stream.src, LOAD), (False, stream.dst, STORE)):
                addrs = np.frombuffer(col, dtype=np.int64)[op == kind]
                if len(addrs):
                    first = np.unique(addrs >> shift, return_index=True)[1] if shift < 64 \
                        else [0]  # slices not a power of two: the first only, as ever
                    for k in sorted(first):
                        self._use(pid, int(addrs[k]), inbound)
            args = np.frombuffer(stream.arg, dtype=np.int64)
            for arg in np.unique(args[(op == COMPOSITE) & (args != NONE)]).tolist():
                for addr, inbound in self.operand_ends(self.program.composites[arg]):
                    self._use(pid, addr, inbound)
            for arg in np.unique(args[op == SEND]).tolist():
                for cal in network.route(coords[pid], coords[arg]).resources:
                    self._use_one(cal, pid)
        self.paths.clear()  # `private` was not final while marking

    def _use(self, pid: int, addr: int, inbound: bool) -> None:
        for cal in self.path(pid, addr, inbound)[0][0]:
            self._use_one(cal, pid)

    def _use_one(self, cal, pid: int) -> None:
        cal.use(pid)

    @staticmethod
    def operand_ends(desc: Composite) -> list[tuple[int, bool]]:
        """(address, inbound) of each memory end of a composite: operands read, output written."""
        ends = []
        if not desc.a_tcm:
            ends.append((desc.a_addr, True))
        if not desc.b_tcm:
            ends.append((desc.b_addr, True))
        if desc.out_addr >= 0:
            ends.append((desc.out_addr, False))
        return ends

    # ------------------------------------------------------------------ transfers

    def shared(self, proc: PeProcess, dma: DmaEngine, issued: int, ready: int, nbytes: int,
               path: Path, pages: int) -> Iterator[None]:
        """A load's or store's transfer (issued at `issued`) over a path other PEs use too:
        fair-shared (`flow`), or circuit-style, booked once global time reaches its issue
        (bookings on shared calendars in issue order); a generator that returns (start,
        end)."""
        if self.fair:
            return self.flow(proc, dma, ready, nbytes, path, pages)
        return self._circuit(proc, dma, issued, ready, nbytes, path, pages)

    def _circuit(self, proc: PeProcess, dma: DmaEngine, issued: int, ready: int, nbytes: int,
                 path: Path, pages: int) -> Iterator[None]:
        if issued >= self.env.peek():
            proc.wake_at(issued)
            yield
        return dma.transfer(ready, nbytes, path, pages)

    def flow(self, proc: PeProcess, dma: DmaEngine, ready: int, nbytes: int, path: Path,
             pages: int = 0) -> Iterator[None]:
        """A transfer over a path other PEs use too, fair-shared (`hw.flows`); (start, end)
        as `DmaEngine.transfer` returns them. Waits until its bytes may stream, and, if
        anything may still change its share, until it ends."""
        start, streams_from, solo = dma.begin(ready, nbytes, path, pages)
        peek = self.env.peek
        if streams_from >= peek():
            proc.wake_at(streams_from)
            yield
        flow = self.flows.start(streams_from, nbytes, path[0], solo, proc.pid)
        if flow.end > peek():
            self.flows.arm(flow, proc.resume_cb)
            yield
        else:  # nothing happens before it ends: nothing can change its share
            self.flows.finish(flow, flow.end)
        end = flow.end
        dma.waited_on = flow.limit if end - streams_from > solo else None
        dma.streamed(start, streams_from, solo, streams_from, end, nbytes)
        return start, end + path[1]
