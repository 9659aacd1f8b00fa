"""The timing pass: every PE's command stream timed on the engine model, SimPy the clock.

Each PE walks its stream in a generator, resumed by the callbacks of the
SimPy events it waits on (SimPy's loop is the clock and the event engine).
Per command it does arithmetic: PE_CPU pays the issue cost, PE_SCHEDULER's
queue takes it, the in-order engine starts it at ``max(ready, free_at)``
where ``ready`` is when its producers (columns `a`, `b`) ended.

Composites. PE_SCHEDULER plans a composite's tiles at dispatch, into the
TCM free then: the TCM less what the PE's tensors hold (the stream's `tcm`
column) and less the tile buffers of composites still running; the plan's
buffers stay reserved until the composite ends. A tensor allocation that
finds TCM taken by tile buffers waits (PE_CPU stalls) until enough of them
free. The tiles run one operation at a time (`composite.tile_ops`): each is
issued to PE_DMA or PE_GEMM when its operands or buffers allow, and the
engines serve tile operations and the PE's own commands in the order they
were issued (ties to the earlier command), so a load issued while a long
composite runs waits at most for the tile operation in progress.

A PE leaves its generator only where it must:

- before booking a calendar that another PE books too (an HBM slice or a
  link: `Calendar.shared`, known before the run from every stream's
  addresses), so that bookings on it are made in simulated-time order of
  issue, ties to the lower PE index. The PE resumes when global time reaches
  the issue time. Bookings on calendars only one PE uses need no order but
  the PE's own, so a PE runs through them without waiting;
- before an IPCQ operation (a send's chunks or a receive's), which meets
  another PE at its ring, and where the ring is full or empty (blocking; the
  other side wakes it).

Nothing in a PE's timing depends on when Python runs it, so the op log (a
record per command, tile and message chunk) is listed by start time, then
PE, then the PE's own order.

A PE that still waits when no event is left is deadlocked (`Timing.stuck`):
a receive whose message never comes, or a send facing a ring that never
frees. Errors in a stream (a trace timed on a topology it does not fit) are
`TimingError`s naming the PE, the command and the time.
"""

from __future__ import annotations

import gc
import heapq
from array import array
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from heapq import heappush

import numpy as np
import simpy

from kernbench_cli import collector
from kernbench_cli.errors import KernelError
from kernbench_cli.hw.classes import Classes, partition
from kernbench_cli.hw.composite import (
    ACC_BYTES,
    GEMM_TILE,
    LOAD_TILE,
    GemmTiling,
    Operand,
    PlanCosts,
    TileOp,
    plan_gemm,
    tile_ops,
    traffic,
)
from kernbench_cli.hw.dedup import Ghosts, expand, overlaps, tie_faults
from kernbench_cli.hw.dma import DmaEngine
from kernbench_cli.hw.engine import InOrderEngine, cycles_to_ps
from kernbench_cli.hw.flows import FairShare
from kernbench_cli.hw.gemm import gemm_passes
from kernbench_cli.hw.ipcq import Chunk, Ring
from kernbench_cli.hw.multicast import Multicast
from kernbench_cli.hw.network import Path, pages_opened
from kernbench_cli.hw.oplog import OP_FIELDS, OpLog, Slice
from kernbench_cli.hw.pe import Pe
from kernbench_cli.hw.system import System
from kernbench_cli.stream import (
    COMPOSITE,
    CYCLES,
    DOT,
    KINDS,
    LOAD,
    MATH,
    NONE,
    READ,
    RECV,
    SEND,
    STORE,
    WAIT,
    Composite,
    Program,
)

CPU, SCHED, DMA, GEMM, VEC = range(5)  # engine codes, in the order of `pe.ENGINES`
PENDING = -1  # `end` of a composite still running

#: Why an operation started when it did, for the critical path: a cause and the
#: operation it points at, packed as ``cause << CAUSE_SHIFT | pid << PE_SHIFT | index``;
#: `index` counts a PE's commands, then its composites' tile operations.
START, ISSUED, SCHEDULER, PRODUCER, ENGINE, CREDIT, MESSAGE, QUEUE, TCM = range(9)
CAUSES = ("start", "CPU issue", "scheduler", "producer", "engine busy", "IPCQ credit",
          "IPCQ message", "queue full", "TCM")
PE_SHIFT, CAUSE_SHIFT = 36, 58
NOBODY = -1


def _why(cause: int, ref: int) -> int:
    return cause << CAUSE_SHIFT | ref if ref >= 0 else cause << CAUSE_SHIFT | (1 << PE_SHIFT) - 1


class TimingError(KernelError):
    """A stream the topology cannot time; `pid`, `index` (the command) and `time_ps` say where."""

    def __init__(self, message: str, pid: int, index: int, time_ps: int):
        super().__init__(message)
        self.pid, self.index, self.time_ps = pid, index, time_ps


_TOO_LATE = ("the simulated time passed 2^63 ps (about 107 days): a configured time, size or "
             "count is too large for the model")


class TimeRangeError(TimingError):
    """Accepted values whose times the model cannot hold (past 2^63 ps): bad input."""

    exit_code = 2


@dataclass
class Stuck:
    """A PE still waiting when nothing is left to run."""

    pid: int
    index: int  # the command it waits in
    what: str
    time_ps: int


class _Proc:
    """One PE's walk over its stream, as SimPy event callbacks resume it."""

    __slots__ = ("after", "at", "cpu", "current", "done", "due", "end", "env", "error", "events",
                 "gen", "issue", "last_end", "made", "n", "offers", "pid", "planned", "resume_cb",
                 "start", "tcm_peak", "tcm_wait", "tile_buffers", "tile_worst", "tiles", "waiting",
                 "waits", "why")

    def __init__(self, env: simpy.Environment, pid: int):
        self.env = env
        self.pid = pid
        self.planned = 0  # what its composites' plans move, by formula (invariants)
        self.gen: Iterator[None] | None = None
        self.done = False
        self.at = 0  # the command it waits in, while it waits
        self.waiting = ""  # what it waits for, while it waits on another PE
        self.end = array("q")  # per command: when its result is ready (PENDING: not yet)
        self.last_end = 0  # the latest end of anything it did
        # For the critical path (see `Timing._walk`): per command its issue time, start,
        # and why it started then, and how PE_CPU reached its issue (a `_why`, 0: simply
        # after the command before); PE_CPU's waits after a command: index -> (until, why)
        self.n = 0
        self.issue = array("q")
        self.start = array("q")
        self.why = array("q")
        self.cpu = array("q")
        self.after: dict[int, tuple[int, int]] = {}
        self.tiles: list[tuple[int, int, int, int, int]] = []  # (start, end, why, engine, of)
        self.made: dict[int, int] = {}  # composite -> its last tile operation
        self.waits: dict[int, tuple] = {}  # op -> (the resource a transfer waited for, ps)
        self.tcm_wait = NOBODY  # PE_CPU waited for TCM held by this op (-1: no)
        self.current = 0  # the composite whose tiles run now
        self.events = 0
        self.error: TimingError | None = None  # what stopped it
        self.tcm_peak = (0, 0, 0)  # TCM high water: (bytes, time, command)
        # per running composite: the largest tile of each streamed operand (bytes) and the
        # largest output tile (elements), as its tiles ran; then, for the invariants, the
        # largest (buffers those tiles needed, buffers its plan reserved, composite)
        self.tile_buffers: dict[int, list] = {}
        self.tile_worst = (0, 0, -1)
        self.resume_cb = self._resume
        self.due: list[int] | None = None  # the resume `wake_by` planned, while it waits
        #: while a multicast waits on several rings (`hw.multicast`): id(ring) -> the
        #: soonest it was offered a credit by that ring
        self.offers: dict[int, int] | None = None

    def _resume(self, _event: simpy.Event) -> None:
        self.events += 1
        try:
            next(self.gen)
        except StopIteration:
            self.done = True
        except TimingError as exc:  # this PE stops; the others go on (see Timing.run)
            self.error, self.done = exc, True
        except OverflowError:  # a time past the 64-bit picosecond range of the op records
            self.error = TimeRangeError(_TOO_LATE, self.pid, self.at, self.env.now)
            self.done = True

    def wake_at(self, t: int, callback=None) -> None:
        """Resume at simulated time `t` (now if past), in PE-index order among equals
        (`callback`: what resumes it, if not `_resume`)."""
        env = self.env
        event = simpy.Event(env)
        event._ok = True
        event._value = None
        event.callbacks.append(callback or self.resume_cb)
        now = env.now
        env.schedule(event, self.pid, t - now if t > now else 0)

    def wake_by(self, t: int) -> None:
        """Resume at `t` at the latest: a wait for the earliest of times learnt while it
        sleeps (an IPCQ credit given back after another that is back later). A resume
        planned for later is called off; one planned for `t` or sooner stands."""
        due = self.due
        if due is not None and due[0] <= t:
            return
        self.due = due = [t]

        def resume(event: simpy.Event) -> None:
            if self.due is due:  # not called off since
                self.due = None
                self._resume(event)

        self.wake_at(t, resume)


class _Running:
    """A composite between dispatch and end: its tile operations and TCM tile buffers."""

    __slots__ = ("depth", "dispatched", "end", "index", "issued", "ops", "private", "tcm_bytes")

    def __init__(self, index: int, issued: int, dispatched: int, ops: Generator,
                 tiling: GemmTiling, private: bool):
        self.index, self.issued, self.dispatched = index, issued, dispatched
        self.ops, self.private = ops, private
        self.tcm_bytes, self.depth = tiling.tcm_bytes, tiling.depth
        self.end = PENDING


class _Composites:
    """A PE's composites in flight: tile operations in issue order, and their TCM.

    Tile buffers are held from dispatch until a composite ends: `pending` bytes
    for composites still running, and `ended` (a heap by end time) for those
    ended at a time later than the PE has reached.
    """

    __slots__ = ("by_index", "ended", "heap", "held", "pending", "seq")

    def __init__(self) -> None:
        # (next operations' issue, seq, the composite, those operations)
        self.heap: list[tuple[int, int, _Running, list[TileOp]]] = []
        self.by_index: dict[int, _Running] = {}
        self.pending = 0  # tile-buffer bytes of composites still running
        # (end, seq, bytes, last tile operation) of ended composites
        self.ended: list[tuple[int, int, int, int]] = []
        self.held = 0  # bytes in `ended`
        self.seq = 0

    def __bool__(self) -> bool:
        return bool(self.pending or self.held)

    def buffers(self, t: int, prune: bool = False) -> int:
        """TCM held by tile buffers at `t` (tile operations up to `t` done). With `prune`,
        forgets composites ended by `t`: only for a `t` that later calls never go below
        (PE_CPU's time)."""
        ended = self.ended
        if prune:
            while ended and ended[0][0] <= t:
                self.held -= heapq.heappop(ended)[2]
            return self.pending + self.held
        return self.pending + sum(nbytes for end, _, nbytes, _ in ended if end > t)

    def start(self, running: _Running) -> None:
        self.pending += running.tcm_bytes
        self.by_index[running.index] = running

    def finish(self, running: _Running, last: int) -> None:
        self.pending -= running.tcm_bytes
        self.held += running.tcm_bytes
        self.seq += 1
        heappush(self.ended, (running.end, self.seq, running.tcm_bytes, last))

    def holders(self, t: int) -> list[_Running | tuple[int, int]]:
        """What holds tile buffers at `t`: composites running, and (end, last operation) of
        ended ones."""
        return [r for _, _, r, _ in self.heap] + [(end, last) for end, _, _, last in self.ended
                                                 if end > t]


#: Timing passes dedup makes before it times every PE (each split of classes costs one).
TRIES = 4


class Timing:
    """One timing pass of `program` on `system` (fresh engines, calendars and rings)."""

    def __init__(self, system: System, program: Program, oplog: bool = False,
                 dedup: bool = False):
        topo = system.topology
        self.dedup = dedup
        self.classes: Classes | None = None  # the classes timed by representatives
        self.rep_of: list[int] | None = None  # per PE, its representative (None: itself)
        self.ghosts: Ghosts | None = None
        self.tries = 0  # timing passes made (more than one: classes split)
        #: per PE whose class's multicast copies looked different, the groups of its copies
        #: (`Multicast.splits`), pass after pass: more keys that split the classes
        self.split: dict[int, tuple] = {}
        self.around = None  # the PEs' surroundings (`hw.classes`), made once
        self.multicast: Multicast | None = None
        #: (ring's PE, direction, PE, PE, "credits" or "chunks"): representatives that used
        #: a ring's credits or chunks at one time, in that order
        self.ties: set[tuple[int, str, int, int, str]] | None = None
        self.system = system
        self.program = program
        self.env = simpy.Environment()
        self.issue = topo.cost_table.issue  # PE_CPU's cost per command kind
        self.plan_ps = topo.cost_table.scheduler.plan
        self.tcm_bytes = topo.pe.tcm.size
        self.clock_hz = topo.pe.clock
        self.oplog = OpLog() if oplog else None
        self.procs = [_Proc(self.env, pe.pid) for pe in system.pes]
        self.stuck: list[Stuck] = []
        self.planned_bytes = 0  # what composites' plans move, by formula (invariants)
        # Routes depend only on which PE owns an address: cache them per aligned region
        # that one PE owns whole (a power-of-two HBM slice, or a PE's 1 GiB window).
        slice_bytes = topo.hbm.slice_size
        power_of_two = slice_bytes & (slice_bytes - 1) == 0
        self._region_shift = min(30, slice_bytes.bit_length() - 1) if power_of_two else 64
        self._paths: dict[tuple[int, bool, int], tuple[Path, bool]] = {}
        self._pairs: dict[tuple[int, int], tuple[str, Ring, Path, int]] = {}
        self._math = [(kind, name) for kind, name in program.math_kinds]
        # (math kind, elements) -> (issue time, latency)
        self._math_ps: dict[tuple[int, int], tuple[int, int, str]] = {}
        self._tiles: dict[int, _Tiles] = {}  # per PE: how its composites run tiles
        self.fair = topo.network.sharing == "fair"
        self.flows = FairShare(self.env)

    # ------------------------------------------------------------------ the run

    def run(self) -> None:
        """Time every stream; afterwards `latency_ps`, `stuck` and the PEs' engines tell.

        The garbage collector waits until the pass ends (`collector.paused`): it walked
        the run's millions of long-lived objects again and again, a quarter of the pass
        on a rack, and the pass leaves no cycles for it to free.
        """
        with collector.paused():
            if not self.dedup or len(self.procs) < 2:
                self._mark_shared()
                self._run(self.procs)
            else:
                self._run_classes()
            if self.oplog is not None:
                self.oplog = self.oplog.ordered()

    def _run_classes(self) -> None:
        """Time one representative per class (`hw.classes`); where a check of `hw.dedup`
        fails (a member's transfer met another PE's, a multicast's copies got different
        credits, representatives met on a ring out of their members' order), split the
        class and time again; an error or a deadlock is found again by the full pass. Then
        give every PE its representative's results (`dedup.expand`)."""
        forced: set[int] = set()
        split = self.split
        while True:
            self.tries += 1
            self._mark_shared()
            classes = partition(self, forced, split)
            if len(classes.members) == len(self.procs):
                self._run(self.procs)
                return
            self._install(classes)
            self._run([self.procs[pid] for pid in classes.rep])
            apart = self.multicast.splits(classes)
            if apart:  # multicasts' copies looked different: split by the copy each took
                for pid, groups in apart.items():
                    split[pid] = (*split.get(pid, ()), groups)
                bad = set()
            else:
                bad = None if self.stuck or any(p.error for p in self.procs) else \
                    overlaps(self, classes) | tie_faults(self, classes)
                if bad == set():
                    expand(self, classes)
                    return
            if bad is None or self.tries >= TRIES:  # the full pass from here
                bad = set(range(len(self.procs)))
            forced |= bad
            self._reset()

    def _install(self, classes: Classes) -> None:
        """Arrange the pass for `classes`: partners' representatives, ghosts, ties."""
        self.classes, self.rep_of = classes, classes.rep_of
        self.ghosts = Ghosts({r for r, m in zip(classes.rep, classes.members, strict=True)
                              if len(m) > 1})
        self.ties = set()
        self.multicast = Multicast(self)
        self._paths.clear()
        self._pairs.clear()

    def _reset(self) -> None:
        """Fresh engines, calendars, rings and records, for another pass; the last pass's
        (SimPy events and PE walks that refer to each other) collected now, as the
        collector waits until the end of `run` and they are no use to anyone."""
        kept = self.tries, self.split, self.around
        self.system.__init__(self.system.amap)
        self.__init__(self.system, self.program, self.oplog is not None, self.dedup)
        self.tries, self.split, self.around = kept
        gc.collect()

    def _run(self, procs: list[_Proc]) -> None:
        if self.oplog is not None:
            log = self.oplog
            self._math = [(kind, log.code(name)) for kind, name in self.program.math_kinds]
        pes = self.system.pes
        for proc in procs:
            proc.gen = self._walk(proc, pes[proc.pid])
            proc.wake_at(0)
        try:
            self.env.run()
        except OverflowError:  # in an event no PE's walk runs (a fair-shared flow's end)
            raise TimeRangeError(_TOO_LATE, 0, 0, self.env.now) from None
        errors = [proc.error for proc in procs if proc.error is not None]
        if errors and len(procs) == len(self.procs):  # the earliest in simulated time, as if
            raise min(errors, key=lambda exc: (exc.time_ps, exc.pid))  # the run had stopped
        for proc in procs:
            if not proc.done:
                self.stuck.append(Stuck(proc.pid, proc.at, proc.waiting, pes[proc.pid].cpu.time))

    @property
    def latency_ps(self) -> int:
        return max((max(proc.last_end, pe.finish)
                    for proc, pe in zip(self.procs, self.system.pes, strict=True)), default=0)

    @property
    def events(self) -> int:
        return sum(proc.events for proc in self.procs)

    # ------------------------------------------------------------------ routes

    def _path(self, pid: int, addr: int, inbound: bool) -> tuple[Path, bool]:
        """(path, private) of a DMA of PE `pid` from `addr` (inbound) or to it."""
        key = (pid, inbound, addr >> self._region_shift)
        hit = self._paths.get(key) if self._region_shift < 64 else None
        if hit is None:
            path = self.real_path(pid, addr, inbound)
            hit = (path, not any(cal.shared for cal in path[0]))
            if self.ghosts is not None and pid in self.ghosts.reps:
                hit = ((self.ghosts.resources(pid, path[0], ("path", addr, inbound)),
                        *path[1:]), hit[1])
            if self._region_shift < 64:
                self._paths[key] = hit
        return hit

    def real_path(self, pid: int, addr: int, inbound: bool) -> Path:
        """The path of a DMA of PE `pid` from `addr` (inbound) or to it, on real calendars."""
        system = self.system
        owner, kind = system.amap.locate(addr)
        me = system.coords[pid]
        src, dst = (owner, me) if inbound else (me, owner)
        return system.network.path(src, dst, owner if kind == "hbm" else None,
                                   owner if kind == "sram" else None)

    def _plan_costs(self, pid: int, desc: Composite) -> PlanCosts:
        """The planner's view of composite `desc` on PE `pid`: the rate, latency and pages of
        the memory its first operand in memory (or its output) lives in."""
        topo, clock = self.system.topology, self.clock_hz
        ends = self._operand_ends(desc)
        resources, latency, _ = self._path(pid, *ends[0])[0] if ends else ((), 0, 0)
        rate = min((c.bandwidth for c in resources), default=self.system.pes[pid].dma.
                   local_bandwidth)
        hbm = resources[0] if resources and resources[0].page_bytes else None
        width = max(desc.a_itemsize, desc.b_itemsize)
        return PlanCosts(rate / clock, topo.pe.dma.setup * clock / 10**12,
                         latency * clock / 10**12, hbm.page_bytes if hbm else 0,
                         hbm.opening_ps(1) * clock / 10**12 if hbm else 0.0,
                         gemm_passes(topo.pe.gemm, width), topo.pe.dma.setup_overlap)

    def _pair(self, src: int, dst: int, sending: bool = True) -> tuple[str, Ring, Path, int,
                                                                       bool]:
        """(ring direction, the receiver's ring, links, the credits' way back in ps, whether
        no other PE uses those links) of IPCQ messages from `src` to `dst`; the ring is that
        of `dst`'s representative, the links the sender's ghosts if it has them (`sending`;
        a receiver asks only for its ring)."""
        key = (src, dst) if sending else (src, dst, False)
        hit = self._pairs.get(key)
        if hit is None:
            system = self.system
            a, b = system.coords[src], system.coords[dst]
            direction = system.arrival_direction(a, b)
            route = system.network.route(a, b)
            back = system.network.route(b, a).latency_ps
            to = self.rep_of[dst] if self.rep_of is not None else dst  # who stands for dst
            ring = self._ring(to, direction)
            private = not any(cal.shared for cal in route.resources)
            links = route.resources
            if sending and self.ghosts is not None and src in self.ghosts.reps:
                links = self.ghosts.resources(src, links, ("route", dst - src))
            hit = self._pairs[key] = (direction, ring, (links, route.latency_ps,
                                                               route.latency_ps + back), back,
                                             private)
        return hit

    def _ring(self, pid: int, direction: str) -> Ring:
        """PE `pid`'s ring on side `direction`, its occupancy kept in the op log."""
        ring = self.system.pes[pid].rings[direction]
        if not ring.where:
            ring.where = (pid, direction)
            if self.oplog is not None:
                ring.trail = self.oplog.rings.setdefault(
                    f"PE ({self.system.coords[pid]}) {direction} ring", [])
        return ring

    def _met(self, ring: Ring, pid: int) -> None:
        """PE `pid` uses `ring`'s chunks (a sender puts one, the receiver takes them) now: a
        tie with the last PE that used them at this time (`ties`)."""
        now, seen = self.env.now, ring.seen.get("chunks")
        if seen is not None and seen[0] == now and seen[1] != pid:
            self.ties.add((*ring.where, seen[1], pid, "chunks"))
        ring.seen["chunks"] = (now, pid)

    def _credit_used(self, ring: Ring, pid: int, used, woken: bool = False) -> None:
        """PE `pid` used `ring`'s credits now: a sender took credit `used` (None: there was
        none), or the receiver gave back the list `used`. A tie (`ties`) with an earlier
        use at this time by another PE if the other order would have changed what a
        sender took: it took a credit given back then, found none, or one later than
        a credit given back after it. A sender the receiver woke (`woken`) went after
        the receiver's credits whatever the order of PEs."""
        now = self.env.now
        seen = ring.seen.get("credits")
        if seen is None or seen[0] != now:
            seen = ring.seen["credits"] = (now, [])
        owner, giving = ring.where[0], isinstance(used, list)
        for other, before in seen[1]:
            if other == pid or (woken and other == owner):
                continue
            if isinstance(before, list) == giving:  # two senders (one receiver per ring)
                matters = True
            elif giving:  # `before` was taken, then `used` given
                matters = before is None or any(c < before for c in used)
            else:
                matters = used is None or used in before
            if matters:
                self.ties.add((*ring.where, other, pid, "credits"))
        seen[1].append((pid, used))

    def _mark_shared(self) -> None:
        """Find, from every stream, the calendars more than one PE books (`Calendar.shared`):
        per PE, the paths of the first address of each region it loads from and stores to,
        of its composites' operands in memory, and the routes to the PEs it sends to (a
        calendar's users are a set: each once is enough)."""
        network, coords, shift = self.system.network, self.system.coords, self._region_shift
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
                for addr, inbound in self._operand_ends(self.program.composites[arg]):
                    self._use(pid, addr, inbound)
            for arg in np.unique(args[op == SEND]).tolist():
                for cal in network.route(coords[pid], coords[arg]).resources:
                    self._use_one(cal, pid)
        self._paths.clear()  # `private` was not final while marking

    def _use(self, pid: int, addr: int, inbound: bool) -> None:
        for cal in self._path(pid, addr, inbound)[0][0]:
            self._use_one(cal, pid)

    def _use_one(self, cal, pid: int) -> None:
        cal.use(pid)

    @staticmethod
    def _operand_ends(desc: Composite) -> list[tuple[int, bool]]:
        """(address, inbound) of each memory end of a composite: operands read, output written."""
        ends = []
        if not desc.a_tcm:
            ends.append((desc.a_addr, True))
        if not desc.b_tcm:
            ends.append((desc.b_addr, True))
        if desc.out_addr >= 0:
            ends.append((desc.out_addr, False))
        return ends

    # ------------------------------------------------------------------ one PE

    def _walk(self, proc: _Proc, pe: Pe) -> Iterator[None]:
        """Time PE `pe`'s stream; yields (after arranging to be resumed) where it must wait.

        Besides the times, it records per command its issue, its start and why it
        started then (`proc.why`, see `CAUSES`), and how PE_CPU got to its issue
        (`proc.cpu`) or waited after it (`proc.after`): the critical path walks them.
        """
        pid = pe.pid
        stream = self.program.streams[pid]
        ops, col_a, col_b = stream.op, stream.a, stream.b
        col_size, col_arg, col_src, col_dst = stream.size, stream.arg, stream.src, stream.dst
        col_tcm, col_rows = stream.tcm, stream.rows
        n = proc.n = len(ops)
        zeros = bytes(8 * n)
        end = proc.end = array("q", zeros)
        starts = proc.start = array("q", zeros)
        issued = proc.issue = array("q", zeros)
        whys = proc.why = array("q", zeros)
        cpus = proc.cpu = array("q", zeros)
        after = proc.after
        cpu, sched, dma, gemm, vec = pe.cpu, pe.scheduler, pe.dma, pe.gemm, pe.math
        enqueue, held = sched.enqueue, sched.held  # `hold(t)` is heappush(held, t), inlined
        issue = self.issue
        c_load, c_store, c_dot, c_math = issue.load, issue.store, issue.dot, issue.math
        c_wait, c_send, c_recv = issue.wait, issue.send, issue.recv
        peek = self.env.peek
        path, shared = self._path, self._shared
        shift = self._region_shift
        inbound: dict[int, tuple[Path, bool]] = {}  # this PE's routes, by address region
        outbound: dict[int, tuple[Path, bool]] = {}
        shapes, kinds, math_ps = self.program.gemm_shapes, self._math, self._math_ps
        gemm_ps: dict[int, tuple[int, int]] = {}  # gemm shape -> (duration, MAC passes)
        comps = _Composites()
        tcm_bytes = self.tcm_bytes
        made = proc.made  # composite -> its last tile operation (what its result waits for)
        base = pid << PE_SHIFT  # this PE's op references: base | command index
        log = self.oplog
        if log is not None:
            tcm_base = self.system.amap.pe_tcm_addr(*pe.coord, 0)
            k_load, k_store, k_dot, k_wait, k_cycles = (
                log.code(k) for k in ("load", "store", "dot", "wait", "cycles"))
            marks = array("q")  # PE_CPU's time per command: on reaching it, before its issue
        last_end = tcm_peak = 0
        landed = (0, -1)  # (when, command) the latest of this PE's stores lands (tl.fence)
        heap = comps.heap
        for i in range(n):
            op = ops[i]
            me = base | i
            if log is not None:
                marks.append(cpu.time)
            if comps:  # composites hold tile buffers: tensors may have to wait for room
                proc.at = i
                t = cpu.time
                if heap and heap[0][0] <= t:
                    yield from self._advance(proc, pe, comps, t)
                used = col_tcm[i] + comps.buffers(t, prune=True)
                if used > tcm_bytes:
                    # Only a command that takes TCM waits for it. Without one, the excess is
                    # a plan made (and counted) at issue for a composite the scheduler holds
                    # until the buffers before it free: those never coexist.
                    if col_tcm[i] > (col_tcm[i - 1] if i else 0):
                        yield from self._tcm_room(proc, pe, comps, col_tcm[i])
                elif used > tcm_peak:
                    proc.tcm_peak = (used, t, i)
                tcm_peak = proc.tcm_peak[0]
            elif col_tcm[i] > tcm_peak:  # the TCM high water, tensors alone
                tcm_peak = col_tcm[i]
                proc.tcm_peak = (tcm_peak, cpu.time, i)
            if heap:  # a command waiting for a composite's result runs its tiles to the end
                a, b = col_a[i], col_b[i]
                if a >= 0 and end[a] == PENDING:
                    proc.at = i
                    yield from self._advance(proc, pe, comps, stop=comps.by_index[a])
                if b >= 0 and end[b] == PENDING:
                    proc.at = i
                    yield from self._advance(proc, pe, comps, stop=comps.by_index[b])
            if log is not None:
                marks.append(cpu.time)
            if proc.tcm_wait >= 0:  # PE_CPU waited for TCM before this command
                cpus[i], proc.tcm_wait = _why(TCM, proc.tcm_wait), -1
            if op == LOAD:
                t, dispatched = enqueue(cpu, c_load)
                addr = col_src[i]
                hit = inbound.get(addr >> shift) if shift < 64 else None
                if hit is None:
                    hit = inbound[addr >> shift] = path(pid, addr, True)
                route, private = hit
                if comps.heap:
                    proc.at = i
                    yield from self._advance(proc, pe, comps, dispatched)
                pages = _pages(route, addr, col_rows[i], col_size[i], col_arg[i])
                if private:
                    start, done = dma.transfer(dispatched, col_size[i], route, pages)
                else:
                    proc.at = i
                    start, done = yield from shared(proc, dma, t, dispatched, col_size[i],
                                                    route, pages)
                whys[i] = (_why(ENGINE, dma.last) if start > dispatched else
                           _why(SCHEDULER, sched.last) if dispatched > t else _why(ISSUED, me))
                dma.last = me
                if dma.waited_on is not None:
                    proc.waits[me] = (dma.waited_on, dma.waited)
                heappush(held, (start, me))
                end[i] = done
                if log is not None:
                    log.append(pid, DMA, k_load, t, start, done, col_size[i], 0, addr,
                               _tcm(tcm_base, col_dst[i]), i, True,
                               (dma.stream_at, dma.free_at), log.path(route[0]))
            elif op == MATH:
                t, ready = enqueue(cpu, c_math)
                why = _why(SCHEDULER, sched.last) if ready > t else _why(ISSUED, me)
                a, b = col_a[i], col_b[i]
                if a >= 0 and end[a] > ready:
                    ready, why = end[a], _why(PRODUCER, made.get(a, base | a))
                if b >= 0 and end[b] > ready:
                    ready, why = end[b], _why(PRODUCER, made.get(b, base | b))
                key = (col_arg[i], col_size[i])
                cost = math_ps.get(key)
                if cost is None:  # (issue time, pipeline latency, op class)
                    op_class = kinds[key[0]][0]
                    cost = math_ps[key] = (vec.duration_ps(op_class, key[1]),
                                           vec.latency[op_class], op_class)
                start, done = vec.occupy(ready, cost[0])
                done += cost[1]
                whys[i] = _why(ENGINE, vec.last) if start > ready else why
                vec.last = me
                vec.elements += col_size[i]
                vec.by_class[cost[2]] += col_size[i]
                heappush(held, (start, me))
                end[i] = done
                if log is not None:
                    log.append(pid, VEC, kinds[key[0]][1], t, start, done, 0, col_size[i], None,
                               _tcm(tcm_base, col_dst[i]), i, True, (start, done - cost[1]))
            elif op == DOT:
                t, ready = enqueue(cpu, c_dot)
                why = _why(SCHEDULER, sched.last) if ready > t else _why(ISSUED, me)
                a, b = col_a[i], col_b[i]
                if end[a] > ready:
                    ready, why = end[a], _why(PRODUCER, made.get(a, base | a))
                if end[b] > ready:
                    ready, why = end[b], _why(PRODUCER, made.get(b, base | b))
                if comps.heap:
                    proc.at = i
                    yield from self._advance(proc, pe, comps, ready)
                shape = col_arg[i]
                cost = gemm_ps.get(shape)
                if cost is None:  # (duration on this PE's array, MACs x array passes)
                    cost = gemm_ps[shape] = (gemm.duration_ps(*shapes[shape]),
                                             gemm.mac_passes_of(*shapes[shape]))
                start, done = gemm.occupy(ready, cost[0])
                whys[i] = _why(ENGINE, gemm.last) if start > ready else why
                gemm.last = me
                gemm.flops += col_size[i]  # a DOT's size is its flops, 2·m·k·n
                gemm.mac_passes += cost[1]
                heappush(held, (start, me))
                end[i] = done
                if log is not None:
                    log.append(pid, GEMM, k_dot, t, start, done, 0, col_size[i],
                               _tcm(tcm_base, col_src[i]), _tcm(tcm_base, col_dst[i]), i, True,
                               shape=log.gemm_shape(*shapes[shape][:3]))
            elif op == STORE:
                t, ready = enqueue(cpu, c_store)
                why = _why(SCHEDULER, sched.last) if ready > t else _why(ISSUED, me)
                addr = col_dst[i]
                hit = outbound.get(addr >> shift) if shift < 64 else None
                if hit is None:
                    hit = outbound[addr >> shift] = path(pid, addr, False)
                route, private = hit
                a = col_a[i]
                if end[a] > ready:
                    ready, why = end[a], _why(PRODUCER, made.get(a, base | a))
                if comps.heap:
                    proc.at = i
                    yield from self._advance(proc, pe, comps, ready)
                pages = _pages(route, addr, col_rows[i], col_size[i], col_arg[i])
                if private:
                    start, done = dma.transfer(ready, col_size[i], route, pages)
                else:
                    proc.at = i
                    start, done = yield from shared(proc, dma, t, ready, col_size[i], route,
                                                    pages)
                whys[i] = _why(ENGINE, dma.last) if start > ready else why
                dma.last = me
                if dma.waited_on is not None:
                    proc.waits[me] = (dma.waited_on, dma.waited)
                heappush(held, (start, me))
                end[i] = done
                if done > landed[0]:
                    landed = (done, i)
                if log is not None:
                    log.append(pid, DMA, k_store, t, start, done, col_size[i], 0,
                               _tcm(tcm_base, col_src[i]), addr, i, True,
                               (dma.stream_at, dma.free_at), log.path(route[0]))
            elif op == COMPOSITE:
                proc.at = i
                yield from self._dispatch(proc, pe, comps, i)
                if sched.stalled_by >= 0:
                    cpus[i] = _why(QUEUE, sched.stalled_by)
                continue
            elif op == WAIT:  # on a composite, or (tl.fence) on every store before it
                t = cpu.issue(c_wait)
                a = col_a[i]
                until, a = (end[a], a) if a >= 0 else landed
                if until > t:
                    after[i] = (until, _why(PRODUCER, made.get(a, base | a)))
                cpu.wait_until(until)
                done = cpu.time
                starts[i], whys[i] = t, _why(ISSUED, me)
                if log is not None:
                    log.append(pid, CPU, k_wait, t, t, done, 0, 0, None, None, i)
            elif op == SEND:
                t, dispatched = enqueue(cpu, c_send)
                if t >= peek():
                    proc.at = i
                    proc.wake_at(t)
                    yield
                a = col_a[i]
                ready, why = dispatched, (_why(SCHEDULER, sched.last) if dispatched > t else
                                          _why(ISSUED, me))
                if end[a] > ready:
                    ready, why = end[a], _why(PRODUCER, made.get(a, base | a))
                done = yield from self._send(proc, pe, comps, i, t, ready, why)
            elif op == RECV:
                t = cpu.issue(c_recv)
                if t >= peek():
                    proc.at = i
                    proc.wake_at(t)
                    yield
                done = yield from self._recv(proc, pe, comps, i, t)
                end[i] = done
            elif op == CYCLES:
                t0 = cpu.time
                cpu.issue(cycles_to_ps(col_arg[i], self.clock_hz))
                done = t = cpu.time
                starts[i], whys[i] = t0, _why(ISSUED, me)
                if log is not None:
                    log.append(pid, CPU, k_cycles, t0, t0, done, 0, 0, None, None, i)
            elif op == READ:
                a = col_a[i]
                t = cpu.time
                if end[a] > t:
                    after[i] = (end[a], _why(PRODUCER, made.get(a, base | a)))
                cpu.wait_until(end[a])
                issued[i] = starts[i] = t
                whys[i] = _why(ISSUED, me)
                continue
            else:
                raise TimingError(f"unknown command kind {op}", pid, i, cpu.time)
            issued[i] = t
            if op <= MATH:  # an engine command: LOAD, STORE, DOT, MATH
                starts[i] = start
            if sched.stalled_by >= 0 and op not in (WAIT, RECV, CYCLES):
                cpus[i] = _why(QUEUE, sched.stalled_by)
            if done > last_end:
                last_end = done
        proc.at = n - 1
        yield from self._advance(proc, pe, comps, None)  # the composites still running
        proc.last_end = max(proc.last_end, last_end)
        if log is not None:
            marks.append(cpu.time)
            log.cpu.extend(self._cpu_slices(proc, marks))

    # ------------------------------------------------------------------ composites

    def _dispatch(self, proc: _Proc, pe: Pe, comps: _Composites, i: int) -> Iterator[None]:
        """Issue composite `i`: plan its tiles into the TCM free at dispatch, start them.

        With no plan fitting, PE_SCHEDULER holds the composite (and the commands behind
        it) until running composites free their tile buffers.
        """
        pid = pe.pid
        me = pid << PE_SHIFT | i
        stream = self.program.streams[pid]
        cpu, gemm, sched, end = pe.cpu, pe.gemm, pe.scheduler, proc.end
        t, dispatched = sched.enqueue(cpu, self.issue.composite, self.plan_ps)
        proc.issue[i] = t
        planned = dispatched
        log = self.oplog
        if log is not None and self.plan_ps:
            log.scheduler.append(Slice(pid, dispatched - self.plan_ps, dispatched, "plan", i))
        why = _why(SCHEDULER, sched.last) if dispatched > t + self.plan_ps else _why(ISSUED, me)
        if stream.arg[i] == NONE:  # never planned: the kernel failed in it
            heappush(sched.held, (dispatched, me))
            end[i] = proc.start[i] = dispatched
            proc.why[i] = why
            return
        desc = self.program.composites[stream.arg[i]]
        yield from self._advance(proc, pe, comps, dispatched)
        while True:
            free = self.tcm_bytes - stream.tcm[i] - comps.buffers(dispatched)
            tiling = plan_gemm(desc.m, desc.k, desc.n, desc.a_itemsize, desc.b_itemsize,
                               desc.out_itemsize, desc.a_tcm, desc.b_tcm, gemm.rows,
                               gemm.cols, gemm.dataflow, free, self._plan_costs(pid, desc),
                               desc.a_row_stride, desc.b_row_stride, desc.trans_b)
            if tiling is not None:
                break
            release = yield from self._next_release(proc, pe, comps, dispatched)
            if release is None:
                raise TimingError(f"tl.composite: no tile plan for a {desc.m}x{desc.k}x"
                                  f"{desc.n} GEMM fits the {free} B of free TCM", pid, i,
                                  cpu.time)
            dispatched, freer = release
            why = _why(TCM, freer)
        sched.free_at = max(sched.free_at, dispatched)  # it held the queue's head until now
        if log is not None and dispatched > planned:
            log.scheduler.append(Slice(pid, planned, dispatched, "wait for TCM", i))
        sched.last = me
        heappush(sched.held, (dispatched, me))
        ready = dispatched
        for dep in (stream.a[i], stream.b[i]):
            if dep >= 0:
                if end[dep] == PENDING:
                    yield from self._advance(proc, pe, comps, stop=comps.by_index[dep])
                if end[dep] > ready:
                    ready, why = end[dep], _why(PRODUCER, proc.made.get(dep, pid << PE_SHIFT
                                                                         | dep))
        proc.start[i], proc.why[i] = ready, why  # ready to run: where its tiles start from
        a = Operand(desc.m, desc.k, desc.a_itemsize, desc.a_tcm, desc.a_addr, desc.a_row_stride)
        b_shape = (desc.n, desc.k) if desc.trans_b else (desc.k, desc.n)
        b = Operand(*b_shape, desc.b_itemsize, desc.b_tcm, desc.b_addr, desc.b_row_stride)
        out = desc.out_addr if desc.out_addr >= 0 else None
        planned = traffic(tiling, a, b, desc.n, out is not None, desc.out_itemsize)
        self.planned_bytes += planned
        proc.planned += planned
        proc.current = i
        ops = tile_ops(ready, me, tiling, a, b, desc.n, desc.trans_b, out, desc.out_itemsize,
                       desc.out_row_stride, loads_from=dispatched)
        private = all(self._path(pid, addr, into)[1] for addr, into in self._operand_ends(desc))
        running = _Running(i, t, dispatched, ops, tiling, private)
        used = stream.tcm[i] + comps.buffers(dispatched) + tiling.tcm_bytes
        if used > proc.tcm_peak[0]:
            proc.tcm_peak = (used, dispatched, i)
        end[i] = PENDING
        comps.start(running)
        comps.seq += 1
        issued, first = next(ops)
        heappush(comps.heap, (issued, comps.seq, running, first))

    def _advance(self, proc: _Proc, pe: Pe, comps: _Composites, until: int | None = None,
                 stop: _Running | None = None, any_end: bool = False) -> Iterator[None]:
        """Run tile operations in issue order across the PE's composites (ties to the
        earlier composite): those issued up to `until` (all, if None); or until `stop`
        ends; or, with `any_end`, until one composite ends."""
        heap, peek = comps.heap, self.env.peek
        tiles = self._tiles.get(proc.pid)
        if tiles is None:
            tiles = self._tiles[proc.pid] = _Tiles(self, proc, pe)
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
            heapq.heappop(heap)
            proc.current = running.index
            done = []
            for op in tile_ops:
                kind = op[0]
                if kind == GEMM_TILE:
                    done.append(tiles.gemm(*op[1:]))
                else:
                    done.append((yield from tiles.move(kind == LOAD_TILE, *op[1:])))
            try:
                issued, tile_ops = running.ops.send(done)
                heappush(heap, (issued, seq, running, tile_ops))
            except StopIteration as finished:
                self._finish(proc, pe, comps, running, *finished.value)
                if any_end:
                    return

    def _next_release(self, proc: _Proc, pe: Pe, comps: _Composites,
                      t: int) -> Iterator[None]:
        """(when, what) the first composite holding tile buffers at `t` ends (running tiles as
        far as it takes to know), what being its last tile operation; None if none holds any."""
        while True:
            holders = comps.holders(t)
            if not holders:
                return None
            ended = [end for end in holders if isinstance(end, tuple)]
            if ended:  # one still running might end before the first known end: run to it
                yield from self._advance(proc, pe, comps, min(ended)[0])
                return min(end for end in comps.holders(t) if isinstance(end, tuple))
            yield from self._advance(proc, pe, comps, any_end=True)

    def _finish(self, proc: _Proc, pe: Pe, comps: _Composites, running: _Running,
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
        log = self.oplog
        if log is not None:
            stream = self.program.streams[pe.pid]
            i = running.index
            desc = self.program.composites[stream.arg[i]]
            tcm_base = self.system.amap.pe_tcm_addr(*pe.coord, 0)
            src = stream.src[i] if not desc.a_tcm else _tcm(tcm_base, stream.src[i]) or 0
            dst = stream.dst[i] if desc.out_addr >= 0 else tcm_base + stream.dst[i]
            log.append(pe.pid, SCHED, log.code("composite"), running.issued, running.dispatched,
                       done, stream.size[i], 2 * desc.m * desc.k * desc.n, src, dst, i, True)

    def _cpu_slices(self, proc: _Proc, marks: array) -> Iterator[Slice]:
        """PE_CPU's time command by command, from `marks` (its time on reaching each command,
        then before its issue; last, its time at the end): waits for TCM, the issue cost,
        then a stall for a queue slot and the command's own wait (a value, a message, a
        credit)."""
        pid, stream, cost = proc.pid, self.program.streams[proc.pid], issue_costs(self.issue)
        waits = {WAIT: "wait", RECV: "recv", READ: "read", SEND: "wait for IPCQ credit"}
        for i in range(proc.n):
            reached, before, after = marks[2 * i], marks[2 * i + 1], marks[2 * i + 2]
            op = stream.op[i]
            if before > reached:
                yield Slice(pid, reached, before, "wait for TCM", i)
            spent = (cycles_to_ps(stream.arg[i], self.clock_hz) if op == CYCLES else cost[op])
            issued = before + spent
            if spent:
                yield Slice(pid, before, issued, "cycles" if op == CYCLES else
                            f"issue {KINDS[op]}", i)
            if proc.issue[i] > issued:
                yield Slice(pid, issued, proc.issue[i], "stall: queue full", i)
                issued = proc.issue[i]
            if after > issued:
                yield Slice(pid, issued, after, waits.get(op, "stall"), i)

    def _tcm_room(self, proc: _Proc, pe: Pe, comps: _Composites, tensors: int) -> Iterator[None]:
        """Stall PE_CPU until its tensors (`tensors` bytes) and the running composites' tile
        buffers fit the TCM together."""
        t = pe.cpu.time
        while tensors + comps.buffers(t) > self.tcm_bytes:
            t, proc.tcm_wait = yield from self._next_release(proc, pe, comps, t)
            pe.cpu.wait_until(t)
        used = tensors + comps.buffers(t)
        if used > proc.tcm_peak[0]:
            proc.tcm_peak = (used, t, proc.at)

    # ------------------------------------------------------------------ transfers

    def _shared(self, proc: _Proc, dma: DmaEngine, issued: int, ready: int, nbytes: int,
                path: Path, pages: int) -> Iterator[None]:
        """A load's or store's transfer (issued at `issued`) over a path other PEs use too:
        fair-shared (`_flow`), or circuit-style, booked once global time reaches its issue
        (bookings on shared calendars in issue order); (start, end)."""
        if self.fair:
            return (yield from self._flow(proc, dma, ready, nbytes, path, pages))
        if issued >= self.env.peek():
            proc.wake_at(issued)
            yield
        return dma.transfer(ready, nbytes, path, pages)

    def _flow(self, proc: _Proc, dma: DmaEngine, ready: int, nbytes: int, path: Path,
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

    # ------------------------------------------------------------------ IPCQ

    def _send(self, proc: _Proc, pe: Pe, comps: _Composites, i: int, t: int, ready: int,
              why: int) -> Iterator[None]:
        """The chunks of send `i` (issued at `t`, its data ready at `ready` for reason
        `why`), each on a credit of the receiver's ring (waits for one); returns when the
        last chunk arrives."""
        stream = self.program.streams[pe.pid]
        me = pe.pid << PE_SHIFT | i
        dst, nbytes = stream.arg[i], stream.size[i]
        direction, ring, route, back, private = self._pair(pe.pid, dst)
        multicast = self.multicast
        rings = multicast.copies(pe.pid, dst, ring) if multicast is not None else [ring]
        cpu, log, dma = pe.cpu, self.oplog, pe.dma
        count = ring.chunks_for(nbytes)
        first = last = None
        for index in range(count):
            if len(rings) == 1:
                credit, credits = (yield from self._credit(proc, pe, i, dst, ring)), None
            else:
                credits = yield from multicast.credits(proc, pe, i, dst, rings, t, ready)
                credit = credits[0]
            free_at, slot, freer = credit
            if free_at > t and cpu.time > t:  # PE_CPU waited for this credit
                proc.after[i] = (cpu.time, _why(CREDIT, freer))
            size = min(ring.slot_bytes, nbytes - index * ring.slot_bytes)
            at, chunk_why = (free_at, _why(CREDIT, freer)) if free_at > ready else (ready, why)
            if comps.heap:
                yield from self._advance(proc, pe, comps, at)
            if private or not self.fair:
                start, end = dma.transfer(at, size, route)
            else:
                start, end = yield from self._flow(proc, dma, at, size, route)
            if first is None:
                first = start
                proc.start[i] = start
                proc.why[i] = _why(ENGINE, dma.last) if start > at else chunk_why
            dma.last = me
            if dma.waited_on is not None:
                proc.waits[me] = (dma.waited_on, dma.waited)
            chunk = Chunk(pe.pid, index, count, nbytes, slot, end, back, me)
            self._deliver(ring, chunk, at)
            for each, credit in zip(rings[1:], credits[1:] if credits else (), strict=True):
                mine = credit[1] if credit is not None else slot  # the copy's own slot
                self._deliver(each, chunk if mine == slot else chunk._replace(slot=mine), at)
            last = end if last is None or end > last else last
            if log is not None:
                amap = self.system.amap
                log.append(pe.pid, DMA, log.code("send"), t, start, end, size, 0,
                           _tcm(amap.pe_tcm_addr(*pe.coord, 0), stream.src[i]),
                           amap.pe_ipcq_slot_addr(*self.system.coords[dst], direction, slot),
                           i, index == 0, (dma.stream_at, dma.free_at), log.path(route[0]))
        pe.scheduler.hold(first, me)
        proc.end[i] = last
        return last

    def _credit(self, proc: _Proc, pe: Pe, i: int, dst: int, ring: Ring) -> Iterator[None]:
        """A credit of `ring` for send `i` of `pe` to PE `dst`: the earliest, waited for if
        there is none."""
        ties, cpu, env = self.ties, pe.cpu, self.env
        credit = ring.take_credit()
        if ties is not None:
            self._credit_used(ring, pe.pid, credit)
        while credit is None:
            ring.sender_waiting.append(proc)
            proc.at, proc.waiting = i, self.full_ring(dst, ring)
            yield
            ring.sender_waiting.remove(proc)
            proc.waiting = ""
            cpu.wait_until(env.now)
            credit = ring.take_credit()
            if ties is not None:
                self._credit_used(ring, pe.pid, credit, woken=True)
        return credit

    def full_ring(self, dst: int, ring: Ring) -> str:
        """What a sender to PE `dst` waits for when `ring` has no credit."""
        return f"send to PE ({self.system.coords[dst]}): its {ring.where[1]} ring is full"

    def _deliver(self, ring: Ring, chunk: Chunk, at: int) -> None:
        """Put `chunk` (its credit taken at `at`) in `ring`; wake its waiting receiver."""
        if ring.trail is not None:
            ring.trail.append((at, 1))
        ring.chunks.append(chunk)
        if self.ties is not None:
            self._met(ring, chunk.sender)
        waiting = ring.receiver_waiting
        if waiting is not None:
            ring.receiver_waiting = None
            waiting.wake_at(self.env.now)
            if self.ties is not None:  # it goes on after this, whatever the order of PEs
                ring.seen["chunks"] = (self.env.now, waiting.pid)

    def _recv(self, proc: _Proc, pe: Pe, comps: _Composites, i: int,
              t: int) -> Iterator[None]:
        """Take receive `i`'s chunks from the ring (waits for them), each copied out of its
        slot by PE_DMA; returns when the last copy is done.

        For the critical path the receive is a DMA operation: from the start of the
        copies that kept PE_DMA busy to its end, started by what the first of them
        waited for (the chunk's arrival, the engine, or the issue).
        """
        stream = self.program.streams[pe.pid]
        me = pe.pid << PE_SHIFT | i
        src, nbytes = stream.arg[i], stream.size[i]
        direction, ring, _, _, _ = self._pair(src, pe.pid, sending=False)
        sender = self.rep_of[src] if self.rep_of is not None else src
        cpu, env, dma, log = pe.cpu, self.env, pe.dma, self.oplog
        slot_bytes = ring.slot_bytes
        amap = self.system.amap
        tcm_base = amap.pe_tcm_addr(*pe.coord, 0)
        copy_code = log.code("recv copy") if log is not None else 0
        done = t
        began = [t, _why(ISSUED, me), -1]  # the copies' start, why, and the last one's end

        def copy(chunk: Chunk) -> int:
            size = min(slot_bytes, chunk.nbytes - chunk.index * slot_bytes)
            ready = cpu.time if cpu.time > chunk.arrival else chunk.arrival
            busy_with = dma.last
            start, end = dma.transfer(ready, size, _LOCAL)
            if start > began[2]:  # PE_DMA was not busy with this receive's copies
                began[0], began[1] = start, (
                    _why(ENGINE, busy_with) if start > ready and busy_with >= 0 else
                    _why(MESSAGE, chunk.who) if chunk.arrival > cpu.time else _why(ISSUED, me))
            began[2] = end
            dma.last = me
            if log is not None:
                log.append(pe.pid, DMA, copy_code, ready, start, end, size, 0,
                           amap.pe_ipcq_slot_addr(*pe.coord, direction, chunk.slot),
                           _tcm(tcm_base, stream.dst[i]), i, False,
                           (dma.stream_at, dma.free_at))
            return end

        if comps.heap:  # tile operations issued before it go first on PE_DMA
            yield from self._advance(proc, pe, comps, cpu.time)
        for _ in range(ring.chunks_for(nbytes)):
            credits = len(ring.credits)
            taken = self._take(ring, pe.pid, sender, copy, me)
            while taken is None:
                self._wake_senders(ring, credits)
                ring.receiver_waiting = proc
                proc.at = i
                proc.waiting = (f"recv from PE ({self.system.coords[src]}) on its {direction} "
                                "ring")
                yield
                proc.waiting = ""
                cpu.wait_until(env.now)
                credits = len(ring.credits)
                taken = self._take(ring, pe.pid, sender, copy, me)
            self._wake_senders(ring, credits)
            if taken[1] > done:
                done = taken[1]
        cpu.wait_until(done)
        if began[2] < 0:  # every chunk was copied aside before this receive
            began[1] = _why(ISSUED, me)
        proc.start[i], proc.why[i] = min(began[0], done), began[1]
        if done > t:
            proc.after[i] = (done, _why(PRODUCER, me))
        if log is not None:
            log.append(pe.pid, CPU, log.code("recv"), t, t, done, nbytes, 0,
                       amap.pe_ipcq_slot_addr(*pe.coord, direction, 0),
                       _tcm(tcm_base, stream.dst[i]), i)
        return done

    def _take(self, ring: Ring, pid: int, sender: int, copy, who: int):
        """`ring.take`, its uses of chunks and credits noted if ties are looked for."""
        if self.ties is None:
            return ring.take(sender, copy, who)
        self._met(ring, pid)
        ring.gave = []
        taken = ring.take(sender, copy, who)
        self._credit_used(ring, pid, ring.gave)
        ring.gave = None
        return taken

    @staticmethod
    def _wake_senders(ring: Ring, credits_before: int) -> None:
        """Wake the senders waiting on `ring` when its earliest credit is back, if taking
        chunks gave credits back. They stay waiting until they resume: a credit given
        back later may be back sooner (its way back is shorter), and wakes them sooner."""
        if len(ring.credits) > credits_before and ring.sender_waiting:
            at = ring.credits[0][0]  # a heap: the earliest credit is its head
            for proc in ring.sender_waiting:
                if proc.offers is not None:  # a multicast waiting on several rings
                    offer = max(at, proc.env.now)
                    if proc.offers.get(id(ring), offer) >= offer:
                        proc.offers[id(ring)] = offer
                proc.wake_by(at)


class _Tiles:
    """How PE `pe`'s composites run tile operations; each is recorded in `proc.tiles` (its
    reference: the PE's command count plus its position there)."""

    def __init__(self, timing: Timing, proc: _Proc, pe: Pe):
        self.timing, self.proc, self.pe = timing, proc, pe
        self.base = pe.pid << PE_SHIFT
        self.args = timing.program.streams[pe.pid].arg
        log = timing.oplog
        self.codes = (tuple(log.code(k) for k in ("gemm_tile", "load_tile", "store_tile"))
                      if log is not None else (0, 0, 0))

    def _record(self, engine: InOrderEngine, code: int, ready: int, after: int, start: int,
                end: int) -> int:
        proc = self.proc
        me = self.base | (proc.n + len(proc.tiles))
        why = _why(ENGINE, engine.last) if start > ready else _why(PRODUCER, after)
        proc.tiles.append((start, end, why, code, proc.current))
        engine.last = me
        return me

    def _sizes(self) -> list:
        """[largest tile per operand, largest output tile] of the composite running now."""
        proc = self.proc
        sizes = proc.tile_buffers.get(proc.current)
        if sizes is None:
            sizes = proc.tile_buffers[proc.current] = [{}, 0]
        return sizes

    def gemm(self, ready: int, after: int, m: int, k: int, n: int) -> tuple[int, int, int]:
        proc, gemm, log = self.proc, self.pe.gemm, self.timing.oplog
        desc = self.timing.program.composites[self.args[proc.current]]
        start, end = gemm.run(ready, m, k, n, max(desc.a_itemsize, desc.b_itemsize))
        sizes = self._sizes()
        sizes[1] = max(sizes[1], m * n)
        me = self._record(gemm, GEMM, ready, after, start, end)
        if log is not None:
            log.append(self.pe.pid, GEMM, self.codes[0], ready, start, end, 0, 2 * m * k * n,
                       None, None, proc.current, shape=log.gemm_shape(m, k, n))
        return start, end, me

    def move(self, inbound: bool, ready: int, after: int, *where) -> Iterator[None]:
        """A tile load (`where`: operand, first row and column, rows, columns) or an output
        tile's store (address, rows, row bytes, stride bytes); (start, end, reference)."""
        if inbound:
            op, r0, c0, rows, cols = where
            addr = op.addr + (r0 * op.row_stride + c0) * op.itemsize
            row_bytes, stride = cols * op.itemsize, op.row_stride * op.itemsize
            largest = self._sizes()[0]
            largest[id(op)] = max(largest.get(id(op), 0), rows * row_bytes)
        else:
            addr, rows, row_bytes, stride = where
        timing, proc, pe, dma = self.timing, self.proc, self.pe, self.pe.dma
        route, private = timing._path(pe.pid, addr, inbound)
        nbytes = rows * row_bytes
        pages = _pages_of(route, addr, rows, row_bytes, stride)
        if private or not timing.fair:
            start, end = dma.transfer(ready, nbytes, route, pages)
        else:
            start, end = yield from timing._flow(proc, dma, ready, nbytes, route, pages)
        me = self._record(dma, DMA, ready, after, start, end)
        if dma.waited_on is not None:
            proc.waits[me] = (dma.waited_on, dma.waited)
        log = timing.oplog
        if log is not None:
            log.append(pe.pid, DMA, self.codes[1 if inbound else 2], ready, start, end, nbytes,
                       0, addr if inbound else None, None if inbound else addr, proc.current,
                       False, (dma.stream_at, dma.free_at), log.path(route[0]))
        return start, end, me


def issue_costs(issue) -> dict[int, int]:
    """PE_CPU's issue cost (ps) per command kind, from the cost table's `issue` section
    (CYCLES: its own count; READ: none)."""
    return {LOAD: issue.load, STORE: issue.store, DOT: issue.dot, MATH: issue.math,
            COMPOSITE: issue.composite, WAIT: issue.wait, SEND: issue.send, RECV: issue.recv,
            READ: 0}


def _pages(path: Path, addr: int, rows: int, nbytes: int, span: int) -> int:
    """DRAM pages a load or store of `rows` rows (`nbytes` in all, over `span` bytes from
    `addr`) opens at the HBM end of `path` (0 if it has none)."""
    if not nbytes:
        return 0
    row = nbytes // rows
    return _pages_of(path, addr, rows, row, (span - row) // (rows - 1) if rows > 1 else row)


def _pages_of(path: Path, addr: int, rows: int, row_bytes: int, stride: int) -> int:
    """DRAM pages `rows` rows of `row_bytes`, `stride` bytes apart from `addr`, open at the
    HBM end of `path` (0 if it has none)."""
    resources = path[0]
    page = resources[0].page_bytes if resources else 0
    return pages_opened(addr % page, rows, row_bytes, stride, page) if page else 0


#: The way of a copy inside a PE (an IPCQ slot to TCM): no shared resource, no latency.
_LOCAL: Path = ((), 0, 0)


def _tcm(base: int, offset: int) -> int | None:
    """The address of TCM offset `offset` (None for NONE: a view has no TCM of its own)."""
    return None if offset < 0 else base + offset


__all__ = ["OP_FIELDS", "GemmTiling", "OpLog", "Stuck", "Timing", "TimingError"]
