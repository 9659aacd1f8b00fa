"""A rack-scale run: wall time and peak memory, against a bare loop of as many commands.

Runs `kernbench run gqa_attention -t rack -p model=llama3-8b -p seq_len=131072`
(8,192 PEs, about 1.7 million commands) in a process of its own, with
`--timing-only`, with values, and timing-only writing a trace (`--record`),
then `kernbench replay` of that trace; each process's wall time and peak RSS
are measured from outside (`os.wait4`). Beside them: the bare SimPy + greenlet loop (one
timeout and one switch per command) for the same command count on the same
PE count, measured in this process. Aims: timing-only <= 1.5x the bare
loop, with values <= 6x, peak RSS <= 1.5 GiB.

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
from sim_throughput import bare_loop


def measure(args: list[str]) -> tuple[float, int, str]:
    """(wall s, peak RSS bytes, stdout) of `kernbench ARGS` in a process of its own."""
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
        return wall, usage.ru_maxrss * 1024, out.read().decode()


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
    result = json.loads(rows[0][3])
    commands, pes = result["commands"], result["pes"]
    bare_rate = bare_loop(pes, commands // pes)
    bare_s = commands / bare_rate
    print(f"gqa_attention llama3-8b seq_len={args.seq_len} on rack: {commands:,} commands on "
          f"{pes:,} PEs; latency {result['latency_ns']:.0f} ns")
    print(f"{'':<40} {'wall s':>8} {'vs bare':>8} {'peak RSS':>10}")
    print(f"{'bare SimPy + greenlet loop':<40} {bare_s:>8.1f} {1:>7.1f}x {'':>10}")
    for name, wall, rss, _ in rows:
        print(f"{name:<40} {wall:>8.1f} {wall / bare_s:>7.1f}x {rss / 2**30:>7.2f} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
