"""Trajectory dedup's speed: the timing pass with and without it, against the bare loop.

Per case, in this process: the functional pass once (timing-only), then the timing
pass of the same streams alone, with dedup (the default: one representative per class
of PEs, `hw.symmetry`, `hw.dedup`, `hw.multicast`) and without (`--no-dedup`), in
CPU seconds (`time.process_time`) and wall seconds, and commands/s of each against
the bare SimPy + greenlet loop's for as many commands on as many PEs
(`sim_throughput.bare_loop_times`, measured in the same run). On the rack case
also the whole timing-only run (functional pass and timing pass, as `kernbench run
--timing-only` makes them) against the bare loop. Cases:

- rack: `gqa_attention -t rack -p model=llama3-8b -p seq_len=131072` (8,192 PEs,
  1.7 million commands; aims: the run <= 1.5x the bare loop's CPU, the timing pass
  >= 10x its commands/s);
- sip: `gqa_attention -t sip -p model=llama3-8b -p seq_len=32768` (128 PEs);
- 16 PEs: `gqa_attention -p model=llama3-8b` on the default topology (aim >= 1x);
- no symmetry: `all_reduce -t sip -p algo=hier` (every class a single PE: dedup must
  cost nothing worth the name next to the full pass).

Each figure is the least of `--repeat` runs (the machine is shared; the rack case's
are one run each: about a minute of CPU per full pass).

    python benchmarks/dedup_speed.py [--case rack --case sip --case 16 --case asym]
                                     [--repeat N]
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from sim_throughput import bare_loop_times

from kernbench_cli.address import load_address_map
from kernbench_cli.hw.system import System
from kernbench_cli.hw.timing import Timing
from kernbench_cli.sim.kernels import load_kernel, parse_params
from kernbench_cli.sim.run import run_kernel

CASES = {
    "rack": ("gqa_attention", "rack", ["model=llama3-8b", "seq_len=131072"]),
    "sip": ("gqa_attention", "sip", ["model=llama3-8b", "seq_len=32768"]),
    "16": ("gqa_attention", "default", ["model=llama3-8b"]),
    "asym": ("all_reduce", "sip", ["algo=hier"]),
}


def clocked(work) -> tuple[float, float, object]:
    """(CPU s, wall s, result) of `work()`."""
    cpu, wall = time.process_time(), time.perf_counter()
    out = work()
    return time.process_time() - cpu, time.perf_counter() - wall, out


def timing_pass(amap, program, dedup: bool) -> tuple[float, float, int, int, int]:
    """(CPU s, wall s, classes timed, passes, latency in ps) of one timing pass of
    `program`."""
    timing = Timing(System(amap), program, dedup=dedup)
    cpu, wall, _ = clocked(timing.run)
    classes = len(timing.classes.members) if timing.classes else len(timing.procs)
    return cpu, wall, classes, max(1, timing.tries), timing.latency_ps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", choices=sorted(CASES))
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    print(f"{'case':<34} {'CPU s':>8} {'wall s':>8} {'CPU vs':>7} {'wall vs':>7} "
          f"{'cmd/s vs':>8}")
    print(f"{'':<34} {'':>8} {'':>8} {'bare':>7} {'bare':>7} {'bare':>8}")
    for name in args.case or ["rack", "sip", "16", "asym"]:
        kernel_name, topology, params = CASES[name]
        kernel = load_kernel(kernel_name)
        amap = load_address_map(topology)
        pes = amap.topology.num_pes
        parsed = parse_params(kernel, params, pes)
        run = partial(run_kernel, kernel, amap, parsed, timing_only=True, dedup=True)
        repeat = args.repeat if name != "rack" else 1
        runs = [clocked(run) for _ in range(repeat)]
        run_cpu, run_wall = min(r[0] for r in runs), min(r[1] for r in runs)
        result = runs[0][2]
        n, program = result.commands, result.trace.program
        del runs, result
        per_pe = max(1, n // pes)
        bare_cpu, bare_wall = map(min, zip(*(bare_loop_times(pes, per_pe)
                                             for _ in range(args.repeat)), strict=True))
        scale = n / (per_pe * pes)  # the bare loop ran per_pe * pes commands
        bare_cpu, bare_wall = bare_cpu * scale, bare_wall * scale
        print(f"{name}: {kernel_name} -t {topology} {' '.join(params)}: {n:,} commands on "
              f"{pes:,} PEs")
        print(f"{'  bare SimPy + greenlet loop':<34} {bare_cpu:>8.2f} {bare_wall:>8.2f} "
              f"{1:>6.2f}x {1:>6.2f}x {1:>7.2f}x")
        if name == "rack":
            print(f"{'  run, timing-only (dedup)':<34} {run_cpu:>8.2f} {run_wall:>8.2f} "
                  f"{run_cpu / bare_cpu:>6.2f}x {run_wall / bare_wall:>6.2f}x")
        latencies = set()
        for dedup in (False, True):
            cpu, wall, classes, tries, latency = map(min, zip(
                *(timing_pass(amap, program, dedup) for _ in range(repeat)), strict=True))
            latencies.add(latency)
            label = (f"  timing pass, {'dedup' if dedup else 'no dedup'} ({classes:,} timed"
                     f"{f', {tries} passes' if tries > 1 else ''})")
            print(f"{label:<34} {cpu:>8.2f} {wall:>8.2f} {cpu / bare_cpu:>6.2f}x "
                  f"{wall / bare_wall:>6.2f}x {bare_cpu / cpu:>7.2f}x")
        assert len(latencies) == 1, f"dedup changed the latency: {sorted(latencies)}"
    return 0


if __name__ == "__main__":
    sys.exit(main())
