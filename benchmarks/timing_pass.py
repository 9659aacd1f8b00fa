"""The timing pass and the post-pass per command where nothing repeats, against the bare loop.

The case is the llama3-8b decode step on `sip` (128 PEs, timing-only; no two PEs
time alike, so dedup times every PE): `--layers 2` (129,459 commands) by
default, `--layers 32` for the full step (1.9 million commands, several minutes).
Per case, two measures:

- CPU (`time.process_time`), in this process: one timing-only run (as `kernbench
  run --timing-only` makes it) split at the timing pass (`Timing.run`, dedup on):
  the functional pass, the timing pass and the post-pass (what a run does after
  the timing pass: energy counts, the invariants, the critical path, regions);
  then `--repeat` less one replays of its trace, each split the same way; the
  least of each, and the bare SimPy + greenlet loop
  (`sim_throughput.bare_loop_times`) on as many PEs and commands, in the same run;
  and the functional pass once more with shortcuts off (every layer run, none
  copied: `--no-shortcuts`), stopped where its timing pass would begin: its program
  (every stream column, composites, regions, TCM peaks) must be the one the run
  with shortcuts timed, or the script says so and exits 1 (the shortcuts' oracle on
  this case; equal programs time alike).
  Printed: seconds, us a command and the ratio to the bare loop (aims: functional
  pass <= 2x, timing pass <= 4x, post-pass <= 1x).
- instructions (`--instructions`, valgrind's cachegrind; independent of the
  machine's load): the streams are recorded once, then each of the timing pass,
  the replay (timing pass and post-pass) and the bare loop runs once and twice
  in a fresh process under cachegrind; two runs less one is one run's, start-up
  and reading the trace cancel out. Printed: instructions a command and the
  ratio to the bare loop's. Slow: the timing pass runs some 50x slower under
  cachegrind (`--layers 1`, 71,322 commands, takes about ten minutes).
- `--batch 16`: sixteen sequences a step; the messages are 16x larger, so the NoC's
  transfers overlap and the fair-share solver re-solves components of tens of flows
  (batch 1: a few).
- memory (`--memory`, tracemalloc): what the timing pass keeps a command once it
  ends (its records: per command, per tile operation, per receive's copy), replaying
  the run's trace (the streams were made before tracing began: not counted).

    python benchmarks/timing_pass.py [--layers N] [--batch B] [--repeat N]
                                     [--instructions | --memory]
"""

from __future__ import annotations

import argparse
import gc
import re
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from programs import Stopped, functional_only, program_digest
from sim_throughput import bare_loop_times

from kernbench_cli.address import load_address_map
from kernbench_cli.hw.system import System
from kernbench_cli.hw.timing import Timing
from kernbench_cli.sim.kernels import load_kernel, parse_params
from kernbench_cli.sim.run import replay_address_map, replay_trace, run_kernel
from kernbench_cli.sim.trace_file import read_trace, write_trace


def params(kernel, layers: int, batch: int) -> dict:
    """The case's parameters, parsed for `kernel` (llama_decode)."""
    return parse_params(kernel, ["model=llama3-8b", "context=8191", f"layers={layers}",
                                 f"batch={batch}"])


def named(layers: int, batch: int) -> str:
    return f"llama_decode llama3-8b, {layers} layers, batch {batch}, on sip"


def commands(program) -> int:
    return sum(len(stream.op) for stream in program.streams)


class Marks:
    """CPU seconds where each timing pass began and ended (`Timing.run` wrapped)."""

    def __init__(self) -> None:
        self.began = self.ended = 0.0
        run = Timing.run

        def timed(timing: Timing) -> None:
            self.began = time.process_time()
            run(timing)
            self.ended = time.process_time()

        Timing.run = timed


def cpu(layers: int, batch: int, repeat: int) -> bool:
    """Print the passes' figures; whether the run without shortcuts made the same program."""
    marks = Marks()
    amap = load_address_map("sip")
    kernel = load_kernel("llama_decode")
    began = time.process_time()
    result = run_kernel(kernel, amap, params(kernel, layers, batch), timing_only=True)
    ended = time.process_time()
    trace, program = result.trace, result.trace.program
    copied = program_digest(program)
    functional = marks.began - began
    timed, post = [marks.ended - marks.began], [ended - marks.ended]
    n, pes = commands(program), len(program.streams)
    del result
    for _ in range(repeat - 1):  # replays: the same timing pass and post-pass
        replay_trace(trace, amap, "the run")
        ended = time.process_time()
        timed.append(marks.ended - marks.began)
        post.append(ended - marks.ended)
    began = time.process_time()
    try:
        with functional_only():
            run_kernel(kernel, amap, params(kernel, layers, batch), timing_only=True,
                       shortcuts=False)
    except Stopped as stopped:
        every, digest = stopped.cpu - began, stopped.digest
    bare = min(bare_loop_times(pes, n // pes)[0] for _ in range(repeat)) / (n // pes * pes)
    print(f"{named(layers, batch)}: {n:,} commands on {pes} PEs (CPU, least of {repeat})")
    print(f"{'':<28} {'s':>8} {'us/command':>10} {'vs bare':>8}")
    for name, seconds in (("bare SimPy + greenlet loop", bare * n),
                          ("functional pass (once)", functional),
                          ("  without shortcuts", every),
                          ("timing pass", min(timed)), ("post-pass", min(post))):
        print(f"{name:<28} {seconds:>8.2f} {seconds / n * 1e6:>10.2f} {seconds / n / bare:>7.2f}x")
    same = digest == copied
    print("programs with and without shortcuts: " +
          ("equal" if same else f"DIFFERENT ({copied[:12]} against {digest[:12]})"))
    return same


# ---------------------------------------------------------------- instructions

def inner(what: str, path: str, times: int) -> None:
    """Run `what` `times` times on the trace at `path` (under cachegrind).

    SIGALRM is given a handler that does nothing first: valgrind delivers a signal at
    its own points, so a tick of the replay's watchdog (`lang.watchdog`) that fired as it
    stopped the timer could arrive after it put SIGALRM's default back, which ends the
    process."""
    import signal

    signal.signal(signal.SIGALRM, lambda *_: None)
    trace = read_trace(Path(path))
    amap = replay_address_map(trace, path)
    program = trace.program
    n, pes = commands(program), len(program.streams)
    for _ in range(times):
        if what == "bare":
            bare_loop_times(pes, n // pes)
        elif what == "timing":
            Timing(System(amap), program, dedup=True).run()
        else:
            replay_trace(trace, amap, path)


def instructions(what: str, path: Path, times: int) -> int:
    """Instructions cachegrind counts in a fresh process running `what` `times` times."""
    done = subprocess.run(
        ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
         sys.executable, __file__, "--inner", what, str(path), str(times)],
        capture_output=True, text=True, check=True)
    return int(re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)[1].replace(",", ""))


def counted(layers: int, batch: int) -> None:
    amap = load_address_map("sip")
    kernel = load_kernel("llama_decode")
    result = run_kernel(kernel, amap, params(kernel, layers, batch), timing_only=True)
    program = result.trace.program
    n, pes = commands(program), len(program.streams)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "case.trace"
        write_trace(path, result.trace)
        del result
        one = {what: instructions(what, path, 2) - instructions(what, path, 1)
               for what in ("bare", "timing", "replay")}
    bare = one["bare"] / (n // pes * pes)
    print(f"{named(layers, batch)}: {n:,} commands on {pes} PEs "
          "(cachegrind, two runs less one)")
    print(f"{'':<28} {'instr/command':>13} {'vs bare':>8}")
    for name, count in (("bare SimPy + greenlet loop", bare * n), ("timing pass", one["timing"]),
                        ("post-pass", one["replay"] - one["timing"])):
        print(f"{name:<28} {count / n:>13,.0f} {count / n / bare:>7.2f}x")


def memory(layers: int, batch: int) -> None:
    amap = load_address_map("sip")
    kernel = load_kernel("llama_decode")
    trace = run_kernel(kernel, amap, params(kernel, layers, batch),
                       timing_only=True).trace
    n = commands(trace.program)
    kept: list[int] = []
    run = Timing.run

    def traced(timing: Timing) -> None:
        gc.collect()
        kept.append(tracemalloc.get_traced_memory()[0])
        run(timing)
        gc.collect()
        kept.append(tracemalloc.get_traced_memory()[0])

    Timing.run = traced
    tracemalloc.start()
    try:
        replay_trace(trace, amap, "the run")
    finally:
        tracemalloc.stop()
        Timing.run = run
    before, after = kept
    print(f"{named(layers, batch)}: {n:,} commands on "
          f"{len(trace.program.streams)} PEs (tracemalloc, a replay of the run's trace)")
    print(f"kept by the timing pass: {(after - before) / n:.0f} B a command")


def main() -> int:
    if sys.argv[1:2] == ["--inner"]:
        inner(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=1,
                        help="sequences a step (16: larger messages, the fair-share solver busy)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--instructions", action="store_true",
                        help="count instructions with cachegrind (slow)")
    parser.add_argument("--memory", action="store_true",
                        help="what the timing pass keeps a command (tracemalloc)")
    args = parser.parse_args()
    if args.instructions:
        counted(args.layers, args.batch)
        return 0
    if args.memory:
        memory(args.layers, args.batch)
        return 0
    return 0 if cpu(args.layers, args.batch, args.repeat) else 1


if __name__ == "__main__":
    sys.exit(main())
