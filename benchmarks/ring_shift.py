"""Would an exact ring-step shortcut skip anything, and how much? A measurement, not a
speed: how far each step of a collective is a time shift of the step before, over the
whole group at once.

The shortcut (docs/architecture.md, "Not built yet: the ring-step shortcut") would time
a step, find the next one a shifted copy of it, and shift the steps after for as long as
they stay copies. Here a PE's *step* is its commands from one SEND to the next (a ring
step's piece: send, then take the piece from the left, add it, load the next), timed
with every PE timed (no dedup), and step u + 1 of PE p is a *shift* of step u when its
commands are the same kinds and sizes and every issue, start and end moved by one D. A
group step is a shift when every PE's step u + 1 is, by one D for all PEs: the records'
necessary condition for the whole timing state to repeat (engines, rings, flows and
events must too, which this does not check). A run of r group shifts in a row is what
the shortcut could skip but for the steps it must time to see the first copy (two a
run): the upper bound printed, as a share of all the PEs' commands.

    python benchmarks/ring_shift.py [--mib 4] [--decode-layers 0]

`--decode-layers N` measures `llama_decode` (llama3-8b on `sip`, context 1024, N
layers, timing only) instead: its all-reduces and all-gathers of a layer are short.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from itertools import pairwise

from kernbench_cli.address import load_address_map
from kernbench_cli.hw.system import System
from kernbench_cli.hw.timing import Timing
from kernbench_cli.sim.kernels import load_kernel, parse_params
from kernbench_cli.sim.run import run_kernel
from kernbench_cli.stream import SEND


def timed(kernel: str, items: list[str]) -> tuple:
    """(program, the timing pass with every PE timed) of a timing-only run on `sip`."""
    module, amap = load_kernel(kernel), load_address_map("sip")
    params = parse_params(module, items, amap.topology.num_pes)
    program = run_kernel(module, amap, params, timing_only=True).trace.program
    timing = Timing(System(amap), program, dedup=False)
    timing.run()
    return program, timing


def steps(program, timing) -> list[list[tuple]]:
    """Per PE, its steps: (commands, kinds and sizes, (issue, start, end) per command)."""
    out = []
    for stream, proc in zip(program.streams, timing.procs, strict=True):
        bounds = [i for i, op in enumerate(stream.op) if op == SEND] + [len(stream.op)]
        out.append([(b - a, tuple(zip(stream.op[a:b], stream.size[a:b], strict=True)),
                     tuple(zip(proc.issue[a:b], proc.start[a:b], proc.end[a:b], strict=True)))
                    for a, b in pairwise(bounds)])
    return out


def shift(before: tuple, after: tuple) -> int | None:
    """The one D that moves every time of step `before` to `after`'s; None if none does."""
    if before[1] != after[1]:
        return None
    moved = {t1 - t0 for x, y in zip(before[2], after[2], strict=True)
             for t0, t1 in zip(x, y, strict=True)}
    return moved.pop() if len(moved) == 1 else None


def measure(program, timing) -> dict:
    """The figures the module docstring names."""
    per_pe = steps(program, timing)
    n = min(len(s) for s in per_pe)
    alike = total = 0
    group: list[int | None] = []
    for u in range(n - 1):
        moved = [shift(s[u], s[u + 1]) for s in per_pe]
        alike += sum(d is not None for d in moved)
        total += len(moved)
        group.append(moved[0] if moved[0] is not None and len(set(moved)) == 1 else None)
    runs, length = Counter(), 0
    skippable = 0
    for u, d in enumerate([*group, None]):
        if d is not None and (length == 0 or d == group[u - 1]):
            length += 1
            continue
        if length:
            runs[length] += 1
            skippable += sum(s[v][0] for s in per_pe
                             for v in range(u + 1 - length + 1, u + 1))
        length = 1 if d is not None else 0
    commands = sum(len(stream.op) for stream in program.streams)
    return {"commands": commands, "steps": n, "alike": alike, "total": total,
            "group": sum(d is not None for d in group), "shifts": Counter(group),
            "runs": runs, "skippable": skippable}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=float, default=4,
                        help="the hier all-reduce's size on sip (default 4)")
    parser.add_argument("--decode-layers", type=int, default=0,
                        help="measure llama_decode (llama3-8b, sip) of this many layers")
    args = parser.parse_args()
    if args.decode_layers:
        case = ("llama_decode", ["model=llama3-8b", "context=1024",
                                 f"layers={args.decode_layers}"])
    else:
        case = ("all_reduce", ["algo=hier", f"bytes={int(args.mib * (1 << 20))}"])
    began = time.process_time()
    program, timing = timed(*case)
    m = measure(program, timing)
    print(f"{case[0]} {' '.join(case[1])} on sip: {m['commands']:,} commands, "
          f"{m['steps']:,} steps a PE ({time.process_time() - began:.1f} s CPU)")
    print(f"a PE's step a shift of its step before: {m['alike']:,} of {m['total']:,} "
          f"({m['alike'] / max(m['total'], 1):.1%})")
    print(f"every PE's step a shift by one D: {m['group']:,} of {m['steps'] - 1:,} steps; "
          f"D (ps) by steps: {dict(m['shifts'].most_common(4))}")
    print(f"runs of such steps (length: how many): {dict(sorted(m['runs'].items()))}")
    print(f"at most {m['skippable']:,} of {m['commands']:,} commands "
          f"({m['skippable'] / m['commands']:.1%}) skippable: each run less the two "
          "steps timed to see it")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
