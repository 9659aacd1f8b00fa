"""The cost of fair sharing: the timing pass, fair against circuit-style, on the goldens' cases.

Each golden case is run once (timing only) to record its streams; the recording is then
replayed (the timing pass alone) with `network.sharing = "fair"` and `"circuit"`, each
the best of a few tries, CPU time and wall time, in the same process and round. The
ratio fair / circuit is the result (aim: at most 1.5x). Replays are checked to time the
same trace; they may differ in latency (that is the point of the model).

Beside the goldens, one case where fair sharing costs most (`DECODE`): a layer of the
llama3-8b decode step on `sip` at batch 16, whose larger messages make the NoC's
transfers overlap, so each start and end re-solves a component of some 50 flows (the
goldens' solves: a few). `--only` picks cases by name (`--only 'decode*'`: that one).

    python benchmarks/fair_share.py [--repeat N] [--only PATTERN]
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
import time

from kernbench_cli.address import load_address_map
from kernbench_cli.golden.cases import CASES, Case
from kernbench_cli.sim.kernels import load_kernel, parse_params
from kernbench_cli.sim.run import replay_trace, run_kernel

#: The case where fair sharing costs most (see the module)
DECODE = Case("decode.llama3-8b-1layer-batch16.sip", "llama_decode", "sip",
              ("model=llama3-8b", "context=8191", "layers=1", "batch=16"))


def best(fn, repeat: int) -> tuple[float, float, object]:
    """(least CPU seconds, least wall seconds, the last result) over `repeat` calls."""
    cpu = wall = float("inf")
    out = None
    for _ in range(repeat):
        c0, w0 = time.process_time(), time.perf_counter()
        out = fn()
        cpu, wall = min(cpu, time.process_time() - c0), min(wall, time.perf_counter() - w0)
    return cpu, wall, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default="*")
    args = parser.parse_args()
    print(f"{'case':<36} {'circuit cpu s':>13} {'fair cpu s':>10} {'cpu ratio':>9} "
          f"{'wall ratio':>10} {'latency moved':>13}   (best of {args.repeat})")
    worst = 0.0
    for case in (*CASES, DECODE):
        if not fnmatch.fnmatch(case.name, args.only):
            continue
        kernel = load_kernel(case.kernel)
        base = load_address_map(case.topology)
        params = parse_params(kernel, list(case.params), base.topology.num_pes)
        trace = run_kernel(kernel, base, params, seed=case.seed, timing_only=True).trace
        modes = {}
        for mode in ("circuit", "fair"):
            amap = load_address_map(case.topology, None, (f"network.sharing={mode}",))
            modes[mode] = best(lambda a=amap, t=trace: replay_trace(t, a, "t"), args.repeat)
        (c_cpu, c_wall, c_res), (f_cpu, f_wall, f_res) = modes["circuit"], modes["fair"]
        moved = (f_res.latency_ps - c_res.latency_ps) / c_res.latency_ps
        worst = max(worst, f_cpu / c_cpu)
        print(f"{case.name:<36} {c_cpu:>13.2f} {f_cpu:>10.2f} {f_cpu / c_cpu:>8.2f}x "
              f"{f_wall / c_wall:>9.2f}x {moved:>+12.2%}")
    print(f"worst CPU ratio fair / circuit: {worst:.2f}x (aim <= 1.5x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
