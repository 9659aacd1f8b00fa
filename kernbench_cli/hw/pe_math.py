"""PE_MATH: a vector unit of `lanes` lanes with a per-op-class cost; its step in the walk."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from heapq import heappush
from typing import TYPE_CHECKING

from kernbench_cli.config.schema import MathConfig
from kernbench_cli.hw.causes import ENGINE, ISSUED, PRODUCER, SCHEDULER, because, by
from kernbench_cli.hw.engine import InOrderEngine, cycles_to_ps
from kernbench_cli.hw.engines import PE_MATH

if TYPE_CHECKING:
    from kernbench_cli.hw.walk import Walk

#: `because(ISSUED, ref)` and `because(PRODUCER, ref)` as ``BY_… | ref`` for a known `ref`
#: (>= 0), in the step
BY_ISSUE, BY_PRODUCER = by(ISSUED), by(PRODUCER)


class MathEngine(InOrderEngine):
    """A pipelined vector unit: ``ceil(elements / lanes) * op_cycles[kind]`` cycles of issue
    per command, and the result ready ``latency[kind]`` cycles after its last element.

    `kind` is one of the `[pe.math.op_cycles]` classes (add, mul, div, cmp,
    exp, log, sqrt, reduce, cast); elements are those of the result, or of
    the input for a reduction. The unit takes the next command as soon as the
    last element of one has entered the pipeline (busy time is the issue
    cycles), so independent commands overlap their latencies and only a
    command that consumes a result waits for it (its producer's end includes
    the latency).
    """

    __slots__ = ("by_class", "clock_hz", "elements", "lanes", "latency", "op_cycles")

    def __init__(self, config: MathConfig, clock_hz: int):
        super().__init__()
        self.elements = 0  # elements computed (the timing pass counts them)
        self.lanes, self.clock_hz = config.lanes, clock_hz
        # per op class: cycles a lane-group, latency; shared by every PE of a system (read
        # only), made once per configuration
        self.op_cycles, self.latency = _tables(config, clock_hz)
        self.by_class = dict.fromkeys(self.op_cycles, 0)  # elements by op class

    def duration_ps(self, kind: str, elements: int) -> int:
        """Issue time of a command: how long it holds the unit."""
        cycles = -(-elements // self.lanes) * self.op_cycles[kind]
        return cycles_to_ps(cycles, self.clock_hz)

    def run(self, ready: int, kind: str, elements: int) -> tuple[int, int]:
        """(start, when the result is ready)."""
        start, end = self.occupy(ready, self.duration_ps(kind, elements))
        return start, end + self.latency[kind]


#: (configuration, clock, its tables) of the last `_tables` made: one tuple, replaced
#: whole, so that a thread sees a configuration with its own tables
_last: tuple = (None, 0, None)


def _tables(config: MathConfig, clock_hz: int) -> tuple[dict[str, int], dict[str, int]]:
    """`MathEngine`'s op cycles and latencies (in ps) by op class; those of the last
    configuration asked for again without a look at its fields (every PE of a system has
    the one configuration object; hashing it walks every field)."""
    global _last
    last = _last
    if last[0] is config and last[1] == clock_hz:
        return last[2]
    tables = ({f.name: getattr(config.op_cycles, f.name) for f in fields(config.op_cycles)},
              {f.name: cycles_to_ps(getattr(config.latency, f.name), clock_hz)
               for f in fields(config.latency)})
    _last = (config, clock_hz, tables)
    return tables


def math_step(walk: Walk) -> Callable:
    """PE_MATH's step in `walk`: a MATH `i`, once its operands are ready. ``step(i)``
    returns (issue, end). Made once per PE (see `dma.transfer_step`)."""
    pe_math, stream, timing, sched, cpu = walk.pe.math, walk.stream, walk.timing, walk.sched, \
        walk.cpu
    enqueue, cost, col_a, col_b, size, arg = sched.enqueue, walk.issue.math, stream.a, \
        stream.b, stream.size, stream.arg
    end, starts, whys, held, made, base = walk.end, walk.starts, walk.whys, walk.held, \
        walk.made, walk.base
    math_ps, kinds, log, pid = timing.math_ps, timing.math_kinds, walk.log, walk.pid

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
            op_class = kinds[key[0]][0]
            costs = math_ps[key] = (pe_math.duration_ps(op_class, key[1]),
                                    pe_math.latency[op_class], op_class)
        start, done = pe_math.occupy(ready, costs[0])
        done += costs[1]
        me = base | i
        whys[i] = (because(ENGINE, pe_math.last) if start > ready else
                   BY_PRODUCER | made.get(after, base | after) if after >= 0 else
                   because(SCHEDULER, sched.last) if queued else BY_ISSUE | me)
        pe_math.last = me
        pe_math.elements += key[1]
        pe_math.by_class[costs[2]] += key[1]
        heappush(held, (start, me))
        starts[i], end[i] = start, done
        if log is not None:
            log.append(pid, PE_MATH, kinds[key[0]][1], t, start, done, 0, key[1], None,
                       walk.tcm(stream.dst[i]), i, True,
                       (start, done - costs[1]))
        return t, done

    return step
