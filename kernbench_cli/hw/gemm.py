"""PE_GEMM: a rows x cols systolic array, output-, weight- or input-stationary.

Its rate follows the format it multiplies in (`formats.gemm_datapath`): the
16-bit datapath one MAC per cell per cycle, f32 `pe.gemm.passes.f32` passes
of it, and a narrow datapath `pe.gemm.macs_per_cell.<datapath>` MACs per cell
per cycle, K elements at a time: the cycles of a GEMM with K divided by that
(rounded up).
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from heapq import heappush
from typing import TYPE_CHECKING

from kernbench_cli.config.schema import GemmConfig
from kernbench_cli.formats import F32, FORMATS
from kernbench_cli.hw.causes import ENGINE, ISSUED, PRODUCER, SCHEDULER, because
from kernbench_cli.hw.engine import InOrderEngine, cycles_to_ps
from kernbench_cli.hw.engines import PE_GEMM

if TYPE_CHECKING:
    from kernbench_cli.hw.walk import Walk

DATAFLOWS = ("os", "ws", "is")


def gemm_cycles(m: int, k: int, n: int, rows: int, cols: int, dataflow: str = "os") -> int:
    """Cycles of C[m,n] = A[m,k] @ B[k,n] on an R x C systolic array, by dataflow.

    The array is folded over the GEMM; folds run back to back, each streaming
    the temporal dimension through the array plus the cycles to fill and
    drain its skew:

    - ``os`` (output stationary: C tiles stay): ``ceil(m/R) * ceil(n/C)``
      folds of ``k + R + C - 2`` cycles;
    - ``ws`` (weight stationary: B tiles stay, R rows load first):
      ``ceil(k/R) * ceil(n/C)`` folds of ``m + 2R + C - 2``;
    - ``is`` (input stationary: A tiles stay): ``ceil(k/R) * ceil(m/C)``
      folds of ``n + 2R + C - 2``.

    This is the number of cycles; SCALE-Sim 3.0.0 reports one less (the index
    of the last cycle) for every shape tried, stall-free
    (benchmarks/scalesim_check.py runs it; tests/model/test_gemm.py keeps its table).
    The tile planner of composites and the engine use this one function.
    """
    if dataflow == "os":
        return -(-m // rows) * -(-n // cols) * (k + rows + cols - 2)
    if dataflow == "ws":
        return -(-k // rows) * -(-n // cols) * (m + 2 * rows + cols - 2)
    if dataflow == "is":
        return -(-k // rows) * -(-m // cols) * (n + 2 * rows + cols - 2)
    raise ValueError(f"unknown dataflow {dataflow!r} (known: {', '.join(DATAFLOWS)})")


def array_rate(config: GemmConfig, code: int) -> tuple[int, int]:
    """(passes, MACs per cell per cycle) of the array multiplying in stream format `code`:
    `pe.gemm.passes.f32` passes for f32, `.f16` for 16-bit floats; one pass of
    `pe.gemm.macs_per_cell.<datapath>` MACs per cell for a narrow format."""
    fmt = FORMATS[code]
    if fmt.narrow:
        return 1, getattr(config.macs_per_cell, fmt.array)
    return (config.passes.f32 if code == F32 else config.passes.f16), 1


def gemm_work(config: GemmConfig, m: int, k: int, n: int, code: int) -> tuple[str, int]:
    """What one GEMM counts for energy: ("", MACs x array passes) on the 16-bit datapath,
    or (the narrow datapath, MACs)."""
    fmt = FORMATS[code]
    if fmt.narrow:
        return fmt.array, m * k * n
    return "", m * k * n * array_rate(config, code)[0]


def peak_macs(config: GemmConfig, mac_passes: int, macs: dict[str, int]) -> Fraction:
    """The array's work in cell-cycles at its peak: MAC passes on the 16-bit datapath, and
    each narrow datapath's MACs over the MACs a cell does per cycle on it."""
    return mac_passes + sum((Fraction(n, getattr(config.macs_per_cell, array))
                             for array, n in macs.items()), Fraction(0))


class GemmEngine(InOrderEngine):
    """In-order GEMM engine; one `run` per dot or per composite tile. `flops` counts 2·m·k·n.

    A GEMM takes `gemm_cycles`, with K over the MACs per cell of its datapath, times its
    passes (`array_rate`): an f32 GEMM on a bf16 array runs every fold several times, an
    fp8 one streams K two elements at a time. `mac_passes` counts MACs x passes on the
    16-bit datapath, `macs` the MACs of each narrow one (energy).
    """

    __slots__ = ("clock_hz", "cols", "config", "costs", "dataflow", "flops", "mac_passes",
                 "macs", "rates", "rows")

    def __init__(self, config: GemmConfig, clock_hz: int):
        super().__init__()
        self.rows, self.cols, self.clock_hz = config.rows, config.cols, clock_hz
        self.dataflow = config.dataflow
        self.config = config
        self.flops = 0
        self.mac_passes = 0  # MACs x the array passes their width takes (energy)
        self.macs: dict[str, int] = {}  # MACs on each narrow datapath (energy)
        #: format -> (passes, MACs per cell, narrow datapath or ""): the `array_rate`s asked
        self.rates: dict[int, tuple[int, int, str]] = {}
        # (m, k, n, format) -> (duration, narrow datapath or "", MACs or MAC passes): a
        # composite's tiles repeat a few shapes
        self.costs: dict[tuple[int, int, int, int], tuple[int, str, int]] = {}

    def _rate(self, code: int) -> tuple[int, int, str]:
        rate = self.rates.get(code)
        if rate is None:
            fmt = FORMATS[code]
            rate = self.rates[code] = (*array_rate(self.config, code),
                                       fmt.array if fmt.narrow else "")
        return rate

    def duration_ps(self, m: int, k: int, n: int, code: int) -> int:
        passes, per_cell, _ = self._rate(code)
        cycles = gemm_cycles(m, -(-k // per_cell), n, self.rows, self.cols, self.dataflow)
        return cycles_to_ps(cycles * passes, self.clock_hz)

    def count(self, flops: int, work: tuple[str, int]) -> None:
        """Count a GEMM of `flops` and its `gemm_work`."""
        self.flops += flops
        datapath, amount = work
        if datapath:
            self.macs[datapath] = self.macs.get(datapath, 0) + amount
        else:
            self.mac_passes += amount

    def run(self, ready: int, m: int, k: int, n: int, code: int) -> tuple[int, int]:
        """A composite's GEMM tile of m x k x n in format `code`, ready at `ready`: (start,
        end). Its duration and what it counts for energy are made once per shape (a
        composite's tiles repeat a few); the engine is taken as `occupy` takes it."""
        key = (m, k, n, code)
        cost = self.costs.get(key)
        if cost is None:
            passes, _, datapath = self._rate(code)
            cost = self.costs[key] = (self.duration_ps(m, k, n, code), datapath,
                                      m * k * n * (1 if datapath else passes))
        duration, datapath, work = cost
        self.flops += 2 * m * k * n
        if datapath:  # as `count` does with `gemm_work`
            self.macs[datapath] = self.macs.get(datapath, 0) + work
        else:
            self.mac_passes += work
        start = ready if ready > self.free_at else self.free_at
        self.free_at = end = start + duration
        self.busy_ps += duration
        self.ops += 1
        return start, end


def dot_step(walk: Walk) -> Callable:
    """PE_GEMM's step in `walk`: a DOT `i`, once its operands are ready and the tile
    operations issued before then have run: ``step(i)`` returns (issue, end), or, where
    tile operations must run first, a generator to run for them, to book with
    ``step(i, waited)``. Made once per PE (see `dma.transfer_step`)."""
    proc, pe, gemm, stream, comps = walk.proc, walk.pe, walk.pe.gemm, walk.stream, walk.comps
    advance = walk.timing.composites.advance
    sched, cpu, cost, col_a, col_b = walk.sched, walk.cpu, walk.issue.dot, stream.a, stream.b
    enqueue, size, arg = sched.enqueue, stream.size, stream.arg
    end, starts, whys, held, made, base = walk.end, walk.starts, walk.whys, walk.held, \
        walk.made, walk.base
    shapes, gemm_ps, log, heap = walk.timing.program.gemm_shapes, walk.gemm_ps, walk.log, \
        comps.heap

    def waits(i, t, ready, why):
        proc.at = i
        yield from advance(proc, pe, comps, ready)
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
            log.append(proc.pid, PE_GEMM, walk.codes["dot"], t, start, done, 0, size[i],
                       walk.tcm(stream.src[i]),
                       walk.tcm(stream.dst[i]), i, True,
                       shape=log.gemm_shape(*shapes[shape][:3]))
        return t, done

    return step
