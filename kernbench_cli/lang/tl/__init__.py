"""`tl`: the kernel language a PE's kernel is written in (the functional pass).

Every PE runs the kernel with its own `TL` object. A call checks its
arguments, computes its values with numpy in program order (float32, rounded
to the result dtype; nothing with ``timing_only``), allocates TCM for its
result, and appends a command to the PE's stream (`kernbench_cli.stream`).
No time passes here: the timing pass (`hw.timing`) times the streams
afterwards, which it can because a kernel cannot observe time. Tensors are
futures in that timing: a command that consumes one depends on the command
that made it.

Semantics kept simple on purpose, and documented in docs/model.md:
- Memory is coherent within a PE in program order; between PEs only through
  IPCQ messages (the kernels here never read what another PE stores).
- A composite's tile buffers are taken from the TCM free at issue.

The language is split by concern, a module each: `memory` (load, store, ref,
views), `gemm` (dot, composite), `pe_math` (elementwise, reductions, fills,
casts), `messages` (send, recv), `ordering` (fence, wait, cycles, reading a
value), `regions`, `repeat` (a loop body emitted once), `grid` (where the PE is);
`checks` holds the argument
checks they share. Each concern is a mixin class on `core.Core`, which holds
the PE's state (stream rows, TCM, region) and the steps every command takes;
`TL` is their sum. Mixins rather than an object per concern, because a
kernel calls ``tl.load`` and a tensor calls ``tl._binary`` on one object: one
object keeps the surface ``tl.*`` flat, and one instance's attributes and a
class's method lookup (cached by the interpreter per type) cost no more per
call than the single class did, where delegating to per-concern objects
would add an attribute lookup and a call to every command.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from kernbench_cli import gc_control
from kernbench_cli.lang.tl.core import CommandLimit, Launch, kernel_line
from kernbench_cli.lang.tl.gemm import GemmOps
from kernbench_cli.lang.tl.grid import Grid
from kernbench_cli.lang.tl.memory import MemoryOps
from kernbench_cli.lang.tl.messages import MessageOps
from kernbench_cli.lang.tl.ordering import Ordering
from kernbench_cli.lang.tl.pe_math import MathOps
from kernbench_cli.lang.tl.regions import Regions
from kernbench_cli.lang.tl.repeat import Repeats, ShortcutMissed

__all__ = ["TL", "CommandLimit", "Launch", "ShortcutMissed", "functional_pass", "kernel_line"]


class TL(Grid, MemoryOps, GemmOps, MathOps, MessageOps, Ordering, Regions, Repeats):
    """The `tl` object of one PE. See docs/kernels.md for the full list of calls."""

    f16, bf16, f32 = "f16", "bf16", "f32"
    fp8, fp8e5m2, int8, int4, mxfp8, mxfp4 = "fp8", "fp8e5m2", "int8", "int4", "mxfp8", "mxfp4"


def functional_pass(launch: Launch, kernel: Callable[[TL], None],
                    guard: AbstractContextManager | None = None) -> list[TL]:
    """Run `kernel(tl)` on every PE of `launch` until each has ended or waits for good.

    `kernel` handles its own errors (it is the launcher's wrapper around the
    kernel); streams end where a PE stopped. `ShortcutMissed` if a PE stopped inside a
    repetition `tl.repeat` copied (the run is to be made again without shortcuts). The
    kernels run inside `guard` (the watchdog), their streams are made after it. Returns
    each PE's `TL`.
    The garbage collector stays on, out of the way (`gc_control.deferred`): the
    kernel's own Python may leave cycles to free.
    """
    with gc_control.deferred():
        hub = launch.hub
        threads = [hub.thread(pid) for pid in range(len(launch.system.pes))]
        # a class of the launch's own: what a kernel sets on `type(tl)` dies with the run
        # (one process runs kernel after kernel: the API, a notebook)
        own = type("TL", (TL,), {"__module__": TL.__module__, "__doc__": TL.__doc__})
        tls = [own(launch, pid, thread) for pid, thread in enumerate(threads)]
        with guard or nullcontext():
            hub.run(threads, [(lambda tl=tl: kernel(tl)) for tl in tls])
        if any(tl._copying and tl._thread.waiting for tl in tls):
            hub.stop()  # this launch is dropped: its waiting kernels with it
            raise ShortcutMissed.missed()  # deadlocked inside a copy: its stream would end short
        launch.finish(tls)
    return tls
