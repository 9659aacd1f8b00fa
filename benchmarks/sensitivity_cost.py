"""What `run --sensitivity` costs against the run itself (issue 19's target: <= 3x for >= 10
keys of a `sip` llama3-8b 32k attention run).

Measured in one process, one after the other, CPU time (process_time) and wall time, best
of `ROUNDS`: a timing-only run, then `kb.sensitivity` of it (one replay per key). Prints the
ratio and the keys timed.

    .venv/bin/python benchmarks/sensitivity_cost.py
"""

from __future__ import annotations

import time

import kernbench_cli as kb
from kernbench_cli.api.sensitivity import sensitivity

ROUNDS = 3
CASE = {"kernel": "gqa_attention", "topology": "sip",
        "params": {"model": "llama3-8b", "seq_len": 32768}, "timing_only": True}


def _timed(fn):
    cpu, wall = time.process_time(), time.perf_counter()
    value = fn()
    return value, time.process_time() - cpu, time.perf_counter() - wall


def main() -> None:
    best_run = best_sens = (float("inf"), float("inf"))
    keys = 0
    for _ in range(ROUNDS):
        result, cpu, wall = _timed(lambda: kb.run(**CASE))
        best_run = min(best_run, (cpu, wall))
        found, cpu, wall = _timed(lambda r=result: sensitivity(r))
        best_sens = min(best_sens, (cpu, wall))
        keys = len(found.changes)
    print(f"run: {best_run[0]:.2f} s CPU, {best_run[1]:.2f} s wall (best of {ROUNDS})")
    print(f"sensitivity ({keys} keys, one replay each): {best_sens[0]:.2f} s CPU, "
          f"{best_sens[1]:.2f} s wall")
    print(f"ratio: {best_sens[0] / best_run[0]:.2f}x CPU, {best_sens[1] / best_run[1]:.2f}x "
          "wall (aim <= 3x)")


if __name__ == "__main__":
    main()
