"""CPU and wall time per command of each pass, against a bare SimPy + greenlet loop.

Runs `gqa_attention` with `model=llama3-8b` (its default seq_len: 2 positions
per PE on the rack, as `kernbench run` picks it) timing-only in this process,
on `sip` (128 PEs) and `rack` (8,192 PEs; 1.7 million commands). Per case:

- the functional pass (the kernel's Python, `tl`, TCM allocation, stream
  columns) and the timing pass (the same streams timed again, alone), each in
  CPU microseconds per command (`time.process_time`) and wall microseconds
  per command, and the ratio of its CPU per command to the bare loop's;
- the time the garbage collector spent inside each pass (`gc.callbacks`),
  its share of the pass and how many collections ran (full ones in brackets):
  the collector walking millions of long-lived objects is what made the
  timing pass superlinear in PEs.

The baseline, measured in the same run on as many PEs and commands: one
SimPy process per PE drives a greenlet, and each command costs one timeout
and one greenlet round trip (`sim_throughput.bare_loop_times`). The machine
is shared: each figure is the least of `--repeat` runs, and the ratios are
the result.

    python benchmarks/pass_cpu.py [--topology sip --topology rack] [--values] [--repeat N]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from sim_throughput import bare_loop_times

from kernbench_cli.address import load_address_map
from kernbench_cli.hw.system import System
from kernbench_cli.hw.timing import Timing
from kernbench_cli.sim.kernels import load_kernel, parse_params
from kernbench_cli.sim.run import run_kernel
from kernbench_cli.sim.watch import Watch


class Collector:
    """Seconds and collections (all, full) the garbage collector ran while `on`."""

    def __init__(self) -> None:
        self.on = False
        self.seconds = 0.0
        self.collections = self.full = 0
        self._start = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if not self.on:
            return
        if phase == "start":
            self._start = time.perf_counter()
            return
        self.seconds += time.perf_counter() - self._start
        self.collections += 1
        self.full += info["generation"] == 2  # the oldest generation

    def reset(self) -> None:
        self.seconds, self.collections, self.full = 0.0, 0, 0


class PassClock(Watch):
    """A `Watch` that notes CPU and wall time, and the collector's, where each pass begins."""

    def __init__(self, collector: Collector):
        super().__init__()
        self.collector = collector
        self.marks: dict[str, tuple[float, float, float, int, int]] = {}

    def begin(self, phase: str, what) -> None:
        super().begin(phase, what)
        c = self.collector
        self.marks[phase] = (time.process_time(), time.perf_counter(), c.seconds,
                             c.collections, c.full)


def functional_pass(kernel, amap, params, values: bool, collector: Collector):
    """(cpu s, wall s, gc s, collections, full ones, result) of the functional pass of one
    run: from its start to the timing pass's."""
    clock = PassClock(collector)
    collector.reset()
    collector.on = True
    try:
        result = run_kernel(kernel, amap, params, timing_only=not values, watch=clock)
    finally:
        collector.on = False
    first, then = clock.marks["functional pass"], clock.marks["timing pass"]
    return (*(b - a for a, b in zip(first, then, strict=True)), result)


def timing_pass(amap, program, collector: Collector) -> tuple[float, float, float, int, int]:
    """(cpu s, wall s, gc s, collections, full ones) of one timing pass of `program`."""
    timing = Timing(System(amap), program)
    collector.reset()
    collector.on = True
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        timing.run()
    finally:
        collector.on = False
    return (time.process_time() - cpu, time.perf_counter() - wall, collector.seconds,
            collector.collections, collector.full)


def row(name: str, n: int, cpu: float, wall: float, bare_cpu: float, gc_s: float,
        collections: int, full: int) -> str:
    return (f"{name:<30} {cpu / n * 1e6:>8.2f} {wall / n * 1e6:>8.2f} {cpu / n / bare_cpu:>7.2f}x "
            f"{gc_s:>7.2f} {gc_s / cpu:>6.1%} {f'{collections} ({full})':>11}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", action="append", help="sip and rack unless given")
    parser.add_argument("--values", action="store_true", help="compute values too")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    collector = Collector()
    kernel = load_kernel("gqa_attention")
    print(f"{'gqa_attention llama3-8b':<30} {'CPU us':>8} {'wall us':>8} {'CPU vs':>8} "
          f"{'gc s':>7} {'gc':>6} {'collections':>11}")
    print(f"{'(per command)':<30} {'':>8} {'':>8} {'bare':>8} {'':>7} {'share':>6} "
          f"{'(full)':>11}")
    for topology in args.topology or ["sip", "rack"]:
        amap = load_address_map(topology)
        pes = amap.topology.num_pes
        params = parse_params(kernel, ["model=llama3-8b"], pes)
        functional = []
        for _ in range(args.repeat):
            *figures, result = functional_pass(kernel, amap, params, args.values, collector)
            functional.append(tuple(figures))
            n, program = result.commands, result.trace.program
            del result  # it holds the values and simulated HBM: one run's at a time
        functional = min(functional)
        timed = min(timing_pass(amap, program, collector) for _ in range(args.repeat))
        per_pe = n // pes
        bare_cpu, bare_wall = map(min, zip(*(bare_loop_times(pes, per_pe)
                                             for _ in range(args.repeat)), strict=True))
        bare = bare_cpu / (per_pe * pes)
        print(f"{topology}: {n:,} commands on {pes:,} PEs, seq_len={params['seq_len']}")
        print(f"{'  bare SimPy + greenlet loop':<30} {bare * 1e6:>8.2f} "
              f"{bare_wall / (per_pe * pes) * 1e6:>8.2f} {1:>7.2f}x")
        print(row("  functional pass", n, *functional[:2], bare, *functional[2:]))
        print(row("  timing pass", n, *timed[:2], bare, *timed[2:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
