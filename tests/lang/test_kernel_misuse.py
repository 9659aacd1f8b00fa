"""Kernels that misuse Python: each is a clear kernel error or harmless."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import test_topology

TAIL = ("\n\ndef reference(host, p):\n    return {}\n\n"
        "def outputs(host, args, p):\n    return {}\n")


def _kernel(tmp_path, body: str, name: str = "k.py"):
    path = tmp_path / name
    path.write_text("PARAMS = {}\n\ndef setup(host, p):\n    return {}\n\n" + body + TAIL)
    return path


@pytest.mark.parametrize(("body", "what"), [
    ("def kernel(tl):\n    yield", "a generator"),
    ("async def kernel(tl):\n    pass", "an async function"),
    ("async def kernel(tl):\n    yield", "an async generator"),
])
def test_a_kernel_that_would_run_nothing_is_an_error(cli, tmp_path, body, what):
    path = _kernel(tmp_path, body)
    code, _, err = cli("run", str(path), "-t", test_topology("pair"))
    assert (code, err) == (1, f"error: {path}:6: kernel() is {what}: calling it would run "
                              "none of its body; write a plain function\n")


SWITCHED = ("a kernel may not switch greenlets itself (each PE's kernel runs in one; a "
            "`recv` waits by handing the turn on)")


@pytest.mark.parametrize(("line", "says"), [
    ("greenlet.getcurrent().parent.switch()", SWITCHED),  # was: PE 1's kernel cut short
    ("greenlet.getcurrent().parent.throw(RuntimeError('x'))", SWITCHED),  # was: internal
    ("raise greenlet.GreenletExit('out')", "GreenletExit: out"),  # was: PE 1 as if done
])
def test_a_kernel_that_ends_its_greenlet_itself_fails_at_its_line(cli, tmp_path, line, says):
    """A PE's kernel that handed its turn back by a greenlet switch or throw of its own, or
    raised GreenletExit, fails there; it is not taken as finished, with a result."""
    path = _kernel(tmp_path, "import greenlet\n\ndef kernel(tl):\n    tl.cycles(1)\n"
                             f"    if tl.pid == 1:\n        {line}\n    tl.cycles(1)")
    code, out, err = cli("run", str(path), "-t", test_topology("pair"), "--timing-only")
    assert (code, out, err) == (1, "", f"error: {path}:11: PE (rack=0 sip=0 cube=0 pe=1) at "
                                       f"t=1ns: {says}\n")


@pytest.mark.parametrize("timing_only", [(), ("--timing-only",)])
def test_a_kernels_own_shortcut_missed_is_its_failure(cli, tmp_path, timing_only):
    """`ShortcutMissed` is how `tl.repeat` has a run made again without shortcuts; raised by
    the kernel itself it went through as that, and out of the CLI as a traceback."""
    path = _kernel(tmp_path, "from kernbench_cli.lang.tl import ShortcutMissed\n\n"
                             "def kernel(tl):\n    tl.cycles(1)\n    raise ShortcutMissed")
    code, out, err = cli("run", str(path), "-t", test_topology("pair"), *timing_only)
    assert (code, out, err) == (1, "", f"error: {path}:10: PE (rack=0 sip=0 cube=0 pe=0) at "
                                       "t=1ns: ShortcutMissed\n")


@pytest.mark.parametrize(("head", "what"), [("def", "a generator"),
                                            ("async def", "an async generator")])
def test_a_repeat_body_that_would_run_nothing_is_an_error(cli, tmp_path, head, what):
    """A generator as `tl.repeat`'s body ran none of it: 0 commands, a latency of 0."""
    path = _kernel(tmp_path, f"{head} body(tl, moves, state):\n    tl.cycles(1)\n    yield\n\n"
                             "def kernel(tl):\n    tl.repeat(body, {}, [])")
    code, out, err = cli("run", str(path), "-t", test_topology("pair"), "--timing-only")
    assert (code, out) == (1, "")
    assert err == (f"error: {path}:11: PE (rack=0 sip=0 cube=0 pe=0) at t=0ns: tl.repeat: "
                   f"body body() is {what}: calling it would run none of its body; write a "
                   "plain function\n")


def test_a_kernel_may_not_register_an_exit_handler(cli, tmp_path):
    """An exit handler runs after the report, outside the run: one that never returned kept
    the process alive after its report, SIGTERM or not. Libraries the kernel imports may
    register theirs."""
    path = _kernel(tmp_path, "import atexit\n\ndef kernel(tl):\n    atexit.register(print)")
    code, out, err = cli("run", str(path), "-t", test_topology("pair"))
    assert (code, out) == (1, "")
    assert err == (f"error: {path}:9: PE (rack=0 sip=0 cube=0 pe=0) at t=0ns: a kernel may not "
                   "register an exit handler (atexit): it would run after kernbench's report, "
                   "outside the run (one that never returned kept the process alive)\n")


def test_a_value_read_is_read_only(cli, tmp_path):
    """`numpy()` was the tensor's own values: a ReLU done in numpy on it, then stored,
    verified as the kernel's output with no command timed for it."""
    path = _kernel(tmp_path, "def kernel(tl):\n    t = tl.zeros((4,))\n"
                             "    v = t.numpy()\n    v[0] = 1.0\n    assert t.numpy()[0] == 0")
    code, out, err = cli("run", str(path), "-t", test_topology("pair"))
    assert (code, out) == (1, "")
    assert err == (f"error: {path}:9: PE (rack=0 sip=0 cube=0 pe=0) at t=9ns: ValueError: "
                   "assignment destination is read-only\n")


def test_print_in_a_kernel_keeps_json_on_stdout(cli, tmp_path):
    path = _kernel(tmp_path, "def kernel(tl):\n    print('hello from', tl.pid)")
    code, out, err = cli("run", str(path), "-t", test_topology("pair"), "--json")
    assert code == 0
    assert json.loads(out)["latency_ps"] == 0
    assert "hello from 0" in err and "hello from 1" in err


def _verify(got, want):
    from types import MappingProxyType

    from kernbench_cli.sim.hooks import verify

    class Kernel:
        shown = "k.py"
        tolerance = MappingProxyType({})  # declares none: the dtype's
        argmax = MappingProxyType({})  # no output is a choice
        module = None  # no tolerances()

        @staticmethod
        def fn(name):
            return lambda host, params: {"x": want}

    return verify(Kernel(), None, {}, {"x": got})[0]


def test_print_at_a_kernels_import_keeps_json_on_stdout(cli, tmp_path):
    """Prints at the module's import and in `scaled_defaults` went to stdout, before the
    JSON: `--json` was not JSON (run, sweep)."""
    path = tmp_path / "k.py"
    path.write_text("print('at import')\nPARAMS = {'n': 1}\n\n"
                    "def scaled_defaults(num_pes):\n    print('scaled')\n    return {}\n\n"
                    "def setup(host, p):\n    return {}\n\ndef kernel(tl):\n    pass" + TAIL)
    code, out, err = cli("run", str(path), "-t", test_topology("pair"), "--json")
    assert (code, json.loads(out)["latency_ps"]) == (0, 0)
    assert err.splitlines() == ["at import", "scaled"]


def test_nan_and_infinity_verify_as_numpy_allclose_with_equal_nan():
    both = np.array([1.0, np.nan, np.inf, -np.inf], dtype=np.float32)
    check = _verify(both.copy(), both.copy())
    assert check.passed and check.max_abs_err == 0.0
    stray = _verify(np.array([np.nan, 1.0], np.float32), np.array([1.0, 1.0], np.float32))
    assert not stray.passed and stray.max_abs_err != stray.max_abs_err  # NaN, not inf
    wrong_sign = _verify(np.array([np.inf], np.float32), np.array([-np.inf], np.float32))
    assert not wrong_sign.passed and wrong_sign.max_abs_err == np.inf


def test_a_tensor_cut_short_by_an_interrupt_is_dropped_quietly(monkeypatch):
    """An interrupt between a tensor's creation and its __init__ leaves one without `tcm`:
    dropping it must not print an "Exception ignored in __del__" traceback."""
    import sys

    from kernbench_cli.lang.tensor import Tensor

    raised = []
    monkeypatch.setattr(sys, "unraisablehook", lambda info: raised.append(info))
    half = object.__new__(Tensor)
    del half
    assert raised == []


def test_a_bool_is_no_pe_index(cli, tmp_path):
    """`tl.shard(x, pid=True)` on two PEs was PE 1 (True is an int); refused, as the host
    refuses a PE given as a bool."""
    path = tmp_path / "k.py"
    path.write_text("import numpy as np\nPARAMS = {}\n\ndef setup(host, p):\n"
                    "    return {'x': host.scatter('x', np.ones(8, np.float32), 0)}\n\n"
                    "def kernel(tl, x):\n    tl.load(tl.shard(x, pid=True), (4,), 'f32')"
                    + TAIL)
    code, _, err = cli("run", str(path), "-t", test_topology("pair"), "--timing-only")
    assert (code, err) == (1, f"error: {path}:8: PE (rack=0 sip=0 cube=0 pe=0) at t=0ns: a PE "
                              "index is an int, not True (bool)\n")


@pytest.mark.parametrize(("line", "message"), [
    ("float(t)", "float(tensor): the tensor has 4 elements (shape [2, 2]); only one of a "
                 "single element reads as a number"),
    ("bool(t)", "bool(tensor): the tensor has 4 elements (shape [2, 2]); only one of a "
                "single element reads as a number"),
    ("t.item()", "Tensor.item(): the tensor has 4 elements (shape [2, 2]); only one of a "
                 "single element reads as a number"),
    ("tl.sum(t, axis=(0, 1))", "tl.sum: axis must be one axis (an int) or None for all, got "
                               "(0, 1)"),
    ("tl.max(t, axis=True)", "tl.max: axis must be one axis (an int) or None for all, got "
                             "True"),
    ("tl.sum(t, axis=0, keepdims=2)", "tl.sum: keepdims must be True or False, got 2"),
])
def test_a_misused_read_or_reduction_is_a_kernel_error_at_its_line(cli, tmp_path, line,
                                                                    message):
    """Not numpy's or Python's own wording from inside `tl` (`only length-1 arrays…`, `'<='
    not supported between…`): what the kernel got wrong, at its line."""
    path = _kernel(tmp_path, f"def kernel(tl):\n    t = tl.zeros((2, 2))\n    {line}")
    code, _, err = cli("run", str(path), "-t", test_topology("one"))
    assert (code, err) == (1, f"error: {path}:8: PE (rack=0 sip=0 cube=0 pe=0) at t=4ns: "
                              f"{message}\n")  # after tl.zeros' issue


def test_a_reduction_takes_a_numpy_integer_axis(cli, tmp_path):
    path = _kernel(tmp_path, "def kernel(tl):\n    t = tl.zeros((2, 3))\n"
                             "    assert tl.sum(t, axis=np.int64(1), keepdims=np.bool_(True))"
                             ".shape == (2, 1)\n    assert tl.sum(t, axis=-1).shape == (2,)")
    path.write_text("import numpy as np\n" + path.read_text())
    assert cli("run", str(path), "-t", test_topology("one"))[0] == 0
