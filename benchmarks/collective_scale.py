"""A hierarchical all-reduce on `sip` by size: CPU time of the run, and busbw against
alpha-beta.

The aim: 64 MiB in at most 60 s CPU, its busbw at least 0.8x the
alpha-beta model's. Per size, in this process, one timing-only `kb.run` of
`all_reduce -t sip -p algo=hier -p bytes=N` (both passes, as `kernbench run
--timing-only` makes them): CPU seconds (`time.process_time`), wall seconds,
the commands timed, CPU microseconds a command, and the kernel's own
`busbw_over_alpha_beta`. The CPU a command is the ratio that carries across
sizes: a run's CPU grows with its commands, which grow with the bytes (chunks
of an IPCQ slot each).

    python benchmarks/collective_scale.py [--mib 1 --mib 4 --mib 16 --mib 64]
"""

from __future__ import annotations

import argparse
import time

import kernbench_cli as kb

AIM_CPU_S, AIM_BUSBW = 60.0, 0.8


def measure(mib: int) -> tuple[float, float, int, float]:
    """(CPU s, wall s, commands, busbw over alpha-beta) of one timing-only run."""
    cpu, wall = time.process_time(), time.perf_counter()
    result = kb.run("all_reduce", topology="sip", params={"algo": "hier", "bytes": mib << 20},
                    timing_only=True)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return cpu, wall, result.commands, result.metrics["busbw_over_alpha_beta"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, action="append",
                        help="sizes in MiB (default 1, 4, 16, 64)")
    args = parser.parse_args()
    print(f"{'size':>8} {'CPU s':>8} {'wall s':>8} {'commands':>11} {'us/cmd':>7} "
          f"{'busbw/ab':>8}")
    for mib in args.mib or [1, 4, 16, 64]:
        cpu, wall, commands, ratio = measure(mib)
        print(f"{mib:>5} MiB {cpu:>8.1f} {wall:>8.1f} {commands:>11,} "
              f"{cpu / commands * 1e6:>7.1f} {ratio:>8.3f}", flush=True)
        if mib == 64:
            print(f"aim: <= {AIM_CPU_S:.0f} s CPU: {'met' if cpu <= AIM_CPU_S else 'not met'}"
                  f" ({cpu / AIM_CPU_S:.1f}x); busbw >= {AIM_BUSBW}x alpha-beta: "
                  f"{'met' if ratio >= AIM_BUSBW else 'not met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
