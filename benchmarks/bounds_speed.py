"""CPU time of a first answer: `--bounds-only` (`kb.bounds`) on llama_decode, against the
setup a run makes first.

A sweep over hundreds of points is pruned by the points' analytic lower bounds before the
exact runs (`sweep --prune-above`), so a bound must come in about a second. `kb.bounds`
makes the kernel's setup to refuse what a run would refuse, then states the bounds; the
setup returns once nothing it does after can be refused (`Host.bounds_only`: for
`llama_decode`, after its layout's capacity check, before it places each PE's layers).
Per case it prints the CPU seconds of `kb.bounds` (`time.process_time`, the least of
`--repeat`, in this process after one call to warm the imports) and of a timing-only
run's setup of the same point (`setup_speed.setup_cpu`: every placement made), and their
ratio.

    python benchmarks/bounds_speed.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from setup_speed import setup_cpu

import kernbench_cli as kb
from kernbench_cli.address import load_address_map
from kernbench_cli.sim.kernels import load_kernel, parse_params

CASES = [("sip", "llama3-8b", 1), ("rack", "llama3-70b", 1), ("rack", "llama3-70b", 2),
         ("rack", "llama3-70b", 16)]


def bounds_cpu(topology: str, params: dict) -> float:
    start = time.process_time()
    kb.bounds("llama_decode", topology, params=params)
    return time.process_time() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    kernel = load_kernel("llama_decode")
    kb.bounds("llama_decode")  # the imports, once
    print(f"llama_decode, context 8191, batch 1; load average {os.getloadavg()[0]:.2f}")
    print(f"{'case':<26} {'bounds CPU s':>13} {'setup CPU s':>12} {'ratio':>7}")
    for topology, model, pp in CASES:
        params = {"model": model, "context": 8191, "pp": pp}
        found = min(bounds_cpu(topology, params) for _ in range(args.repeat))
        amap = load_address_map(topology)
        items = [f"{k}={v}" for k, v in params.items()]
        setup, _, _ = setup_cpu(kernel, amap, parse_params(kernel, items,
                                                           amap.topology.num_pes), False)
        print(f"{f'{topology} {model} pp={pp}':<26} {found:>13.3f} {setup:>12.3f} "
              f"{found / setup:>7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
