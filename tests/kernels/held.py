"""A point a test holds for as long as it likes: with $KERNBENCH_TEST_HOLD naming a folder,
setup writes `started.STEP` there, and the kernel runs on (a cycle every 10 ms, so the
watchdog sees it issue commands) while `hold.STEP` is there. Without the variable, or once
the file is gone, it takes 1,000 cycles and ends. Sweeps over `-p step=…` use it to stop
at a known point, whatever the machine's load."""

import os
import time
from pathlib import Path

PARAMS = {"step": 0}


def _folder() -> Path | None:
    folder = os.environ.get("KERNBENCH_TEST_HOLD")
    return Path(folder) if folder else None


def setup(host, p):
    folder = _folder()
    if folder is not None:
        (folder / f"started.{p['step']}").touch()
    return {"step": p["step"]}


def kernel(tl, step):
    folder = _folder()
    while folder is not None and (folder / f"hold.{step}").exists():
        tl.cycles(1)
        time.sleep(0.01)
    tl.cycles(1000)


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
