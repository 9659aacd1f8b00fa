"""Signals, pipes and hangs, through the installed CLI in a subprocess: an interrupt or a
SIGKILL wherever it lands, a kernel looping in Python, a closed pipe, numpy's warnings and
Ctrl-C in a sweep. Each ends with its documented exit code, no traceback and no temporary
file left behind. The signal tests send their signal after a delay, to land in each phase
of a run: they are marked `slow`."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time

import pytest

from kernbench_cli.sim.trace_file import MAGIC
from tests.conftest import HANG_GUARD_S, ROOT, TESTS
from tests.hostile.cases import BASE, ONE

#: About 5 s on the CI machine: 3 s of simulation, then 55 MB of outputs written.
SLOW = ["run", "gqa_attention", "-t", "sip", "-p", "model=llama3-8b", "-p", "seq_len=32768",
        "--record", "r.trace", "--oplog", "o.jsonl", "--chrome-trace", "c.json",
        "--critical-path", "p.jsonl"]


@pytest.mark.slow  # seconds each, signals against wall-clock delays: CI's slow part
@pytest.mark.parametrize(("sig", "delay"), [
    (signal.SIGINT, 0.6), (signal.SIGINT, 1.5), (signal.SIGINT, 3.0), (signal.SIGINT, 3.8),
    (signal.SIGINT, 4.4), (signal.SIGINT, 5.0), (signal.SIGTERM, 2.0), (signal.SIGTERM, 4.2),
    (signal.SIGHUP, 2.0), (signal.SIGHUP, 4.2)])
def test_an_interrupt_exits_130_and_leaves_no_temporary_file(tmp_path, kernbench, sig, delay):
    """Whenever it lands (start-up, functional pass, timing pass, writing the outputs), an
    interrupt ends the run with `interrupted`, exit 130, no traceback, no .tmp file; the
    outputs are all there, each whole, or none is (some were: those written before it)."""
    proc = kernbench.start(*SLOW, cwd=tmp_path)
    time.sleep(delay)
    proc.send_signal(sig)
    _out, err = proc.communicate(timeout=120)
    if proc.returncode == 0:  # finished before the signal: nothing to interrupt
        assert err == "" and delay >= 3
    else:
        assert (proc.returncode, err.strip().splitlines()[-1:]) == (130, ["interrupted"]), err
    assert "Traceback" not in err
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))
    written = {p.name for p in tmp_path.iterdir()}
    assert written in (set(), {"r.trace", "o.jsonl", "c.json", "p.jsonl"}), written
    for name in ("o.jsonl", "p.jsonl"):
        if (tmp_path / name).exists():
            for line in (tmp_path / name).read_text().splitlines():
                json.loads(line)
    if (tmp_path / "c.json").exists():
        json.loads((tmp_path / "c.json").read_text())


@pytest.mark.slow  # seconds each, signals against wall-clock delays: CI's slow part
def test_sigkill_leaves_the_old_output_or_the_new_and_stale_temporaries_are_ignored(
        tmp_path, cli, kernbench):
    """SIGKILL cannot be cleaned up after: the old file stays until the new one is whole
    (then replaces it), and a stale `.NAME.XXXX.tmp` is never read as an output."""
    old = tmp_path / "r.trace"
    assert cli("run", str(TESTS / "kernels" / "tiny_ops.py"), "-t", ONE, "--record",
               str(old))[0] == 0
    before = old.read_bytes()
    for delay in (0.5, 3.5, 4.5):
        proc = kernbench.start(*SLOW, cwd=tmp_path)
        time.sleep(delay)
        proc.kill()
        proc.communicate(timeout=120)
        now = old.read_bytes()
        assert now == before or gzip.decompress(now).startswith(MAGIC)
        code, _, err = cli("replay", str(old))
        assert (code, err) == (0, "")
        before = now
    stale = tmp_path / ".r.trace.abcd1234.tmp"
    stale.write_bytes(b"half a trace")
    assert cli("replay", str(old))[0] == 0
    goldens = tmp_path / "goldens"
    goldens.mkdir()
    shutil.copy(ROOT / "goldens" / "softmax.default.json", goldens)
    (goldens / ".softmax.default.json.abcd.tmp").write_text("{")
    code, out, _ = cli("golden", "check", "--only", "softmax.default", "--dir", str(goldens))
    assert (code, out) == (0, "1 golden case matches\n")


@pytest.mark.parametrize("loop", [
    "while True:\n        pass",
    "while float(t[0]) < 1e9:\n        pass",
])
def test_a_kernel_looping_in_python_is_stopped_with_its_line(tmp_path, kernbench, loop):
    kernel = tmp_path / "spin.py"
    kernel.write_text(BASE.replace("    tl.store(tl.shard(x), t)", f"    {loop}"))
    proc = kernbench.run("run", str(kernel), "-t", ONE, "--kernel-timeout", "1", cwd=tmp_path)
    err = proc.stderr
    line = next(i for i, text in enumerate(kernel.read_text().splitlines(), 1)
                if "while" in text)
    assert proc.returncode == 1, err
    assert err.startswith(f"error: {kernel}:"), err
    assert "issued no command for 1 s of wall-clock time: an endless loop in the kernel's " \
           "Python? (--kernel-timeout changes the limit)" in err
    assert int(err.split(":")[2]) in (line, line + 1)


#: A kernel that takes every stop: each exception its loop gets, it carries on.
TAKES_EVERY_STOP = "while True:\n        try:\n            while True:\n                pass\n" \
    "        except BaseException:\n            continue"


#: TAKES_EVERY_STOP, saying once (on stderr) that it spins, inside what takes the stops
SAYS_IT_SPINS = ("    said = False\n    while True:\n        try:\n            if not said:\n"
                 "                said = True\n                print('spinning', flush=True)\n"
                 "            while True:\n                pass\n"
                 "        except BaseException:\n            continue")


def test_a_kernel_taking_every_stop_is_ended_by_the_cli_with_its_line(tmp_path, kernbench):
    """Past its `--kernel-timeout` the kernel takes each `KernelTimeout` raised in it (the
    timer's, then the backstop thread's), so the run never ended: after two of the
    backstop's the CLI ends the process, naming the line the kernel was on."""
    kernel = tmp_path / "spin.py"
    kernel.write_text(BASE.replace("    tl.store(tl.shard(x), t)", f"    {TAKES_EVERY_STOP}"))
    start = time.monotonic()
    proc = kernbench.run("run", str(kernel), "-t", ONE, "--kernel-timeout", "1", cwd=tmp_path,
                         timeout=60)
    lines = kernel.read_text().splitlines()
    inner = [i for i, text in enumerate(lines, 1) if "while" in text or "pass" in text]
    assert proc.returncode == 1, proc.stderr
    head, _, message = proc.stderr.partition(": no progress")
    assert (head.rpartition(":")[0], message) == (  # relative to its folder, the run's
        "error: spin.py", " for 1 s of wall-clock time, and the code took every stop (an except "
        "BaseException that carries on?): kernbench ended it\n")
    assert int(head.rpartition(":")[2]) in inner
    assert time.monotonic() - start < 30  # the limit, then a second a raise: some 4 s


@pytest.mark.slow  # seconds each, signals against wall-clock delays: CI's slow part
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_second_stop_ends_a_kernel_that_took_the_first(tmp_path, kernbench, sig):
    """Ctrl-C (or SIGTERM) raises `Interrupted` in the kernel's code, which takes it and
    runs on: the second ends the process at once, exit 130. The first is sent once the
    kernel says it spins (after a fixed 3 s, a loaded machine had not reached it yet, and
    the first stop rightly ended the run); it says so inside what takes every stop, so a
    stop landing in `print` is taken too."""
    kernel = tmp_path / "spin.py"
    kernel.write_text(BASE.replace("    tl.store(tl.shard(x), t)", SAYS_IT_SPINS))
    proc = kernbench.start("run", str(kernel), "-t", ONE, cwd=tmp_path)
    ready, _, _ = select.select([proc.stderr], [], [], HANG_GUARD_S)
    assert ready and proc.stderr.readline() == "spinning\n"
    proc.send_signal(sig)
    time.sleep(1)
    assert proc.poll() is None  # taken
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert (proc.returncode, out, err) == (130, "", "interrupted (the kernel's code took the "
                                                    "stop before this one and ran on)\n")


def test_a_closed_pipe_ends_quietly(tmp_path, kernbench):
    proc = subprocess.run(kernbench.shell + " run sharded_gemm | head -1", shell=True,
                          cwd=tmp_path, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert proc.stdout.startswith("kernel ")
    assert proc.stderr == ""


@pytest.mark.slow  # a rack run, to report more than a pipe holds
@pytest.mark.parametrize("unbuffered", [False, True])
def test_a_pipe_closed_mid_report_ends_141_unbuffered_too(tmp_path, kernbench, unbuffered):
    """The reader takes 10 bytes of a 2.7 MB report and goes: exit 141, quietly. Under
    PYTHONUNBUFFERED the report went to the descriptor in one write, whose short count
    was dropped: exit 0, the rest lost without a word."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env.update({"PYTHONUNBUFFERED": "1"} if unbuffered else {})
    proc = subprocess.run(
        kernbench.shell + " run softmax -t rack --timing-only --per-pe --json | (sleep 1; "
        "head -c 10 >/dev/null); echo ${PIPESTATUS[0]}", shell=True, executable="/bin/bash",
        cwd=tmp_path, capture_output=True, text=True, timeout=HANG_GUARD_S, env=env)
    assert (proc.stdout, proc.stderr) == ("141\n", "")


def test_stdout_and_stderr_to_one_pipe_keep_their_order_unbuffered(tmp_path, kernbench):
    """Under PYTHONUNBUFFERED, stdout goes through a buffer flushed at each line, as
    stderr: a report's lines come before the error that follows them."""
    proc = subprocess.run(kernbench.shell + " decode 0x7ffffffffffff 2>&1 | cat",
                          shell=True, cwd=tmp_path, capture_output=True, text=True,
                          timeout=HANG_GUARD_S, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("0x7ffffffffffff: not in topology") and \
        lines[-1].startswith("error: not in topology 'default'")


@pytest.mark.parametrize("unbuffered", [False, True])
@pytest.mark.parametrize("json_out", [False, True])
def test_stdout_past_its_file_size_limit_is_one_line(tmp_path, kernbench, unbuffered,
                                                     json_out):
    """`ulimit -f 1` and the report to a file: EFBIG, one line and exit 1 (it was a
    traceback, an "internal error", or under PYTHONUNBUFFERED a file cut at 1 KiB and
    exit 0)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env.update({"PYTHONUNBUFFERED": "1"} if unbuffered else {})
    proc = subprocess.run(
        f"ulimit -f 1; {kernbench.shell} run softmax{' --json' if json_out else ''} > out",
        shell=True, executable="/bin/bash", cwd=tmp_path, capture_output=True, text=True,
        timeout=HANG_GUARD_S, env=env)
    assert (proc.returncode, proc.stderr) == (1, "error: cannot write to stdout: File too "
                                                 "large\n")


@pytest.mark.slow  # a sweep of 30 points
@pytest.mark.parametrize("full", ["size limit", "/dev/full"])
def test_a_sweep_whose_stderr_fails_runs_to_its_end(tmp_path, kernbench, full):
    """Its progress lines cross stderr's 1 KiB limit, or meet a full disk from the first:
    the sweep goes on as with `2>/dev/null`, every row on stdout (it ended with exit 1,
    and before that waited at exit for a replacement worker it had never stopped)."""
    if full == "/dev/full" and not os.path.exists(full):
        pytest.skip("needs /dev/full")
    rows = ",".join(str(128 * k) for k in range(1, 31))  # each a multiple of 16 PEs x 8
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    limit = "ulimit -f 1; " if full == "size limit" else ""
    proc = subprocess.Popen(  # the limit on the sweep's files only, not on `rows`
        f"set -o pipefail; ({limit}exec {kernbench.shell} sweep softmax --timing-only -p "
        f"rows={rows} -j 2 --format csv 2>{'err' if limit else full}) | cat > rows",
        shell=True,
        executable="/bin/bash", cwd=tmp_path, env=env, start_new_session=True)
    try:
        assert proc.wait(timeout=HANG_GUARD_S) == 0
    finally:  # a hang: the sweep and its workers go, not left behind the test
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert len((tmp_path / "rows").read_text().splitlines()) == 1 + 30
    if limit:
        assert (tmp_path / "err").stat().st_size == 1024


@pytest.mark.parametrize("unbuffered", [False, True])
def test_a_full_stderr_leaves_the_run_and_its_result(tmp_path, kernbench, unbuffered):
    """Progress lines to a full disk (`2>/dev/full`) ended a run whose report was fine, at
    its first one, with exit 1 and nothing on stdout: stderr is diagnostics, and the run
    goes on as with `2>/dev/null`; bad input still exits 2."""
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env.update({"PYTHONUNBUFFERED": "1"} if unbuffered else {})
    with open("/dev/full", "w") as full:
        done = kernbench.run("run", "softmax", "--timing-only", "--progress", "--json",
                             stderr=full, stdout=subprocess.PIPE, env=env, cwd=tmp_path)
        assert done.returncode == 0 and json.loads(done.stdout)["latency_ps"] > 0
        assert kernbench.run("run", "softmax", "-t", "nope", stderr=full, env=env,
                             cwd=tmp_path).returncode == 2


def test_no_numpy_warning_reaches_the_terminal(tmp_path, kernbench):
    """NaN and overflow in a kernel's values are the verification's business; numpy's
    RuntimeWarnings stay quiet (the installed CLI, so Python's own warning output shows)."""
    kernel = tmp_path / "nan.py"
    kernel.write_text(BASE.replace(
        "    tl.store(tl.shard(x), t)",
        "    u = tl.log(t - 10.0) + tl.sqrt(t - 10.0) + tl.reciprocal(t * 0.0) "
        "+ tl.exp(t * 1e6)\n    tl.store(tl.shard(x), u.to('f16').to('f32'))"))
    proc = kernbench.run("run", str(kernel), "-t", ONE, cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert "latency" in proc.stdout


@pytest.mark.slow  # seconds each, signals against wall-clock delays: CI's slow part
@pytest.mark.parametrize(("sig", "group"), [
    (signal.SIGINT, True), (signal.SIGTERM, False), (signal.SIGHUP, True),
    (signal.SIGHUP, False)])
def test_a_stop_ends_a_sweep_whose_points_run_at_once(tmp_path, kernbench, short_tmp, sig,
                                                      group):
    """A stop while the workers are deep in their points (each runs about a minute): the
    sweep ends within seconds. The workers had SIGTERM blocked (the pool's start-up mask,
    handed on by the fork server), so the sweep's terminate waited for the points to end:
    a minute or more after the Ctrl-C. SIGHUP (its terminal closed) ended the sweep
    without its clean-up: multiprocessing's warning of leaked semaphores on stderr, and its
    folder left in the temp folder."""
    temp = short_tmp
    proc = kernbench.start(
        "sweep", "llama_decode", "-t", str(TESTS / "topologies" / "pair.toml"),
        "-p", "prompt=1900", "-p", "chunk=2", "-p", "new_tokens=1", "-p", "batch=1,2",
        "--timing-only", "-j", "2", cwd=tmp_path, start_new_session=True,
        env={**os.environ, "TMPDIR": str(temp)})
    time.sleep(8)
    assert proc.poll() is None
    os.killpg(proc.pid, sig) if group else proc.send_signal(sig)
    start = time.monotonic()
    _, err = proc.communicate(timeout=120)
    assert (proc.returncode, err) == (130, "interrupted\n")
    assert time.monotonic() - start < 15
    time.sleep(1)  # the fork server, its pipe from the sweep closed, cleans up as it ends
    assert list(temp.iterdir()) == []


def test_ctrl_c_stops_a_sweep_and_its_workers(tmp_path, kernbench):
    """Ctrl-C reaches the whole process group: the workers leave it to the sweep, which stops
    them at once and exits 130; the results file keeps the points that finished (none yet:
    no file)."""
    proc = kernbench.start(
        "sweep", "gqa_attention", "-t", "sip", "-p", "model=llama3-8b",
        "-p", "seq_len=65536,131072,262144,524288", "--timing-only", "--out", "s.jsonl",
        "-j", "2", cwd=tmp_path, start_new_session=True)
    time.sleep(1.5)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert "Traceback" not in err
    assert (proc.returncode, err.splitlines()[-1]) == (130, "interrupted"), err
    out = tmp_path / "s.jsonl"  # made at the first finished point
    rows = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    assert len(rows) < 4 and all(row["result"] for row in rows)
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_stop_landing_in_a_finalizer_is_taken_after_it(tmp_path):
    """A Ctrl-C or SIGTERM that landed while a finalizer ran (a `Tensor.__del__` freeing its
    TCM) raised inside it: Python prints such an exception ("Exception ignored in") and
    drops it, and the run went on to the end, exit 0. The stop is sent again once the
    finalizer has returned, and taken there."""
    script = tmp_path / "stop.py"
    script.write_text(
        "import os, signal, sys, time\n"
        "from kernbench_cli.lang.confine import deferred_from_finalizer\n"
        "def handler(signum, frame):\n"
        "    if deferred_from_finalizer(signum, frame):\n"
        "        return\n"
        "    raise KeyboardInterrupt\n"
        "signal.signal(signal.SIGINT, handler)\n"
        "class Held:\n"
        "    def __del__(self):\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        sum(range(1000))\n"
        "try:\n"
        "    held = Held()\n"
        "    del held\n"
        "    end = time.monotonic() + 5\n"
        "    while time.monotonic() < end:\n"
        "        pass\n"
        "    print('ran on')\n"
        "except KeyboardInterrupt:\n"
        "    print('stopped')\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=HANG_GUARD_S)
    assert (proc.stdout, proc.stderr) == ("stopped\n", "")
