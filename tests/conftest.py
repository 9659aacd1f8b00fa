"""Shared fixtures of every test directory: shipped topologies compiled once, the CLI in
this process (`cli`) and the installed CLI in a subprocess (`kernbench`), a topology
writer and a kernel runner; `TESTS` and `ROOT` name the test data and the repository."""

from __future__ import annotations

import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernbench_cli.address import AddressMap
from kernbench_cli.config import load_topology
from kernbench_cli.shipped import data_dir

ROOT = Path(__file__).resolve().parent.parent


def shipped(name: str) -> Path:
    return data_dir("topologies") / f"{name}.toml"


@pytest.fixture(scope="session")
def amaps() -> dict[str, AddressMap]:
    return {n: AddressMap.compile(load_topology(shipped(n))) for n in ("default", "sip", "rack")}


@pytest.fixture(scope="session")
def amap(amaps) -> AddressMap:
    return amaps["default"]


@pytest.fixture
def cli():
    """Run `kernbench ARGS…`; returns (exit code, stdout, stderr)."""
    from kernbench_cli.cli.app import app

    runner = CliRunner()

    def run(*args: str) -> tuple[int, str, str]:
        result = runner.invoke(app, list(args))
        if result.exception and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result.exit_code, result.stdout, result.stderr

    return run


def memory_low_after(monkeypatch, reads: int) -> list[int]:
    """The watchdog reads the machine's memory at each tick, 10 GiB left of 24 its first
    `reads` times, then 900 MiB (under its floor of 4%); the readings, as they are made."""
    from kernbench_cli.lang import watchdog

    gib, made = 1 << 30, []

    def memory_left():
        made.append(10 * gib if len(made) < reads else 900 << 20)
        return made[-1], 24 * gib

    monkeypatch.setattr(watchdog, "memory_left", memory_left)
    monkeypatch.setattr(watchdog, "MEMORY_READ_S", 0.0)  # at each tick
    return made


#: Seconds a subprocess may take before a test fails: a guard against a hang, never the
#: thing a test checks (it holds under any load).
HANG_GUARD_S = 300


class InstalledCli:
    """The installed `kernbench` in a subprocess (the console script beside this Python, else
    ``python -m kernbench_cli``): for what only a real process shows (signals, pipes, closed
    streams, a fresh interpreter). `run` waits for the end, `start` returns the process."""

    def __init__(self) -> None:
        exe = shutil.which("kernbench", path=str(Path(sys.executable).parent))
        self.argv = [exe] if exe else [sys.executable, "-m", "kernbench_cli"]

    @property
    def shell(self) -> str:
        """The command as a shell word, for `bash -c` lines."""
        return shlex.join(self.argv)

    def run(self, *args: str, timeout: float = HANG_GUARD_S,
            **kwargs) -> subprocess.CompletedProcess:
        """`kernbench ARGS…` to its end: stdout and stderr captured as text unless
        `kwargs` (`subprocess.run`'s) say otherwise."""
        if "stdout" not in kwargs and "stderr" not in kwargs:
            kwargs["capture_output"] = True
        kwargs.setdefault("text", True)
        return subprocess.run([*self.argv, *args], timeout=timeout, **kwargs)

    def start(self, *args: str, **kwargs) -> subprocess.Popen:
        """`kernbench ARGS…` started as from a terminal, where Ctrl-C is live: stdout and
        stderr are text pipes unless `kwargs` (`subprocess.Popen`'s) say otherwise. (A test
        run in the background of a script inherits Ctrl-C ignored, and a process that
        starts with it ignored keeps it so, as kernbench does: its Ctrl-C tests would
        then test nothing.)"""
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        kwargs.setdefault("text", True)
        kwargs.setdefault("preexec_fn", ctrl_c_live)
        return subprocess.Popen([*self.argv, *args], **kwargs)


def ctrl_c_live() -> None:
    """In a child before it runs kernbench: SIGINT's and SIGHUP's default actions, as at a
    terminal (a test run in the background, or under nohup, has them ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


@pytest.fixture
def short_tmp():
    """A fresh folder of a short path (a TMPDIR for a sweep's workers: the fork server's
    socket goes in it, and a socket's path is at most 107 bytes, which `tmp_path` under
    pytest-xdist can pass), removed after."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="kb-", dir="/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def kernbench() -> InstalledCli:
    """The installed CLI in a subprocess (see `InstalledCli`)."""
    return InstalledCli()


SYSTEM = """
[system]
racks = 1
sips_per_rack = 1
cubes_per_sip = 2
cube_mesh = [2, 1]
pes_per_cube = 8
pe_mesh = [4, 2]
"""


@pytest.fixture
def write_topology(tmp_path):
    """Write a topology TOML (the [system] table of default.toml plus `extra`)."""

    def write(extra: str = "", name: str = "t.toml", system: str = SYSTEM) -> Path:
        path = tmp_path / name
        path.write_text(system + extra)
        return path

    return write


TESTS = Path(__file__).resolve().parent


def test_topology(name: str) -> str:
    """A topology of tests/topologies by name, else a shipped one."""
    path = TESTS / "topologies" / f"{name}.toml"
    return str(path) if path.is_file() else name


test_topology.__test__ = False  # a helper, not a test


@pytest.fixture
def run():
    """Run a kernel (tests/kernels/NAME.py, else shipped) and return its RunResult."""
    from kernbench_cli.address import load_address_map
    from kernbench_cli.sim.kernels import load_kernel, parse_params
    from kernbench_cli.sim.run import run_kernel

    def go(kernel: str, topology: str = "one", params: tuple[str, ...] = (),
           costs: Path | None = None, seed: int = 0, timing_only: bool = False,
           oplog: bool = True, sets: tuple[str, ...] = (), dedup: bool = True,
           shortcuts: bool = True):
        path = TESTS / "kernels" / f"{kernel}.py"
        module = load_kernel(str(path) if path.is_file() else kernel)
        amap = load_address_map(test_topology(topology), costs, sets)
        return run_kernel(module, amap, parse_params(module, list(params)), seed=seed,
                          timing_only=timing_only, oplog=oplog, dedup=dedup,
                          shortcuts=shortcuts)

    return go
