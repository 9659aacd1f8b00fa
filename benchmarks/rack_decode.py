"""llama3-70b's decode step on `rack`, a SIP (512 PEs) per pipeline stage, every layer
timed: CPU time of the run against the aim.

The aim: batch 1 and batch 16, context 8191, timing only, all 80 layers timed
(no representative layers), at most 60 s CPU. Per batch, in this process, one
run of `llama_decode -t rack -p model=llama3-70b -p context=8191 -p pp=16 -p
batch=B` (16 stages of 5 layers), both passes as `kernbench run --timing-only`
makes them. Printed: CPU and wall seconds, the commands timed, CPU microseconds
a command, the step's TPOT, and the ratio to the aim; or why the run stopped.
Batch 16 holds one micro-batch's f32 hidden state of 512 KiB, a quarter of a
PE's TCM, several times over at a residual add: it fits as large tensors keep
to the top of TCM. (docs/benchmarks.md says which batches were measured, and their
peak memory.)

With `--layers K`, representative layers: K layers timed (K / 16 a stage, at least 3)
and the step scaled to 80 (`-p layers=K -p scale_to=80`); the aim is then 15 s CPU, and
the TPOT printed with its stated bound (`tpot_bound_ps`), to hold against the full
run's.

With `--oracle`, no timing: the functional pass is made with shortcuts and without
(`--no-shortcuts`: every layer run, none copied by `tl.repeat`), each stopped where its
timing pass would begin, and their programs compared (`programs.program_digest`): equal
programs time alike, so the run is what the oracle gives. Exits 1 if they differ.

    python benchmarks/rack_decode.py [--batch 1 --batch 16] [--layers K] [--oracle]
"""

from __future__ import annotations

import argparse
import time

from programs import Stopped, functional_only

import kernbench_cli as kb
from kernbench_cli.errors import KernbenchError

AIM_CPU_S, AIM_REPRESENTATIVE_CPU_S = 60.0, 15.0


def case(batch: int, layers: int | None) -> dict:
    """The run's parameters."""
    params = {"model": "llama3-70b", "context": 8191, "pp": 16, "batch": batch}
    if layers is not None:
        params |= {"layers": layers, "scale_to": 80}
    return params


def measure(batch: int, layers: int | None) -> tuple[float, float, int, float, float]:
    """(CPU s, wall s, commands, TPOT in ms, its bound in ms) of one timing-only run."""
    cpu, wall = time.process_time(), time.perf_counter()
    result = kb.run("llama_decode", topology="rack", timing_only=True,
                    params=case(batch, layers))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    # the step's TPOT: with representative layers, scaled (the run's latency is of the
    # layers it timed)
    return (cpu, wall, result.commands, result.metrics["tpot_ps"] / 1e9,
            result.metrics.get("tpot_bound_ps", 0) / 1e9)


def oracle(batch: int, layers: int | None) -> bool:
    """Print the functional pass's CPU and program digest with shortcuts and without;
    whether the programs are equal."""
    digests = []
    for shortcuts in (True, False):
        began = time.process_time()
        try:
            with functional_only():
                kb.run("llama_decode", topology="rack", timing_only=True,
                       params=case(batch, layers), shortcuts=shortcuts)
        except Stopped as stopped:
            digests.append(stopped.digest)
            print(f"batch {batch}, shortcuts {'on' if shortcuts else 'off'}: functional pass "
                  f"{stopped.cpu - began:.1f} s CPU, program {stopped.digest[:16]}", flush=True)
        except KernbenchError as exc:
            print(f"batch {batch} does not run: {str(exc).splitlines()[0]}", flush=True)
            return False
    same = digests[0] == digests[1]
    print(f"batch {batch}: programs with and without shortcuts "
          f"{'equal' if same else 'DIFFERENT'}", flush=True)
    return same


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, action="append", help="default 1 and 16")
    parser.add_argument("--layers", type=int, help="representative layers, scaled to 80")
    parser.add_argument("--oracle", action="store_true",
                        help="compare the programs made with and without shortcuts; no timing")
    args = parser.parse_args()
    if args.oracle:
        return 0 if all([oracle(batch, args.layers) for batch in args.batch or [1, 16]]) else 1
    aim = AIM_CPU_S if args.layers is None else AIM_REPRESENTATIVE_CPU_S
    timed = "all 80 layers" if args.layers is None else f"{args.layers} layers scaled to 80"
    print(timed)
    print(f"{'batch':>5} {'CPU s':>8} {'wall s':>8} {'commands':>11} {'us/cmd':>7} "
          f"{'TPOT ms':>8} {'+/- ms':>7}  aim <= {aim:.0f} s CPU")
    for batch in args.batch or [1, 16]:
        try:
            cpu, wall, commands, tpot, bound = measure(batch, args.layers)
        except KernbenchError as exc:
            print(f"{batch:>5} does not run: {str(exc).splitlines()[0]}", flush=True)
            continue
        print(f"{batch:>5} {cpu:>8.1f} {wall:>8.1f} {commands:>11,} "
              f"{cpu / commands * 1e6:>7.1f} {tpot:>8.3f} {bound:>7.3f}  {cpu / aim:.1f}x: "
              f"{'met' if cpu <= aim else 'not met'}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
