"""What a kernel module's code may not do to the process that runs it.

Kernels are plain Python in kernbench's own process. While a kernel module's
code runs (its import, `setup`, `kernel`, `reference`, `outputs`: `confined`),
three things it could do would take the run down with no report, so each is a
kernel error with the kernel's line instead:

- **starting a thread** (`threading.Thread.start`): the PEs' kernels run one at
  a time in greenlets; a thread is outside the model, and a non-daemon one
  left running would keep kernbench from ever exiting;
- **`os._exit()`**: the process would end at once, exit status and all, with
  no report and temporary files left behind;
- **raising `KeyboardInterrupt`**: kernbench stops for Ctrl-C and SIGTERM
  (`Interrupted`, raised by its signal handlers); a `KeyboardInterrupt` the
  kernel's own code raises is the kernel's error, not the user's stop.

The checks apply to the thread that runs the kernel code only (a Dask worker
runs other work on its other threads), and are off outside `confined`.
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM: the user stopped kernbench."""


class KernelMisuse(BaseException):
    """Kernel code did what `confined` forbids; the message says what. A `BaseException`,
    so a kernel's ``except Exception`` does not carry on past it."""


_CONFINED: set[int] = set()  # threads (`threading.get_ident`) running kernel code
_start = threading.Thread.start
_exit = os._exit


def _guarded_start(self, *args, **kwargs):
    if threading.get_ident() in _CONFINED:
        raise KernelMisuse("a kernel may not start a thread: the PEs' kernels run one at a "
                           "time in the functional pass, and a thread is outside the model")
    return _start(self, *args, **kwargs)


def _guarded_exit(status, *args, **kwargs):
    if threading.get_ident() in _CONFINED:
        raise KernelMisuse(f"the kernel called os._exit({status!r}): it would end kernbench "
                           "with no report")
    return _exit(status, *args, **kwargs)


def is_interrupt(exc: BaseException) -> bool:
    """Whether `exc` is the user's stop (Ctrl-C, SIGTERM) rather than the kernel's doing."""
    return isinstance(exc, Interrupted) or (
        isinstance(exc, KeyboardInterrupt) and threading.get_ident() not in _CONFINED)


@contextmanager
def confined():
    """Run the block as kernel code: see the module's docstring."""
    ident = threading.get_ident()
    if ident in _CONFINED:  # nested (a kernel's setup calls into a run): already confined
        yield
        return
    threading.Thread.start, os._exit = _guarded_start, _guarded_exit  # once, for good
    previous = None
    if threading.current_thread() is threading.main_thread():
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler) and handler is not _interrupt_handler:
            previous = handler
            signal.signal(signal.SIGINT, _interrupt_handler)
            _CHAINED.append(handler)
    _CONFINED.add(ident)
    try:
        yield
    finally:
        _CONFINED.discard(ident)
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
            _CHAINED.pop()


_CHAINED: list = []  # the SIGINT handler `_interrupt_handler` stands in front of


def _interrupt_handler(signum, frame) -> None:
    """Ctrl-C while kernel code runs: the handler that was there, its stop made `Interrupted`."""
    try:
        _CHAINED[-1](signum, frame)
    except KeyboardInterrupt:
        raise Interrupted from None
