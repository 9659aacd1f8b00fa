"""How fast `kernbench decode` answers, against a bare Typer command.

Both run as fresh processes, interleaved so that machine noise hits them
alike; the ratio of medians is the result (aim: under 1.2x). Both read
bytecode from a warmed cache in a temporary PYTHONPYCACHEPREFIX, as a
`pip install .` would leave them: without it an editable checkout under
PYTHONDONTWRITEBYTECODE=1 recompiles kernbench on every start while Typer,
installed, does not.

    python benchmarks/decode_startup.py [--runs 21]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BARE = """\
import typer

app = typer.Typer()


@app.command()
def decode(addr: str, topology: str = "default") -> None:
    print(addr)


@app.command()
def other() -> None:
    pass


if __name__ == "__main__":
    app()
"""

AIM = 1.2


def _time(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bare = Path(tmp) / "bare.py"
        bare.write_text(BARE)
        env = dict(os.environ, PYTHONPYCACHEPREFIX=str(Path(tmp) / "pycache"))
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        addr = "0xe000001234"
        ours = [sys.executable, "-m", "kernbench_cli", "decode", addr, "--topology", "sip"]
        theirs = [sys.executable, str(bare), "decode", addr]
        for cmd in (ours, theirs):  # warm the bytecode cache and the page cache
            _time(cmd, env)
        t_ours, t_bare = [], []
        for _ in range(args.runs):
            t_ours.append(_time(ours, env))
            t_bare.append(_time(theirs, env))
    ours_s, bare_s = statistics.median(t_ours), statistics.median(t_bare)
    ratio = ours_s / bare_s
    print(f"kernbench decode : median {ours_s * 1000:7.1f} ms over {args.runs} runs")
    print(f"bare Typer       : median {bare_s * 1000:7.1f} ms over {args.runs} runs")
    verdict = "met" if ratio < AIM else "MISSED"
    print(f"ratio            : {ratio:.3f}x  (aim < {AIM}x: {verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
