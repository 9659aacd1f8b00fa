"""Simulated commands per wall-second of each pass, against a bare SimPy + greenlet loop.

The baseline, measured in the same run on as many PEs: one SimPy process per
PE drives a greenlet, and each "command" costs one timeout and one greenlet
round trip. kernbench runs sharded_gemm in primitive mode (many small
commands: loads, dots, adds, stores) on `default` (16 PEs) and `rack` (8,192
PEs). Printed per case:

- the functional pass, timing-only and with values (commands/s);
- the timing pass alone (the streams the functional pass made, timed again):
  commands/s, the ratio to the bare loop (aim: >= 1x, stretch 3x), SimPy
  events and greenlet switches per command, and the memory the timing pass
  allocates per command (aim: <= 64 B; the stream it reads is printed beside);
- with --profile, the share of a full run's wall time spent in numpy, from a
  native sampling profile (py-spy, if installed; aim: >= 50%).

    python benchmarks/sim_throughput.py [--quick] [--profile]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import simpy
from greenlet import greenlet

from kernbench_cli.address import load_address_map
from kernbench_cli.hw.system import System
from kernbench_cli.hw.timing import Timing
from kernbench_cli.sim.kernels import load_kernel, parse_params
from kernbench_cli.sim.run import run_kernel

CASES = {  # topology -> sharded_gemm parameters (primitive mode)
    "default": ["M=64", "K=512", "N=2048"],
    "rack": ["M=32", "K=256", "N=524288"],
}
QUICK = {"default": ["M=32", "K=256", "N=1024"], "rack": ["M=16", "K=128", "N=131072"]}


def bare_loop(pes: int, per_pe: int) -> float:
    """Commands/s of the baseline: a timeout and a greenlet switch per command."""
    return pes * per_pe / bare_loop_times(pes, per_pe)[1]


def bare_loop_times(pes: int, per_pe: int) -> tuple[float, float]:
    """(CPU s, wall s) of the baseline running `per_pe` commands on each of `pes` PEs."""
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
    cpu, wall = time.process_time(), time.perf_counter()
    env.run()
    return time.process_time() - cpu, time.perf_counter() - wall


def best(fn, repeat: int) -> float:
    """The least wall time of `repeat` calls of `fn` (the machine is noisy)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def timing_pass(amap, program) -> tuple[float, int, int]:
    """(wall s, SimPy events, bytes allocated at peak) of one timing pass of `program`."""
    timing = Timing(System(amap), program)
    start = time.perf_counter()
    timing.run()
    wall = time.perf_counter() - start
    timing = Timing(System(amap), program)
    tracemalloc.start()
    timing.run()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return wall, timing.events, peak


def stream_bytes(program) -> int:
    return sum(col.itemsize * len(col) for s in program.streams for col in s.columns())


def numpy_share(topology: str, params: list[str]) -> str:
    """Share of a full run's samples inside numpy, ml_dtypes or the BLAS (py-spy --native)."""
    spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if spy is None:
        return "n/a (pip install py-spy)"
    code = ("from kernbench_cli.address import load_address_map\n"
            "from kernbench_cli.sim.kernels import load_kernel, parse_params\n"
            "from kernbench_cli.sim.run import run_kernel\n"
            "k = load_kernel('sharded_gemm')\n"
            f"p = parse_params(k, {[*params, 'mode=primitive']!r})\n"
            f"amap = load_address_map({topology!r})\n"
            "for _ in range(3):\n    run_kernel(k, amap, p)\n")
    with tempfile.TemporaryDirectory() as tmp:
        script, raw = Path(tmp) / "run.py", Path(tmp) / "profile.raw"
        script.write_text(code)
        subprocess.run([spy, "record", "--native", "-r", "400", "-f", "raw", "-o", str(raw),
                        "--", sys.executable, str(script)], check=True, capture_output=True)
        inside = total = 0
        for line in raw.read_text().splitlines():
            stack, count = line.rsplit(" ", 1)
            frames = stack.split(";")
            if not any("run_kernel" in f for f in frames):
                continue  # imports and start-up
            total += int(count)
            if any(lib in f for f in frames[-8:] for lib in ("_multiarray", "openblas",
                                                              "_ml_dtypes", "numpy/")):
                inside += int(count)
    return f"{inside / total:.0%}" if total else "n/a"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller GEMMs")
    parser.add_argument("--profile", action="store_true", help="numpy share via py-spy")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    cases = QUICK if args.quick else CASES
    kernel = load_kernel("sharded_gemm")
    print(f"{'case':<34} {'commands':>9} {'wall s':>7} {'cmd/s':>10} {'vs bare':>8} "
          f"{'events/cmd':>10} {'switch/cmd':>10} {'B/cmd':>6}")
    for topology, params in cases.items():
        amap = load_address_map(topology)
        pes = amap.topology.num_pes
        p = parse_params(kernel, [*params, "mode=primitive"])
        result = run_kernel(kernel, amap, p, timing_only=True)
        n = result.commands
        per_pe = max(n, 200_000) // pes  # enough commands for a steady rate
        bare = max(bare_loop(pes, per_pe) for _ in range(args.repeat))
        print(f"{f'bare loop, {pes} PEs':<34} {per_pe * pes:>9} {'':>7} {bare:>10,.0f} "
              f"{1:>7.2f}x {1:>10.2f} {1:>10.2f} {'':>6}")
        for values in (False, True):
            wall = best(lambda v=values, a=amap, q=p: run_kernel(kernel, a, q, timing_only=not v),
                        args.repeat)
            name = f"{topology}: whole run, {'values' if values else 'timing-only'}"
            print(f"{name:<34} {n:>9} {wall:>7.2f} {n / wall:>10,.0f} "
                  f"{n / wall / bare:>7.2f}x {result.events / n:>10.2f} "
                  f"{result.switches / n:>10.2f} {'':>6}")
        walls = [timing_pass(amap, result.trace.program) for _ in range(args.repeat)]
        wall, events, peak = min(walls)
        print(f"{f'{topology}: timing pass alone':<34} {n:>9} {wall:>7.2f} {n / wall:>10,.0f} "
              f"{n / wall / bare:>7.2f}x {events / n:>10.2f} {0:>10.2f} {peak / n:>6.0f}")
        print(f"{'':<34} (the streams it reads: {stream_bytes(result.trace.program) / n:.0f} B "
              "per command)")
        if args.profile:
            print(f"{f'{topology}: numpy share of a full run':<34} "
                  f"{numpy_share(topology, params)} (aim >= 50%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
