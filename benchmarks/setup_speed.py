"""CPU time of a kernel's host setup alone: llama_decode's placements, by layer count.

Runs `llama_decode`'s `setup` (what `kernbench run` does before the
functional pass: allocate and place every weight, KV shard and shared
buffer) at context 8191 with 2, 16 and all the model's layers, on `sip` (128 PEs,
llama3-8b's 32: 70b's 80 layers do not fit its 128 GiB) and `rack` (8,192 PEs,
llama3-70b's 80), in this
process, timing-only unless `--values`. Per case it prints the placements
made (a symmetric allocation counts once per PE), the CPU seconds of the
setup (`time.process_time`, the least of `--repeat` runs: the machine is
shared) and of the first look-up in memory after it (where memory sorts its
index, inside the functional pass), and the CPU per placement. Last, per
topology, the ratio of the 80-layer setup to the 2-layer one beside the
ratio of their placements: equal when the setup is linear in placements.

The pipeline depth is the same for every layer count of a topology (`--pp`,
2 by default: a 2-layer model has at most 2 stages), so the placements grow
with the layers alone. The case the docs quote, 80 layers at `pp=16` on the
rack (a SIP per stage, as `kernbench run llama_decode -t rack -p
model=llama3-70b -p context=8191 -p pp=16 -p layers=80 --timing-only`), is
timed too.

    python benchmarks/setup_speed.py [--topology sip --topology rack] [--values]
                                     [--layers 2 --layers 16 ...] [--pp N] [--repeat N]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

from kernbench_cli.address import load_address_map
from kernbench_cli.hw.system import System
from kernbench_cli.lang.memory import Memory
from kernbench_cli.sim import hooks
from kernbench_cli.sim.host import Host
from kernbench_cli.sim.kernels import load_kernel, parse_params

MODELS = {"sip": "llama3-8b", "rack": "llama3-70b"}
LAYERS = {"llama3-8b": 32, "llama3-70b": 80}  # each model's num_hidden_layers


def setup_cpu(kernel, amap, params: dict, values: bool) -> tuple[float, float, int]:
    """(setup CPU s, first look-up CPU s, placements) of one setup on a fresh system."""
    system = System(amap)
    memory = Memory(backed=values)
    host = Host(system, memory, 0, not values)
    gc.collect()
    start = time.process_time()
    hooks.setup(kernel, host, params)
    setup = time.process_time() - start
    start = time.process_time()
    memory.check(system.slice_bases[0], 1, "look-up")  # the shared buffers start there
    return setup, time.process_time() - start, len(memory.allocations())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", action="append", help="sip and rack unless given")
    parser.add_argument("--layers", action="append", type=int,
                        help="2, 16 and all the model's unless given")
    parser.add_argument("--pp", type=int, default=2, help="pipeline stages (2)")
    parser.add_argument("--values", action="store_true", help="draw and place values too")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    kernel = load_kernel("llama_decode")
    print(f"llama_decode, context 8191, {'values' if args.values else 'timing-only'}; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'case':<34} {'placements':>11} {'setup CPU s':>12} {'look-up s':>10} "
          f"{'us/placement':>13}")
    for topology in args.topology or ["sip", "rack"]:
        amap = load_address_map(topology)
        model = MODELS.get(topology, "llama3-70b")
        cases = [(n, args.pp) for n in args.layers or [2, 16, LAYERS[model]]]
        if topology == "rack" and not args.layers:
            cases.append((80, 16))
        figures = {}
        for layers, pp in cases:
            params = parse_params(kernel, [f"model={model}", "context=8191", f"layers={layers}",
                                           f"pp={pp}"], amap.topology.num_pes)
            runs = [setup_cpu(kernel, amap, params, args.values) for _ in range(args.repeat)]
            setup, lookup, placed = min(runs)
            figures[layers, pp] = setup, placed
            print(f"{f'{topology} {model} {layers} layers pp={pp}':<34} {placed:>11,} "
                  f"{setup:>12.3f} {lookup:>10.3f} {setup / placed * 1e6:>13.2f}")
        same_pp = sorted(n for n, pp in cases if pp == args.pp)
        if len(same_pp) > 1:
            (low_s, low_n), (high_s, high_n) = (figures[same_pp[0], args.pp],
                                                figures[same_pp[-1], args.pp])
            print(f"  {same_pp[-1]}/{same_pp[0]} layers: setup {high_s / low_s:.1f}x, "
                  f"placements {high_n / low_n:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
