"""A kernel module's own functions, called and checked: setup, kernel, outputs, reference
and metrics (bounds: `sim.bounds`).

What a hook returns is checked before the run uses it, and what it raises
becomes a one-line `KernelError` naming the kernel file, the line and the hook
(`located`); a kernbench error passes through as it is. A hook that runs past
the kernel timeout with no progress is stopped (`lang.watchdog`). `verify`
compares the kernel's outputs with its reference at the tolerance of their
dtype, or at the one the kernel declares for that output (its ``TOLERANCE``),
if the dtype can meet it.
"""

from __future__ import annotations

import copy
import inspect
import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from kernbench_cli.errors import KernbenchError, KernelError, ParamError, clip, message_of
from kernbench_cli.fileio import MOST_NAME, json_number, named_numbers
from kernbench_cli.lang.confine import Interrupted, printing_to_stderr
from kernbench_cli.lang.dtypes import NAMES, TOLERANCE, tolerance_problem
from kernbench_cli.lang.tl import kernel_line
from kernbench_cli.lang.watchdog import hook_watch
from kernbench_cli.sim import host as host_module
from kernbench_cli.sim.host import Host
from kernbench_cli.sim.kernels import KernelModule, described
from kernbench_cli.sim.result import Verification

HOST_FILE = host_module.__file__  # the host's code, as a traceback names it


def checked_metrics(kernel: KernelModule, metrics: Any) -> dict[str, tuple[float, str]]:
    """`metrics`, a `metrics()` answer, each number a Python int or float (a numpy scalar
    taken as its value): KernelError unless a dict of name: (number, how)."""
    found = named_numbers(metrics, json_number)
    if found is None:
        raise KernelError(f"{kernel.shown}: metrics() must return a dict of name (1 to "
                          f"{MOST_NAME} printable characters): (finite number, integers "
                          "within 64 bits; how), not "
                          + clip(metrics))
    return found


@contextmanager
def callers_randomness() -> Iterator[None]:
    """Put Python's `random` and numpy's global generator back as they were after the
    block, which seeds them for the kernel's code (`seed_globals`)."""
    python, numpy = random.getstate(), np.random.get_state()
    try:
        yield
    finally:
        random.setstate(python)
        np.random.set_state(numpy)


def seed_globals(seed: int) -> None:
    """Seed Python's `random` and numpy's global generator from the run's `seed`, so that a
    kernel drawing from them (not from `host.rng`) draws the same numbers each run of the
    same seed: the same inputs give the same result."""
    random.seed(seed)
    np.random.seed([(seed >> shift) & 0xFFFFFFFF for shift in range(0, max(
        seed.bit_length(), 1), 32)])


def kernel_fn(kernel: KernelModule, args: dict[str, Any]):
    """The module's `kernel`, checked to be a function that takes ``tl`` and `args`."""
    fn = kernel.fn("kernel")
    code = getattr(fn, "__code__", None)
    if code is None:
        raise KernelError(f"{kernel.shown}: kernel must be a function, not "
                          f"{type(fn).__name__}")
    for test, what in ((inspect.isgeneratorfunction, "a generator"),
                       (inspect.iscoroutinefunction, "an async function"),
                       (inspect.isasyncgenfunction, "an async generator")):
        if test(fn):
            raise KernelError(f"{kernel.shown}:{code.co_firstlineno}: kernel() is {what}: "
                              "calling it would run none of its body; write a plain function")
    try:
        inspect.signature(fn).bind(None, **args)
    except TypeError as exc:
        raise KernelError(f"{kernel.shown}:{code.co_firstlineno}: kernel() does not take the "
                          f"arguments setup returns ({', '.join(args) or 'none'}): "
                          f"{exc}") from None
    return fn


def setup(kernel: KernelModule, host: Host, params: dict[str, Any]) -> dict[str, Any]:
    """The kernel's arguments, as its `setup` makes them (the watchdog takes a placement
    made or an input drawn as progress)."""
    try:
        with printing_to_stderr(), hook_watch(lambda: (host.placements, host.drawn_bytes)):
            args = kernel.fn("setup")(host, dict(params))
    except KernbenchError as exc:
        raise _host_call(kernel, exc, "setup") from None
    except ValueError as exc:
        raise ParamError(f"{kernel.name}: {message_of(exc)}") from None
    except Interrupted:
        raise
    except BaseException as exc:
        raise located(kernel, exc, "setup") from exc
    if not isinstance(args, dict):
        raise ParamError(f"{kernel.shown}: setup must return the kernel's arguments as a dict")
    for name in args:
        if not isinstance(name, str) or not name.isidentifier():
            raise ParamError(f"{kernel.shown}: setup must return the kernel's arguments as a "
                             f"dict of argument names, not the key {clip(name, 80)}")
    return args


def call(kernel: KernelModule, name: str, *args: Any) -> Any:
    """The kernel's hook `name` called with `args` (stopped by the watchdog if it does not
    return within the limit)."""
    try:
        with printing_to_stderr(), hook_watch():
            return kernel.fn(name)(*args)
    except KernbenchError as exc:
        raise _host_call(kernel, exc, name) from None
    except Interrupted:
        raise
    except BaseException as exc:
        raise located(kernel, exc, name) from exc


def _host_call(kernel: KernelModule, exc: KernbenchError, where: str) -> KernbenchError:
    """`exc`, with the kernel's file and line in front if the kernel's code called the
    host (`sim.host`) that raised it (a PE that does not exist, an input drawn twice); as
    it is otherwise (a kernel's own checks name what they check, and a shipped kernel's
    refusals are of the parameters it was given, not of its code)."""
    if kernel.shipped:
        return exc
    frames, tb = [], exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    mine = [i for i, name in enumerate(frames) if name == str(kernel.path)]
    if not mine or mine[-1] + 1 >= len(frames) or frames[mine[-1] + 1] != HOST_FILE:
        return exc
    told = copy.copy(exc)  # its class: a ParamError is bad input still
    told.args = (f"{kernel.shown}:{kernel_line(str(kernel.path), exc.__traceback__)}: in "
                 f"{where}: {exc}",)
    return told


def located(kernel: KernelModule, exc: BaseException, where: str) -> KernelError:
    line = kernel_line(str(kernel.path), exc.__traceback__)
    return KernelError(f"{kernel.shown}:{line if line else '?'}: in {where}: {described(exc)}")


def verify(kernel: KernelModule, host: Host, params: dict[str, Any],
            outputs: dict[str, np.ndarray]) -> list[Verification]:
    expected = call(kernel, "reference", host, params)
    for what, table in (("reference", expected), ("outputs", outputs)):
        if not isinstance(table, dict):
            raise KernelError(f"{kernel.shown}: {what}() must return a dict of name: array, "
                              f"not {type(table).__name__}")
    declared = _declared(kernel, host, params)
    # an ARGMAX output a run does not make (a prefill's token, with no prompt) is no error;
    # the scores of one it makes must be an output
    for table, names in (("TOLERANCE", kernel.tolerance), ("tolerances()", declared),
                         ("ARGMAX", [v for k, v in kernel.argmax.items() if k in expected])):
        unknown = sorted(set(names) - set(expected), key=str)
        if unknown:
            raise ParamError(f"{kernel.shown}: {table} names {unknown[0]!r}, which is not an "
                             f"output (outputs: {', '.join(sorted(map(str, expected)))})")
    unchecked = sorted(set(outputs) - set(expected), key=str)
    if unchecked:  # it would be read, shown nowhere, and the run said PASS
        raise KernelError(f"{kernel.shown}: outputs() returned {unchecked[0]!r}, which "
                          "reference() does not: nothing to check it against (return it "
                          "from both, or from neither)")
    checks = []
    for name in sorted(expected, key=str):
        if name not in outputs:
            raise KernelError(f"{kernel.shown}: outputs() returned no {name!r}")
        got, want = outputs[name], expected[name]
        for what, value in (("output", got), ("reference", want)):
            if not isinstance(value, np.ndarray) or (value.dtype.kind not in "fiu" and \
                    value.dtype not in NAMES):
                raise KernelError(f"{kernel.shown}: {what} {name!r} is not an array of "
                                  f"numbers (got {type(value).__name__})")
        if got.shape != want.shape:
            raise KernelError(f"{kernel.shown}: output {name!r} has shape {list(got.shape)}, "
                              f"the reference {list(want.shape)}")
        dt = NAMES.get(got.dtype, "f32")
        if name in kernel.argmax:
            checks.append(_chosen(kernel, declared, name, got, outputs, expected))
            continue
        atol, rtol = _tolerance(kernel, declared, name, dt)
        g, w = got.astype(np.float64), want.astype(np.float64)
        # as numpy's allclose(equal_nan=True): NaN where the reference has NaN, and the same
        # infinity, are equal; any other NaN or infinity is an error of NaN or infinity
        same = (g == w) | (np.isnan(g) & np.isnan(w))
        with np.errstate(invalid="ignore"):  # inf - inf: NaN, masked by `same`
            err = np.where(same, 0.0, np.abs(g - w))
        passed = bool(np.all(same | (np.isfinite(w) & (err <= atol + rtol * np.abs(w)))))
        checks.append(Verification(name, dt, _largest(err), atol, rtol, passed,
                                   declared=name in declared,
                                   note=vacuous(int(np.count_nonzero(same & ~np.isfinite(w))),
                                                w.size)))
    return checks


def vacuous(nonfinite: int, values: int) -> str:
    """What a check of `values` values did not measure, of which `nonfinite` were NaN or
    infinite in both the output and the reference: equal, so they pass, but an output of
    NaN where the reference's is NaN shows nothing of the kernel's arithmetic ("" if all
    were measured)."""
    if not values:
        return "no values: nothing compared"
    if not nonfinite:
        return ""
    share = "all" if nonfinite == values else f"{nonfinite:,} of"
    return (f"{share} {values:,} value{'s' if values > 1 else ''} NaN or infinite in both "
            "the output and the reference: equal, with no error measured")


def _declared(kernel: KernelModule, host: Host, params: dict[str, Any]
              ) -> dict[str, tuple[float, float]]:
    """The tolerances the kernel declares for this run: `TOLERANCE`, and over it what its
    `tolerances(topology, p)` gives (a tolerance that grows with the run's depth)."""
    if not hasattr(kernel.module, "tolerances"):
        return kernel.tolerance
    from kernbench_cli.sim.kernels import check_tolerance

    more = call(kernel, "tolerances", host.topology, params)
    check_tolerance(more, lambda problem: ParamError(f"{kernel.shown}: {problem}"),
                    "tolerances()")
    return {**kernel.tolerance, **more}


def _largest(err: np.ndarray) -> float:
    """The largest of `err` (NaN if any is; 0 if none)."""
    return (float("nan") if np.isnan(err).any() else float(err.max())) if err.size else 0.0


def _chosen(kernel: KernelModule, declared: dict, name: str, got: np.ndarray,
            outputs: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> Verification:
    """The check of output `name`, an argmax over the last axis of output `scores`
    (`ARGMAX`): each index the kernel chose must be a choice a correct kernel can make.
    Its scores are each within the scores' tolerance (atol, rtol) of the reference's
    (their own check), so the index it picks, t, has a reference score at most
    ``2 atol + rtol (|ref[t]| + |ref.max|)`` below the largest: the error is that
    shortfall, checked against ``2 atol + 2 rtol x max(|ref[t]|, |ref.max|)``. Equal
    indexes are not asked for: two scores within the tolerance of each other (a near-tie)
    may be chosen either way by a correct kernel. An index that is no whole number within
    the scores is an error of NaN."""
    scores = kernel.argmax[name]
    ref = np.asarray(expected[scores], np.float64)
    atol, rtol = _tolerance(kernel, declared, scores, NAMES.get(outputs[scores].dtype, "f32"))
    g = got.astype(np.float64)
    if ref.shape[:-1] != g.shape or not ref.shape[-1]:
        raise KernelError(f"{kernel.shown}: output {name!r} has shape {list(g.shape)}: an "
                          f"argmax of {scores!r} ({list(ref.shape)}) has "
                          f"{list(ref.shape[:-1])}")
    whole = np.isfinite(g) & (g == np.round(g)) & (g >= 0) & (g < ref.shape[-1])
    index = np.where(whole, g, 0).astype(np.int64)[..., None]
    top, picked = ref.max(axis=-1), np.take_along_axis(ref, index, axis=-1)[..., 0]
    err = np.where(whole, top - picked, np.nan)
    with np.errstate(invalid="ignore"):
        passed = bool(np.all(whole & (err <= 2 * atol + 2 * rtol *
                                      np.maximum(np.abs(top), np.abs(picked)))))
    return Verification(name, NAMES.get(outputs[scores].dtype, "f32"), _largest(err),
                        2 * atol, 2 * rtol, passed, declared=scores in declared,
                        scores=scores)


def _tolerance(kernel: KernelModule, declared: dict, name: str, dt: str
               ) -> tuple[float, float]:
    """(atol, rtol) of output `name` of dtype `dt`: the kernel's declared one (`declared`,
    `_declared`'s), refused if `dt` cannot meet it (naming `TOLERANCE` or `tolerances()`,
    whichever gave it), or else the dtype's."""
    if name not in declared:
        return TOLERANCE[dt]
    problem = tolerance_problem(declared[name], dt)
    if problem:
        table = "TOLERANCE" if kernel.tolerance.get(name) == declared[name] else "tolerances()"
        raise ParamError(f"{kernel.shown}: {table}[{name!r}] {problem}")
    atol, rtol = declared[name]
    return float(atol), float(rtol)


def resolved(kernel: KernelModule, topology, params: dict[str, Any]) -> dict[str, Any]:
    """The parameters as the run took them, which its result (and bounds) state and its
    trace keeps: the kernel's `resolved(topology, p)` (a value that stands for a choice
    made from the topology, as `llama_decode`'s ``batch = 0``, the largest batch that
    fits, made that choice), so a replay on another topology states the figures of the
    run it re-times, and a result names the batch it ran, not the sentinel."""
    if not hasattr(kernel.module, "resolved"):
        return params
    got = call(kernel, "resolved", topology, dict(params))
    if not isinstance(got, dict) or set(got) != set(params) or any(
            type(got[name]) is not type(value) for name, value in params.items()):
        raise KernelError(f"{kernel.shown}: resolved() must return the parameters, each "
                          f"of its given type, not {clip(got)}")
    return got
