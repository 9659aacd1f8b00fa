"""A rack-scale run: wall time and peak memory, against a bare loop of as many commands.

Runs `kernbench run gqa_attention -t rack -p model=llama3-8b -p seq_len=131072`
(8,192 PEs, about 1.7 million commands) in a process of its own, with
`--timing-only`, with values, and timing-only writing a trace (`--record`),
then `kernbench replay` of that trace; each process's CPU time (user and system), wall
time and peak RSS are measured from outside (`os.wait4`). Beside them: the bare SimPy +
greenlet loop (one timeout and one switch per command) for the same command count on
the same PE count, measured in this process; ratios are of CPU time (the machine is
shared). Aims: timing-only <= 1.5x the bare loop, with values <= 4x, peak RSS <=
1.5 GiB.

    python benchmarks/rack_scale.py [--seq-len N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from sim_throughput import bare_loop_times


def measure(args: list[str]) -> tuple[float, float, int, str]:
    """(CPU s, wall s, peak RSS bytes, stdout) of `kernbench ARGS` in a process of its
    own."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-m", "kernbench_cli", *args], stdout=out,
                                stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode:
            raise SystemExit(f"kernbench {' '.join(args)} failed: {err.read().decode()}")
        return (usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss * 1024,
                out.read().decode())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq-len", type=int, default=131072)
    args = parser.parse_args()
    run = ["run", "gqa_attention", "-t", "rack", "-p", "model=llama3-8b", "-p",
           f"seq_len={args.seq_len}", "--json"]
    with tempfile.TemporaryDirectory() as tmp:
        trace = str(Path(tmp) / "rack.trace")
        rows = [("timing-only", *measure([*run, "--timing-only"])),
                ("with values", *measure(run)),
                ("timing-only, writing its trace", *measure([*run, "--timing-only", "--record",
                                                             trace])),
                ("replay of that trace", *measure(["replay", trace, "--json"]))]
    result = json.loads(rows[0][4])
    commands, pes = result["commands"], result["pes"]
    scale = commands / (commands // pes * pes)  # the loop runs as many on every PE
    bare_cpu, bare_wall = (s * scale for s in bare_loop_times(pes, commands // pes))
    print(f"gqa_attention llama3-8b seq_len={args.seq_len} on rack: {commands:,} commands on "
          f"{pes:,} PEs; latency {result['latency_ns']:.0f} ns")
    print(f"{'':<40} {'CPU s':>8} {'wall s':>8} {'vs bare':>8} {'peak RSS':>10}  aim")
    print(f"{'bare SimPy + greenlet loop':<40} {bare_cpu:>8.1f} {bare_wall:>8.1f} {1:>7.2f}x")
    aims = {"timing-only": 1.5, "with values": 4.0}
    for name, cpu, wall, rss, _ in rows:
        aim = f"  <= {aims[name]:g}x" if name in aims else ""
        print(f"{name:<40} {cpu:>8.1f} {wall:>8.1f} {cpu / bare_cpu:>7.2f}x "
              f"{rss / 2**30:>7.2f} GiB{aim}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
