"""What a run costs through the Python API, against the same run through the CLI.

One timing-only point of `gqa_attention` on topology `sip`, two ways, interleaved so that
machine noise hits both alike: in this process, `kb.run(...)` (after one warm-up call that
pays the imports, as a notebook or a sweep driver pays them once), and as a fresh process,
`kernbench run gqa_attention -t sip --timing-only --json` (which pays Python's start-up,
the imports, the kernel's and topology's loading and the JSON print every time). CPU time
(the process's own, or the child's from `getrusage`) and wall time, best of N each; the
result is the ratio API / CLI (aim: at most 0.5x). The CLI reads bytecode from a warmed
cache in a temporary PYTHONPYCACHEPREFIX, as a `pip install .` would leave it (see
`decode_startup.py`). Both must give the same JSON, or the figures mean nothing.

    python benchmarks/api_speed.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

AIM = 0.5
KERNEL, TOPOLOGY = "gqa_attention", "sip"


def cli_command() -> list[str]:
    """`kernbench` beside this Python (a venv's console script), else `python -m`."""
    script = Path(sys.executable).parent / "kernbench"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "kernbench_cli"]


def time_cli(env: dict[str, str]) -> tuple[float, float, dict]:
    """(CPU s, wall s, parsed JSON) of one CLI run in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([*cli_command(), "run", KERNEL, "-t", TOPOLOGY, "--timing-only",
                           "--json"], env=env, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, json.loads(done.stdout)


def time_api() -> tuple[float, float, dict]:
    """(CPU s, wall s, to_dict()) of one in-process `kb.run`."""
    import kernbench_cli as kb

    cpu, start = time.process_time(), time.perf_counter()
    result = kb.run(KERNEL, topology=TOPOLOGY, timing_only=True)
    return time.process_time() - cpu, time.perf_counter() - start, result.to_dict()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, PYTHONPYCACHEPREFIX=str(Path(tmp) / "pycache"))
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        _, _, cli_json = time_cli(env)  # warm the bytecode cache and the page cache
        _, _, api_json = time_api()  # the imports, once
        if cli_json != api_json:
            print("the API's result differs from the CLI's --json: no figures")
            return 1
        cli, api = [], []
        for _ in range(args.runs):
            cli.append(time_cli(env)[:2])
            api.append(time_api()[:2])
    best_cli = [min(t[i] for t in cli) for i in (0, 1)]
    best_api = [min(t[i] for t in api) for i in (0, 1)]
    print(f"{KERNEL} -t {TOPOLOGY} --timing-only, best of {args.runs}:")
    print(f"  CLI (fresh process): CPU {best_cli[0]:6.3f} s  wall {best_cli[1]:6.3f} s")
    print(f"  kb.run (in process): CPU {best_api[0]:6.3f} s  wall {best_api[1]:6.3f} s")
    for what, i in (("CPU", 0), ("wall", 1)):
        ratio = best_api[i] / best_cli[i]
        verdict = "met" if ratio <= AIM else "MISSED"
        print(f"  ratio API / CLI, {what:4}: {ratio:.3f}x  (aim <= {AIM}x: {verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
