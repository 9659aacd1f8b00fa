"""Simulated commands per wall-second, against a bare SimPy + greenlet loop.

The baseline, measured in the same run: one SimPy process per PE drives a
greenlet, and each "command" costs one timeout and one greenlet round trip.
kernbench runs sharded_gemm in primitive mode (many small commands: loads,
dots, adds, stores) on `default` (16 PEs) and `sip` (128 PEs), timing-only
and with values. Printed per case: commands/s, the ratio to the baseline,
SimPy events and greenlet switches per command, and the share of wall time
that values (numpy) cost, from the full run against the timing-only one.

A third row per topology, "essential steps", times only the work every
command of kernbench must do however lean its code (queue entry, a calendar
booking, a TCM block allocated and freed, an op-log record), with no checks,
no synchronisation and no values: the ceiling of this design in CPython.

    python benchmarks/sim_throughput.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time

import simpy
from greenlet import greenlet

from kernbench_cli.address import load_address_map
from kernbench_cli.sim.kernels import load_kernel, parse_params
from kernbench_cli.sim.run import run_kernel


def bare_loop(pes: int, per_pe: int) -> float:
    """Commands/s of the baseline: a timeout and a greenlet switch per command."""
    env = simpy.Environment()

    def driver(glet):
        request = glet.switch()
        while not glet.dead:
            yield env.timeout(request)
            request = glet.switch()

    def kernel():
        hub = greenlet.getcurrent().parent
        for _ in range(per_pe):
            hub.switch(1)

    for _ in range(pes):
        env.process(driver(greenlet(kernel)))
    start = time.perf_counter()
    env.run()
    return pes * per_pe / (time.perf_counter() - start)


def essential_steps(count: int) -> float:
    """Commands/s of the bare minimum a kernbench command does (see the module doc)."""
    from kernbench_cli.address.allocator import FreeListPool
    from kernbench_cli.config.schema import SchedulerConfig
    from kernbench_cli.hw.cpu import PeCpu
    from kernbench_cli.hw.network import Calendar
    from kernbench_cli.hw.scheduler import Scheduler

    cpu, sched = PeCpu(), Scheduler(SchedulerConfig(queue_depth=8))
    cal = Calendar("hbm", "slice", 51_200_000_000, 100_000)
    pool = FreeListPool("tcm", 0, 1 << 21)
    log = []
    start = time.perf_counter()
    for i in range(count):
        t, dispatched = sched.enqueue(cpu, 4000)
        at = cal.book(dispatched + 20000, 40000)
        sched.hold(at)
        addr = pool.alloc(2048, "tile")
        log.append((i, 0, "dma", "load", t, at, at + 140000, 2048, 0, 0, addr))
        pool.free(addr)
    return count / (time.perf_counter() - start)


CASES = {  # topology -> sharded_gemm parameters (primitive mode)
    "default": ["M=64", "K=512", "N=2048"],
    "sip": ["M=64", "K=256", "N=4096"],
}
QUICK = {"default": ["M=32", "K=256", "N=512"], "sip": ["M=32", "K=128", "N=2048"]}


def kernbench_rate(topology: str, params: list[str], timing_only: bool):
    kernel = load_kernel("sharded_gemm")
    amap = load_address_map(topology)
    p = parse_params(kernel, [*params, "mode=primitive"])
    start = time.perf_counter()
    result = run_kernel(kernel, amap, p, timing_only=timing_only)
    wall = time.perf_counter() - start
    return result, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller GEMMs")
    args = parser.parse_args()
    cases = QUICK if args.quick else CASES
    print(f"{'case':<28} {'commands':>9} {'wall s':>7} {'cmd/s':>9} {'vs bare':>8} "
          f"{'events/cmd':>10} {'switch/cmd':>10} {'numpy':>6}")
    for topology, params in cases.items():
        pes = load_address_map(topology).topology.num_pes
        bare = bare_loop(pes, 200_000 // pes)
        print(f"{'bare loop, ' + str(pes) + ' PEs':<28} {200_000 // pes * pes:>9} "
              f"{'':>7} {bare:>9,.0f} {1:>8.2f}x {1:>10.2f} {1:>10.2f} {'':>6}")
        floor = essential_steps(200_000)
        print(f"{'essential steps (ceiling)':<28} {200_000:>9} {'':>7} {floor:>9,.0f} "
              f"{floor / bare:>8.2f}x {0:>10.2f} {0:>10.2f} {'':>6}")
        walls = {}
        for timing_only in (True, False):
            result, wall = kernbench_rate(topology, params, timing_only)
            walls[timing_only] = wall
            rate = result.commands / wall
            name = f"{topology} {'timing-only' if timing_only else 'full'}"
            share = "" if timing_only else f"{max(0.0, 1 - walls[True] / wall):.0%}"
            print(f"{name:<28} {result.commands:>9} {wall:>7.2f} {rate:>9,.0f} "
                  f"{rate / bare:>8.2f}x {result.events / result.commands:>10.2f} "
                  f"{result.switches / result.commands:>10.2f} {share:>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
