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

The pass is in parts: `Timing` (here) runs the PEs' walks, by classes where
dedup may (`hw.symmetry`, `hw.dedup`); `hw.walk` is one PE's walk, the loop
and a dispatch by command kind to each engine's step (`hw.dma`, `hw.gemm`,
`hw.pe_math`); `hw.process` its records and composites in flight. `Timing` holds
the parts the walks call, each an object with its own state: `routes`
(`hw.routes`: paths, rings, shared calendars, transfers), `composites`
(`hw.tiles`: composites' dispatch and tile operations) and `ipcq`
(`hw.messages`).
"""

from __future__ import annotations

import gc
from array import array
from collections.abc import Iterator

from kernbench_cli import gc_control
from kernbench_cli.hw.composite import GemmTiling
from kernbench_cli.hw.dedup import Ghosts, expand, overlaps, tie_faults
from kernbench_cli.hw.engine import cycles_to_ps
from kernbench_cli.hw.flows import FairShare
from kernbench_cli.hw.messages import Ipcq
from kernbench_cli.hw.multicast import Multicast
from kernbench_cli.hw.network import LEDGER
from kernbench_cli.hw.oplog import OP_FIELDS, OpLog, Slice
from kernbench_cli.hw.process import TOO_LATE, Clock, PeProcess, Stuck, TimeRangeError, TimingError
from kernbench_cli.hw.routes import Routes
from kernbench_cli.hw.symmetry import Classes, partition
from kernbench_cli.hw.system import System
from kernbench_cli.hw.tiles import CompositeRuns
from kernbench_cli.hw.walk import Walk
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
    Program,
)

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
        self.around = None  # the PEs' surroundings (`hw.symmetry`), made once
        self.multicast: Multicast | None = None
        #: (ring's PE, direction, PE, PE, "credits" or "chunks"): representatives that used
        #: a ring's credits or chunks at one time, in that order
        self.ties: set[tuple[int, str, int, int, str]] | None = None
        self.system = system
        self.program = program
        self.env = Clock()
        self.issue = topo.cost_table.issue  # PE_CPU's cost per command kind
        self.plan_ps = topo.cost_table.scheduler.plan
        self.tcm_bytes = topo.pe.tcm.size
        self.clock_hz = topo.pe.clock
        self.oplog = OpLog() if oplog else None
        self.procs = [PeProcess(self.env, pe.pid) for pe in system.pes]
        self.stuck: list[Stuck] = []
        self.planned_bytes = 0  # what composites' plans move, by formula (invariants)
        #: per MATH kind of the program: (op class, its name, or its op log code)
        self.math_kinds = [(kind, name) for kind, name in program.math_kinds]
        #: (math kind, elements) -> (issue time, latency, op class)
        self.math_ps: dict[tuple[int, int], tuple[int, int, str]] = {}
        self.fair = topo.network.sharing == "fair"
        self.flows = FairShare(self.env)
        # Energy by region: the DMA engines' ledger (`DmaEngine.ledger`), a row per named
        # region, and per PE the region of each command (0, outside any, on a PE that
        # names none; None: the kernel names none at all)
        self.ledger = [[0] * len(LEDGER) for _ in program.regions]
        self.leaves: list[array] | None = [
            array("I", program.region_of(pid)) for pid in range(len(program.streams))] \
            if len(program.regions) > 1 else None
        for pe in system.pes:
            pe.dma.ledger, pe.dma.region, pe.dma.weight = self.ledger, 0, 1
        self.routes = Routes(self)
        self.composites = CompositeRuns(self)
        self.ipcq = Ipcq(self)

    # ------------------------------------------------------------------ the run

    def run(self) -> None:
        """Time every stream; afterwards `latency_ps`, `stuck` and the PEs' engines tell.

        The garbage collector waits until the pass ends (`gc_control.paused`): it walked
        the run's millions of long-lived objects again and again, a quarter of the pass
        on a rack, and the pass leaves no cycles for it to free.
        """
        with gc_control.paused():
            if not self.dedup or len(self.procs) < 2:
                self.routes.mark_shared()
                self._run(self.procs)
            else:
                self._run_classes()
            if self.oplog is not None:
                self.oplog = self.oplog.ordered()

    def _run_classes(self) -> None:
        """Time one representative per class (`hw.symmetry`); where a check of `hw.dedup`
        fails (a member's transfer met another PE's, a multicast's copies got different
        credits, representatives met on a ring out of their members' order), split the
        class and time again; an error or a deadlock is found again by the full pass. Then
        give every PE its representative's results (`dedup.expand`)."""
        forced: set[int] = set()
        split = self.split
        while True:
            self.tries += 1
            self.routes.mark_shared()
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
        for rep, members in zip(classes.rep, classes.members, strict=True):
            self.system.pes[rep].dma.weight = len(members)  # its transfers count for each
        self.ghosts = Ghosts({r for r, m in zip(classes.rep, classes.members, strict=True)
                              if len(m) > 1})
        self.ties = set()
        self.multicast = Multicast(self)
        self.routes.clear()

    def _reset(self) -> None:
        """Fresh engines, calendars, rings and records, for another pass; the last pass's
        (SimPy events and PE walks that refer to each other) collected now, as the
        collector waits until the end of `run` and they are no use to anyone."""
        kept = self.tries, self.split, self.around
        self.system.__init__(self.system.amap)
        self.__init__(self.system, self.program, self.oplog is not None, self.dedup)
        self.tries, self.split, self.around = kept
        gc.collect()

    def _run(self, procs: list[PeProcess]) -> None:
        if self.oplog is not None:
            log = self.oplog
            self.math_kinds = [(kind, log.code(name)) for kind, name in self.program.math_kinds]
        pes = self.system.pes
        for proc in procs:
            proc.gen = Walk(self, proc, pes[proc.pid]).steps()
            proc.wake_at(0)
        try:
            self.env.run()
        except OverflowError:  # in an event no PE's walk runs (a fair-shared flow's end)
            raise TimeRangeError(TOO_LATE, 0, 0, self.env.now) from None
        errors = [proc.error for proc in procs if proc.error is not None]
        if errors and len(procs) == len(self.procs):  # the earliest in simulated time, as if
            raise min(errors, key=lambda exc: (exc.time_ps, exc.pid))  # the run had stopped
        for proc in procs:
            if not proc.done:
                self.stuck.append(Stuck(proc.pid, proc.at, proc.waits_for(),
                                        pes[proc.pid].cpu.time))

    @property
    def latency_ps(self) -> int:
        return max((max(proc.last_end, pe.finish)
                    for proc, pe in zip(self.procs, self.system.pes, strict=True)), default=0)

    @property
    def events(self) -> int:
        return sum(proc.events for proc in self.procs)

    def cpu_slices(self, proc: PeProcess, marks: array) -> Iterator[Slice]:
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


def issue_costs(issue) -> dict[int, int]:
    """PE_CPU's issue cost (ps) per command kind, from the cost table's `issue` section
    (CYCLES: its own count; READ: none)."""
    return {LOAD: issue.load, STORE: issue.store, DOT: issue.dot, MATH: issue.math,
            COMPOSITE: issue.composite, WAIT: issue.wait, SEND: issue.send, RECV: issue.recv,
            READ: 0}


__all__ = ["OP_FIELDS", "GemmTiling", "OpLog", "Stuck", "Timing", "TimingError"]
