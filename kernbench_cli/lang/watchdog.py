"""A wall-clock limit on a kernel's Python between commands (`--kernel-timeout`).

The functional pass runs kernels as plain Python, so a kernel looping without
issuing a command would hang the run. A timer (SIGALRM, `setitimer`) looks at
the command count a few times a second; when it has not moved for `limit`
seconds, the signal handler raises `KernelTimeout` inside the kernel's own
frame, so its traceback holds the kernel line it was on. `KernelTimeout` is a
`BaseException` so a kernel's ``except Exception`` cannot swallow it, and it
stops the whole pass (every other PE would loop the same way).

Python ignores (prints and drops) an exception raised inside a `__del__`, so a
tick that lands in one (a kernel dropping temporary tensors in its loop) does
what a debugger's breakpoint does instead: it traces the frame that called into
the finaliser, and raises there at its next line, once the finaliser has
returned. The timer keeps ticking until the block ends, so a timeout swallowed
anywhere else is raised again a tick later.

A signal handler only runs on the main thread: elsewhere (a Dask worker's
thread) the watch is off and `--max-commands` is the only limit.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from contextlib import contextmanager

#: Seconds of no command before a kernel is stopped (`--kernel-timeout`; 0 turns it off).
DEFAULT_KERNEL_TIMEOUT = 60.0
#: The shortest limit: the timer ticks at most every millisecond.
MIN_KERNEL_TIMEOUT = 0.001


class KernelTimeout(BaseException):
    """No command issued for `limit` seconds of wall-clock time."""

    def __init__(self, limit: float):
        super().__init__(limit)
        self.limit = limit


def _outside_finalisers(frame):
    """The innermost frame of `frame`'s stack that runs outside every `__del__` (where a
    raised exception would be dropped), or None."""
    outside = frame
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            outside = frame.f_back
        frame = frame.f_back
    return outside


def _raise_in(frame, exc: BaseException) -> None:
    """Raise `exc` in `frame` at its next traced event (a line, a return): a trace function
    that raises is unset by Python, which then raises the exception in that frame."""
    def there(_frame, _event, _arg):
        raise exc

    frame.f_trace, frame.f_trace_lines = there, True
    sys.settrace(lambda *_: None)  # frames called from here on are not traced


@contextmanager
def watchdog(progress, limit: float):
    """Stop the code in the block with `KernelTimeout` once ``progress()`` (a count of
    commands) has not changed for `limit` seconds."""
    if limit <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return
    tick = max(MIN_KERNEL_TIMEOUT, min(0.25, limit / 4))
    seen = [progress(), time.monotonic()]

    def check(signum, frame) -> None:
        now, count = time.monotonic(), progress()
        if count != seen[0]:
            seen[0], seen[1] = count, now
        elif now - seen[1] >= limit:
            outside = _outside_finalisers(frame)
            if outside is frame:
                raise KernelTimeout(limit)
            if outside is not None:
                _raise_in(outside, KernelTimeout(limit))

    previous, tracing = signal.signal(signal.SIGALRM, check), sys.gettrace()
    try:  # the first tick may come before the block: it is inside the block's handling
        signal.setitimer(signal.ITIMER_REAL, tick, tick)
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        sys.settrace(tracing)
