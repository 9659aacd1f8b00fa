"""Replay against the run it came from, and against a timing-only run; golden check time.

For each kernel: the full run as `kernbench run` does it (kernel code, values,
verification), a `--timing-only` run, and `kernbench replay` of the trace
the run recorded (read from the file, then the timing pass alone), each the
best of a few tries on this noisy machine. The ratios are the result (aims:
replay at least 3x faster than the full run, and faster than timing-only).
Each case's trace size is shown as recorded (format 6: each distinct stream
once, up to relocation) and against every stream in full (format 5).
Then the time of `golden check` over every shipped case (aim: under a minute).

    python benchmarks/replay_vs_run.py [--no-goldens] [--repeat N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from kernbench_cli.address import load_address_map
from kernbench_cli.sim.kernels import load_kernel, parse_params
from kernbench_cli.sim.run import replay_trace, run_kernel
from kernbench_cli.sim.trace_file import read_trace, write_trace

CASES = [
    ("sharded_gemm", "default", ["mode=primitive"]),
    ("sharded_gemm", "sip", ["mode=composite"]),
    ("gqa_attention", "default", []),
    ("gqa_attention", "sip", ["model=llama3-8b", "seq_len=32768"]),
]


def best(fn, repeat: int) -> tuple[float, object]:
    out, least = None, float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        least = min(least, time.perf_counter() - start)
    return least, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-goldens", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'case':<45} {'run s':>7} {'timing-only s':>13} {'replay s':>9} "
          f"{'run/replay':>10} {'t-only/replay':>13} {'trace KB':>9} {'v5/v6':>6}   "
          f"(best of {args.repeat})")
    with tempfile.TemporaryDirectory() as tmp:
        trace, full = Path(tmp) / "run.trace", Path(tmp) / "full.trace"
        for name, topology, params in CASES:
            kernel = load_kernel(name)
            amap = load_address_map(topology)
            p = parse_params(kernel, params)
            run_s, result = best(lambda k=kernel, a=amap, q=p: run_kernel(k, a, q), args.repeat)
            timing_s, _ = best(lambda k=kernel, a=amap, q=p: run_kernel(k, a, q,
                                                                        timing_only=True),
                               args.repeat)
            write_trace(trace, result.trace)
            write_trace(full, result.trace, version=5)
            size = trace.stat().st_size
            replay_s, replayed = best(lambda a=amap: replay_trace(read_trace(trace), a, "t"),
                                      args.repeat)
            assert replayed.latency_ps == result.latency_ps
            label = f"{name} {' '.join(params)} @ {topology}"
            print(f"{label:<45} {run_s:>7.2f} {timing_s:>13.2f} {replay_s:>9.2f} "
                  f"{run_s / replay_s:>9.2f}x {timing_s / replay_s:>12.2f}x "
                  f"{size / 1000:>9.1f} {full.stat().st_size / size:>5.1f}x")
    if not args.no_goldens:
        from kernbench_cli.golden.run import regen
        from kernbench_cli.shipped import data_dir

        start = time.perf_counter()
        differences = regen(data_dir("goldens"), None, write=False)
        print(f"golden check, every case: {time.perf_counter() - start:.1f} s "
              f"({len(differences)} differences; aim < 60 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
