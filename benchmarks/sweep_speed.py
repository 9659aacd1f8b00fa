"""Sweep throughput: worker processes against one-after-another, replay against re-running.

1. A 16-point sweep of `gqa_attention` on `default` (`-p seq_len` x `-p chunk`,
   full runs with values) with `--jobs 2`, against the same points with
   `--jobs 1` (aim: >= 1.6x faster on 2 cores).
2. A cost-only sweep of 8 points (`--set costs.issue.*`) of llama3-8b at 128k
   on `sip`: recorded once and replayed per point (`--timing-only`), against
   each point a full run (aim: >= 3x faster), and each a timing-only run
   (`--no-replay`).

Each is `kernbench sweep` in a process of its own, timed from outside; the
ratios are the result (the machines are noisy).

    python benchmarks/sweep_speed.py
"""

from __future__ import annotations

import subprocess
import sys
import time


def timed(*args: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "kernbench_cli", "sweep", *args], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    grid = ["gqa_attention", "-p", "seq_len=32768,65536,131072,262144", "-p",
            "chunk=256,512,1024,2048"]
    one = timed(*grid, "--jobs", "1")
    two = timed(*grid, "--jobs", "2")
    print(f"16 points, gqa_attention on default, values: --jobs 1 {one:.1f} s, --jobs 2 "
          f"{two:.1f} s: {one / two:.2f}x (aim >= 1.6x)")
    costs = ["gqa_attention", "-t", "sip", "-p", "model=llama3-8b", "-p", "seq_len=131072",
             "--set", "costs.issue.math=2ns,4ns,8ns,16ns", "--set",
             "costs.issue.composite=40ns,80ns", "--jobs", "1"]
    replayed = timed(*costs, "--timing-only")
    timing_only = timed(*costs, "--timing-only", "--no-replay")
    full = timed(*costs)
    print(f"8 cost-only points, llama3-8b 128k on sip: recorded once and replayed "
          f"{replayed:.1f} s; each point a full run {full:.1f} s: {full / replayed:.2f}x "
          f"(aim >= 3x); each a timing-only run {timing_only:.1f} s: "
          f"{timing_only / replayed:.2f}x")


if __name__ == "__main__":
    main()
