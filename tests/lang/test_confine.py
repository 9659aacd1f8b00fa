"""A run leaves the process as it found it: kernel confinement and the kernel's prints are
scoped to the run (`lang.confine`), from one thread or several, and a kernel cannot fork."""

from __future__ import annotations

import json
import os
import sys
import threading
import types

import pytest

import kernbench_cli as kb
from tests.conftest import TESTS

ONE = str(TESTS / "topologies" / "one.toml")
TINY = str(TESTS / "kernels" / "tiny_ops.py")

PRINTER = '''
import sys
PARAMS = {}

def setup(host, p):
    print("the kernel's setup prints")
    sync = sys.modules["kernbench_test_sync"]
    sync.entered.set()
    sync.go.wait(30)
    return {}

def kernel(tl):
    print("the kernel prints")

def reference(host, p):
    return {}

def outputs(host, args, p):
    return {}
'''


def _process_state() -> tuple:
    return (sys.stdout, threading.Thread.start, os._exit, getattr(os, "fork", None))


def test_kb_run_from_threads_leaves_stdout_and_the_standard_library_as_they_were():
    """Four runs at once, each in its own thread: afterwards `sys.stdout`,
    `threading.Thread.start`, `os._exit` and `os.fork` are the very objects they were."""
    before = _process_state()
    latencies: list[int] = []
    errors: list[BaseException] = []

    def one() -> None:
        try:
            latencies.append(kb.run(TINY, ONE, timing_only=True).latency_ps)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert len(latencies) == 4 and len(set(latencies)) == 1
    assert _process_state() == before
    kb.run(TINY, ONE, timing_only=True)  # and from this thread, once more
    assert _process_state() == before


def test_only_the_running_threads_prints_go_to_stderr(tmp_path, capsys, monkeypatch):
    """While a kernel's setup (in another thread) prints and waits, this thread prints too:
    the kernel's lines go to stderr, this thread's to stdout."""
    sync = types.SimpleNamespace(entered=threading.Event(), go=threading.Event())
    monkeypatch.setitem(sys.modules, "kernbench_test_sync", sync)
    kernel = tmp_path / "printer.py"
    kernel.write_text(PRINTER)
    done: list[object] = []
    worker = threading.Thread(target=lambda: done.append(kb.run(str(kernel), ONE)))
    worker.start()
    try:
        assert sync.entered.wait(60)
        print("the notebook prints")
    finally:
        sync.go.set()
        worker.join(120)
    assert done
    out, err = capsys.readouterr()
    assert out == "the notebook prints\n"
    assert "the kernel's setup prints\n" in err and "the kernel prints\n" in err


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork here")
@pytest.mark.parametrize("where", ["kernel", "setup"])
def test_a_kernel_that_forks_is_an_error_and_the_report_is_not_printed(tmp_path, kernbench,
                                                                      where):
    """`os.fork()` in kernel code is refused before any child exists: one error line with
    the kernel's line, exit 1, no report (the installed CLI: a fork would fork pytest)."""
    body = "    os.fork()\n"
    kernel = tmp_path / "forks.py"
    kernel.write_text(
        "import os\nPARAMS = {}\n\ndef setup(host, p):\n"
        + (body if where == "setup" else "") + "    return {}\n\n"
        "def kernel(tl):\n" + (body if where == "kernel" else "    pass\n")
        + "\ndef reference(host, p):\n    return {}\n\n"
        "def outputs(host, args, p):\n    return {}\n")
    proc = kernbench.run("run", str(kernel), "-t", ONE, cwd=tmp_path)
    out, err = proc.stdout, proc.stderr
    assert proc.returncode == 1, err
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert "the kernel called os.fork()" in err
    line = 5 if where == "setup" else 8
    assert f"forks.py:{line}:" in err


def test_a_kernel_that_replaces_stdout_and_stderr_leaves_kernbench_its_own(cli, tmp_path):
    """`sys.stdout` set to None and `sys.stderr` to a buffer, and not put back: the report
    is printed where it goes all the same (it was an internal error, or nothing at all)."""
    path = tmp_path / "streams.py"
    path.write_text("import io, sys\nPARAMS = {}\n\ndef setup(host, p):\n    return {}\n\n"
                    "def kernel(tl):\n    sys.stdout = None\n    sys.stderr = io.StringIO()\n"
                    "    tl.cycles(1)\n\ndef reference(host, p):\n    return {}\n\n"
                    "def outputs(host, args, p):\n    return {}\n")
    before = sys.stdout, sys.stderr
    code, out, err = cli("run", str(path), "-t", ONE, "--timing-only", "--json")
    assert (code, err) == (0, "")
    assert json.loads(out)["latency_ps"] > 0
    assert (sys.stdout, sys.stderr) == before


@pytest.mark.parametrize("where", ["kernel", "setup"])
def test_a_kernel_that_changes_directory_leaves_the_runs_outputs_where_asked(
        cli, tmp_path, monkeypatch, where):
    """`os.chdir` in kernel code: the working directory is put back when the code ends, so
    `--save` and `--oplog` (relative paths, checked in the directory the run started in)
    are written there, not in the kernel's, where an old file at the path asked for was
    left as if this run had made it; and `kb.run`'s caller stays where it was."""
    away, start = tmp_path / "away", tmp_path / "start"
    away.mkdir()
    start.mkdir()
    body = f"    os.chdir({str(away)!r})\n"
    path = tmp_path / "moves.py"
    path.write_text(
        "import os\nimport numpy as np\nPARAMS = {}\n\ndef setup(host, p):\n"
        + (body if where == "setup" else "")
        + "    return {'x': host.place('x', np.ones(4, np.float32), 0)}\n\n"
        "def kernel(tl, x):\n" + (body if where == "kernel" else "")
        + "    tl.store(x, tl.load(x, (4,), 'f32'))\n\n"
        "def reference(host, p):\n    return {}\n\n"
        "def outputs(host, args, p):\n    return {}\n")
    monkeypatch.chdir(start)
    (start / "out.npz").write_bytes(b"an older run's")
    code, _, err = cli("run", str(path), "-t", ONE, "--save", "out.npz", "--oplog", "ops.jsonl")
    assert code == 0, err
    assert os.getcwd() == str(start)
    assert (start / "out.npz").read_bytes() != b"an older run's"
    assert (start / "ops.jsonl").is_file() and not list(away.iterdir())
    kb.run(str(path), ONE)
    assert os.getcwd() == str(start)


@pytest.mark.parametrize("order", ["confined first", "routed first"])
def test_threads_entering_and_leaving_in_turn_leave_stdout_as_it_was(order):
    """Two threads, one in kernel code (`confined`, a kernel's import) and one routing its
    prints to stderr (a run), enter and leave interleaved. Confined first, left first:
    while the routed one runs on, sys.stdout is still the router (the other's leaving put
    the original back, and the run's prints went to stdout). Routed first, left first:
    afterwards sys.stdout is the original (the confined thread took the router it found
    for "its" stdout and put it back after the run had left)."""
    from kernbench_cli.lang.confine import confined, printing_to_stderr

    original = sys.stdout
    first, second = threading.Event(), threading.Event()
    first_left, seen = threading.Event(), []
    one, two = (confined, printing_to_stderr) if order == "confined first" else \
        (printing_to_stderr, confined)

    def enters_first() -> None:
        with one():
            first.set()
            second.wait(10)
        first_left.set()

    def enters_second() -> None:
        first.wait(10)
        with two():
            second.set()
            first_left.wait(10)
            seen.append(sys.stdout is not original if two is printing_to_stderr else True)

    threads = [threading.Thread(target=enters_first), threading.Thread(target=enters_second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert seen == [True] and sys.stdout is original


def test_a_thread_entering_while_another_kernel_moved_leaves_the_directory_as_it_was(
        tmp_path, monkeypatch):
    """The directory is the process's: a thread entering kernel code while another's kernel
    had moved took that directory for the one to go back to, and went back there after
    both had left (the next run's relative outputs went to the kernel's folder)."""
    from kernbench_cli.lang.confine import confined

    away = tmp_path / "away"
    away.mkdir()
    monkeypatch.chdir(tmp_path)
    moved, second_in, first_left = threading.Event(), threading.Event(), threading.Event()

    def moves() -> None:
        with confined():
            os.chdir(away)
            moved.set()
            second_in.wait(10)
        first_left.set()

    def enters_after() -> None:
        moved.wait(10)
        with confined():
            second_in.set()
            first_left.wait(10)

    threads = [threading.Thread(target=moves), threading.Thread(target=enters_after)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert os.getcwd() == str(tmp_path)


def test_the_stand_in_on_stdout_outlives_every_run():
    """A thread inside `print()` holds sys.stdout borrowed (CPython 3.11): a stand-in made
    per run and freed as the run left it crashed the process (a segmentation fault) when
    another thread printed as a run ended. One stand-in serves every run, and lives on."""
    import weakref

    from kernbench_cli.lang.confine import printing_to_stderr

    original, seen = sys.stdout, []
    for _ in range(2):
        with printing_to_stderr():
            seen.append(weakref.ref(sys.stdout))
            assert sys.stdout is not original
        assert sys.stdout is original
    assert seen[0]() is not None and seen[0]() is seen[1]()


def test_a_stop_while_confinement_is_put_in_place_leaves_nothing_behind(monkeypatch):
    """A Ctrl-C landing as `confined` put its guards in place skipped the rest, and its
    end: the guards (on `threading.Thread.start`, `os.fork`, `os._exit`) and kernbench's
    Ctrl-C handler stayed, for the caller's own code. The stop is taken once the guards
    are in place, inside the block's handling, which takes them away."""
    import os
    import signal

    from kernbench_cli.lang import confine

    install = confine._install

    def interrupted_install() -> None:
        os.kill(os.getpid(), signal.SIGINT)
        install()

    # Python's own Ctrl-C handler: a run in the background of a script has it ignored
    interrupts = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        before = (signal.getsignal(signal.SIGINT), threading.Thread.start, os.fork)
        monkeypatch.setattr(confine, "_install", interrupted_install)
        with pytest.raises(KeyboardInterrupt), confine.confined():
            pass
        after = (signal.getsignal(signal.SIGINT), threading.Thread.start, os.fork)
    finally:
        signal.signal(signal.SIGINT, interrupts)
    assert after == before and not confine._CONFINED and not confine._CHAINED
