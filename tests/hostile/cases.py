"""What the hostile corpora share: the one-PE topology, a small kernel to edit into bad
ones, and the runner of a shell case (a command line run in a fresh folder, checked for
its exit code, its stderr, the files it leaves and the time it takes)."""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import TESTS, InstalledCli, ctrl_c_live

#: The one-PE topology of tests/topologies.
ONE = str(TESTS / "topologies" / "one.toml")

KERNEL_HEAD = "import os, threading, time\nPARAMS = {}\n\ndef setup(host, p):\n    return {}\n\n"
KERNEL_TAIL = ("\n\ndef reference(host, p):\n    return {}\n\n"
               "def outputs(host, args, p):\n    return {}\n")


def kernel_source(body: str) -> str:
    """A kernel module whose `kernel(tl)` is `body` (line 7 is the body's first line)."""
    return KERNEL_HEAD + "def kernel(tl):\n" + body + KERNEL_TAIL


@dataclass(frozen=True)
class Case:
    id: str
    command: str  # a bash command line; K is the installed kernbench
    code: int
    says: str = ""  # a regular expression stderr must match (re.search)
    files: dict[str, str | bytes] = field(default_factory=dict)  # given, must stay as they are
    writes: tuple[str, ...] = ()  # files the case may create or change
    then: Callable[[Path, str], None] | None = None  # a further check: (folder, stdout)
    timeout: float = 60
    root: bool = False  # needs root (mknod, writing /dev)


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


def run_case(tmp_path: Path, c: Case, kernbench: InstalledCli,
             made: dict[str, bytes] | None = None) -> None:
    """Run case `c` in `tmp_path` and check it: its exit code and stderr, within its time
    limit, no traceback or internal error, the files it was given unchanged (but those it
    `writes`), no temporary file left. A file given as ``b""`` is taken from `made`. In the
    command, ``K`` is `kernbench` (the installed CLI), ``PY`` this Python, ``ONE`` the
    one-PE topology."""
    if c.root and os.geteuid() != 0:
        pytest.skip("needs root (mknod)")
    for name, content in c.files.items():
        data = (made or {}).get(name, content) if content == b"" else content
        (tmp_path / name).write_bytes(data if isinstance(data, bytes) else data.encode())
    before = _digest(tmp_path)
    command = c.command.replace("K ", kernbench.shell + " ").replace("ONE", ONE).replace(
        "PY ", shlex.quote(sys.executable) + " ")
    start = time.monotonic()
    proc = subprocess.Popen(["bash", "-c", command], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=ctrl_c_live)  # as at a terminal, run in the background too
    try:
        out, err = proc.communicate(timeout=c.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"{c.id}: still running after {c.timeout} s")
    assert proc.returncode == c.code, (command, err[-2000:])
    assert "Traceback" not in err and "internal error" not in err, err[-2000:]
    assert re.search(c.says, err), (c.says, err[-2000:])
    after = _digest(tmp_path)
    changed = {n for n in set(before) | set(after) if before.get(n) != after.get(n)}
    allowed = {n for n in changed if any(n == w or n.startswith(w + "/") for w in c.writes)}
    assert changed <= allowed | (set(after) - set(before) - {n for n in after if
                                                              n.endswith(".tmp")}), changed
    assert not [n for n in after if n.endswith(".tmp")], after
    assert all(before[n] == after.get(n) for n in before if n not in allowed), changed
    if c.then is not None:
        c.then(tmp_path, out)
    assert time.monotonic() - start < c.timeout


#: A kernel that loads its input and stores it back: the corpora edit it into bad ones.
BASE = '''
PARAMS = {"n": 8}
def setup(host, p):
    return {"x": host.replicate("x", host.random("x", (p["n"],), "f32")), "n": p["n"]}
def kernel(tl, x, n):
    t = tl.load(tl.shard(x), (n,), "f32")
    tl.store(tl.shard(x), t)
def reference(host, p):
    return {}
def outputs(host, args, p):
    return {}
'''
