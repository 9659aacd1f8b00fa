"""A wall-clock limit on a kernel module's Python (`--kernel-timeout`), and a floor on the
machine's free memory.

The functional pass runs kernels as plain Python, so a kernel looping without
issuing a command would hang the run. A timer (SIGALRM, `setitimer`) looks at
the command count a few times a second; when it has not moved for `limit`
seconds, the signal handler raises `KernelTimeout` inside the kernel's own
frame, so its traceback holds the kernel line it was on. `KernelTimeout` is a
`BaseException` so a kernel's ``except Exception`` cannot swallow it, and it
stops the whole pass (every other PE would loop the same way). The kernel
module's other code (its import, `setup`, `reference`, `outputs`, `bounds`,
`metrics`, `quality`) is watched the same way, with the host's placements as
its progress where it has a host, else none: the limit is then on the call
(`hook_limit` sets it for a thread's runs; `run_kernel` sets it from its
`kernel_timeout`).

Python ignores (prints and drops) an exception raised inside a `__del__`, so a
tick that lands in one (a kernel dropping temporary tensors in its loop) does
what a debugger's breakpoint does instead: it traces the frame that called into
the finaliser, and raises there at its next line, once the finaliser has
returned. The timer keeps ticking until the block ends, so a timeout swallowed
anywhere else is raised again a tick later.

Kernel code can take the timer away (ignore SIGALRM, put its own handler in, stop
the timer). A thread stands behind it: once the block has gone `limit` plus a
second without progress and is still running, the thread raises `KernelTimeout`
in the watched thread itself (`PyThreadState_SetAsyncExc`, which Python checks
between bytecodes, whatever the signal handlers), again each second after.

A kernel that takes every stop (``except BaseException`` in its loop, carrying on)
outlives all of these. In the CLI (`end_process_when_stuck`), once the thread has
raised in it twice and it still runs, the process ends: an error naming the kernel's
line (the innermost frame outside kernbench and the standard library), exit 1. A
caller of the API keeps its process: there, such a kernel runs on.

Memory: a command stream grows by some hundred bytes a command, so a kernel that
issues commands without end fills the machine long before `--max-commands`, and
Linux's out-of-memory killer ends the process with no report. At each tick the
watch reads what the machine (and the process's cgroup, where it sets a limit)
has left; below `memory_floor` it raises `MemoryLow` (a `MemoryError`), which
every command reports as the machine's memory running out, naming what held it. A block with
a limit of 0 watches memory only (the timing pass).

A signal handler only runs on the main thread: elsewhere (a Dask worker's
thread) the watch is off and `--max-commands` is the only limit. A block inside
another (a kernel's setup that calls `kb.run`) takes the timer for its span;
the outer block's clock starts again when it ends.
"""

from __future__ import annotations

import _thread
import ctypes
import functools
import os
import signal
import site
import sys
import sysconfig
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

#: Seconds of no command before a kernel is stopped (`--kernel-timeout`; 0 turns it off).
DEFAULT_KERNEL_TIMEOUT = 60.0
#: The shortest limit: the timer ticks at most every millisecond.
MIN_KERNEL_TIMEOUT = 0.001
#: How long past its limit a block that has taken the timer away runs before the
#: thread behind the timer stops it.
BACKSTOP_GRACE_S = 1.0
#: The limit on a kernel module's code outside the functional pass (`hook_limit`).
HOOK_LIMIT: ContextVar[float] = ContextVar("hook_limit", default=DEFAULT_KERNEL_TIMEOUT)

#: Raises by the thread behind the timer that a block outlives before, in the CLI, the
#: process ends (`end_process_when_stuck`).
BACKSTOP_RAISES = 2
#: `os._exit` as it was at import (the kernel-code guard of `confine` stands in its place
#: while kernel code runs).
_EXIT = os._exit
#: Whether a block that outlives `BACKSTOP_RAISES` raises ends the process.
_END_PROCESS = [False]

#: How often a watched block reads the memory left, at most (seconds).
MEMORY_READ_S = 0.25

_MIB = 1 << 20


def end_process_when_stuck(end: bool = True) -> None:
    """Whether code that takes every stop ends the process (the CLI's choice; see the
    module's docstring): `KernelTimeout` outlived, or a second Ctrl-C (`confine`)."""
    _END_PROCESS[0] = end


def ends_process() -> bool:
    return _END_PROCESS[0]


def end_now(line: str, code: int) -> None:
    """End the process at once with `line` on stderr (written whole, no lock taken: the
    thread it stops may hold sys.stderr's) and exit status `code`, whether or not stderr
    takes the line (a full disk: the process ran on, its stop taken by the kernel)."""
    try:
        os.write(2, line.encode("utf-8", "replace") + b"\n")
    finally:
        _EXIT(code)


#: where the standard library and installed packages live (`in_a_library`): not the
#: kernel's code where a stop names its line (`_where`); their code may register exit
#: handlers as a kernel imports them (`logging` does: `confine`), and their modules stay
#: imported between kernels (`sim.kernels`)
_LIBRARIES = tuple(os.path.abspath(root) + os.sep for root in dict.fromkeys(
    [sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    + site.getsitepackages() + ([site.getusersitepackages()] if site.ENABLE_USER_SITE
                                 else [])))


def in_a_library(file: str) -> bool:
    """Whether code from `file` is the standard library's or an installed package's."""
    return file.startswith("<frozen ") or os.path.abspath(file).startswith(_LIBRARIES)


def _where(frame) -> str:
    """The innermost frame of `frame`'s stack outside kernbench, the standard library and
    installed packages (the kernel's code, as it runs; a wheel's shipped kernels count
    as the kernel's), as ``path:line`` (relative to the working folder where it lies
    inside it, as a kernel given by a relative path is shown); ``?`` if none."""
    package = Path(__file__).resolve().parent.parent
    ours, shipped = (f"{package}{os.sep}", "<"), f"{package / '_data'}{os.sep}"
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(shipped) or not (name.startswith(ours) or in_a_library(name)):
            return f"{_near(name)}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


def _near(path: str) -> str:
    """`path` relative to the working folder if it lies inside it; else as it is."""
    try:
        near = os.path.relpath(path)
    except (OSError, ValueError):  # no working folder (deleted)
        return path
    return path if near.startswith(os.pardir) else near


class MemoryLow(MemoryError):
    """The memory the machine has left fell below the floor (`memory_floor`) while the
    block ran: like a `KernelTimeout`, it stops the whole pass, not one PE."""


class KernelTimeout(BaseException):
    """No progress (a command issued, a placement made) for `limit` seconds of wall-clock
    time."""

    def __init__(self, limit: float):
        super().__init__(limit)
        self.limit = limit

    def __str__(self) -> str:
        return (f"still running after {self.limit:g} s of wall-clock time with no progress: "
                "an endless loop? (--kernel-timeout changes the limit)")


@contextmanager
def hook_limit(seconds: float):
    """The block's kernel code outside the functional pass is stopped after `seconds`
    without progress (0: no limit)."""
    token = HOOK_LIMIT.set(seconds)
    try:
        yield
    finally:
        HOOK_LIMIT.reset(token)


def holds_caller_timer(call):
    """`call` (an API function) with the caller's own interval timer (`signal.alarm`,
    `setitimer`) held while it runs and set again after it returns or raises: what was
    left of it, or at once if it fell due meanwhile. So the timer's handler runs in the
    caller's code, with what it raises reaching the caller as raised, never inside
    kernbench's handling of a kernel's errors (there it was taken for the kernel's)."""
    @functools.wraps(call)
    def held(*args, **kwargs):
        if threading.current_thread() is not threading.main_thread():
            return call(*args, **kwargs)
        timer = signal.setitimer(signal.ITIMER_REAL, 0)
        if timer[0] <= 0:
            return call(*args, **kwargs)
        began = time.monotonic()
        try:
            return call(*args, **kwargs)
        finally:
            left = timer[0] - (time.monotonic() - began)
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-6), timer[1])
    return held


def hook_watch(progress=None):
    """`watchdog` of a kernel module's code outside the functional pass, at the limit
    `hook_limit` set (`progress`: None, the call's own time)."""
    return watchdog(progress, HOOK_LIMIT.get())


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except (OSError, ValueError):
        return None


def memory_left() -> tuple[int, int] | None:
    """(bytes the machine has left for this process, bytes it has in all), or None where
    this cannot be read (not Linux): /proc/meminfo's MemAvailable, and the cgroup's
    limit less its use where the process's memory cgroup (v2 or v1) sets one."""
    info = _read("/proc/meminfo")
    if info is None:
        return None
    fields = {k: v for k, _, v in (line.partition(":") for line in info.splitlines())}
    try:
        left, total = (int(fields[k].split()[0]) * 1024 for k in ("MemAvailable", "MemTotal"))
    except (KeyError, ValueError, IndexError):
        return None
    groups = dict(line.split(":", 2)[1:] for line in
                  (_read("/proc/self/cgroup") or "").splitlines() if line.count(":") >= 2)
    for controller, files in (("", ("memory.max", "memory.current")),  # cgroup v2
                              ("memory", ("memory.limit_in_bytes", "memory.usage_in_bytes"))):
        if controller not in groups:
            continue
        where = "/sys/fs/cgroup" + ("/memory" if controller else "") + \
            groups[controller].rstrip("/")
        limit, used = (_read(f"{where}/{name}") for name in files)
        if limit and used and limit.strip().isdigit() and used.strip().isdigit():
            total = min(total, int(limit))
            left = min(left, int(limit) - int(used))
    return left, total


def memory_floor(left: int, total: int) -> int:
    """Below what is left a watched block is stopped: 4% of the memory (at least 256 MiB),
    or half of what was left when the block began, if that is less."""
    return min(max(256 * _MIB, total // 25), left // 2)


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


#: Seconds between two looks of a watch (due every quarter second at most) past which the
#: process is taken to have been stopped, and the gap not counted as time without progress
PAUSED_S = 2.0


class _Watch:
    """One watched block: its progress, its limit and what memory it may leave."""

    def __init__(self, progress, limit: float):
        self.progress, self.limit = progress, limit
        self.count, self.since = progress(), time.monotonic()
        self.seen = self.since  # when `stalled` last looked (`PAUSED_S`), and the
        self.cpu = time.process_time()  # process's CPU time then
        memory = memory_left()
        self.floor = memory_floor(*memory) if memory is not None else None
        self.next_read = 0.0  # when `short_of_memory` next reads what is left
        self.ended, self.lock = threading.Event(), threading.Lock()
        self.held = False  # a block inside this one has the timer
        #: a stop raised in the block: progress after it does not count (a kernel that
        #: took it and issued a command each time ran for ever, each stop starting the
        #: clock again)
        self.stopped = False

    def hold(self) -> None:
        """A block inside this one takes the timer: this one's clock stops."""
        self.held = True

    def resume(self) -> None:
        """The block's clock starts again (a block inside it has ended)."""
        self.count, self.since = self.progress(), time.monotonic()
        self.held = False

    def stalled(self) -> float:
        """Seconds since the progress last moved, less any time the process did not run:
        the timer and its thread look at least every quarter second, so a gap of more than
        `PAUSED_S` between two looks is the process stopped (Ctrl-Z then `fg`, a debugger,
        a frozen cgroup, a suspended machine), which was counted as no progress and ended
        a slow `reference` as an endless loop; or one long call that holds the GIL, which
        is no pause: only the part of the gap the process's CPU time did not advance is
        taken off."""
        now, count, cpu = time.monotonic(), self.progress(), time.process_time()
        if now - self.seen > PAUSED_S:
            self.since += max(0.0, (now - self.seen) - (cpu - self.cpu))
        self.seen, self.cpu = now, cpu
        if count != self.count and not self.stopped:
            self.count, self.since = count, now
        return now - self.since

    def short_of_memory(self) -> MemoryLow | None:
        """`MemoryLow` if the memory left is below the floor (read every quarter second
        at most: a read takes some 0.1 ms)."""
        now = time.monotonic()
        if self.floor is None or now < self.next_read:
            return None
        self.next_read = now + MEMORY_READ_S
        memory = memory_left()
        if memory is None or memory[0] >= self.floor:
            return None
        return MemoryLow(f"{memory[0] / _MIB:,.0f} MiB of {memory[1] / _MIB:,.0f} MiB left")

    def __call__(self, signum, frame) -> None:
        """The SIGALRM handler."""
        exc = self.short_of_memory()
        if exc is None and self.limit > 0 and self.stalled() >= self.limit:
            exc = KernelTimeout(self.limit)
            self.stopped = True
        if exc is None:
            return
        outside = _outside_finalisers(frame)
        if outside is frame:
            raise exc
        if outside is not None:
            _raise_in(outside, exc)

    def backstop(self, thread: int, tick: float) -> None:
        """The thread behind the timer: raise `KernelTimeout` in `thread` once the block
        runs `BACKSTOP_GRACE_S` past its limit, and again each `BACKSTOP_GRACE_S` after
        while it still runs (not each tick: the first has that long to end the block)."""
        overdue = type("KernelTimeout", (KernelTimeout,),
                       {"__init__": lambda exc: KernelTimeout.__init__(exc, self.limit)})
        due, raised = self.limit + BACKSTOP_GRACE_S, 0
        while not self.ended.wait(tick):
            with self.lock:  # not once the block has ended
                stalled = self.stalled()
                if stalled < self.limit:
                    due, raised = self.limit + BACKSTOP_GRACE_S, 0
                elif stalled >= due and not self.ended.is_set() and not self.held:
                    if raised >= BACKSTOP_RAISES and _END_PROCESS[0]:
                        where = _where(sys._current_frames().get(thread))
                        end_now(f"error: {where}: no progress for {self.limit:g} s of "
                                "wall-clock time, and the code took every stop (an except "
                                "BaseException that carries on?): kernbench ended it", 1)
                    _async_raise(thread, overdue)
                    due, raised = stalled + BACKSTOP_GRACE_S, raised + 1

    def end(self) -> None:
        """The block has ended: the thread behind the timer stops, raising nothing more
        (one it raised as the block ended is raised: the block was past its limit).
        Clearing a pending one instead (`PyThreadState_SetAsyncExc` with NULL) hung the
        block's end under cProfile: CPython 3.11 leaves its eval breaker set after it."""
        with self.lock:
            self.ended.set()


def _async_raise(thread: int, exc: type[BaseException]) -> None:
    """Raise `exc` in `thread` between two of its bytecodes."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), ctypes.py_object(exc))


@contextmanager
def watchdog(progress, limit: float):
    """Stop the code in the block with `KernelTimeout` once ``progress()`` (a count of
    commands; None: nothing counts) has not changed for `limit` seconds (0: no limit),
    and with `MemoryLow` once the machine's memory runs low. A timer the caller had set
    (`signal.alarm`, `setitimer`) waits meanwhile and runs on after: what was left of it,
    or at once if it fell due inside."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    watch = _Watch(progress or (lambda: 0), limit)
    if limit <= 0 and watch.floor is None:
        yield
        return
    tick = max(MIN_KERNEL_TIMEOUT, min(0.25, limit / 4)) if limit > 0 else 0.25
    thread, began, tracing = threading.get_ident(), time.monotonic(), sys.gettrace()
    previous = timer = _UNSET
    try:  # the first tick may come before the block: it is inside the block's handling
        with stops_deferred():  # set up whole, or (a stop first) not at all
            timer = signal.getitimer(signal.ITIMER_REAL)
            previous = signal.signal(signal.SIGALRM, watch)
            if isinstance(previous, _Watch):
                previous.hold()
            signal.setitimer(signal.ITIMER_REAL, tick, tick)
            if limit > 0:  # kernbench's own thread: `threading.Thread.start` is refused here
                _thread.start_new_thread(watch.backstop, (thread, tick))
        yield
    finally:
        with stops_deferred():  # undone whole: a stop half-way left the watch ticking
            watch.end()
            if previous is not _UNSET:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)
                sys.settrace(tracing)
                if isinstance(previous, _Watch):
                    previous.resume()
                    signal.setitimer(signal.ITIMER_REAL, *timer)
                elif timer[0] > 0:  # the caller's own timer, held meanwhile: what is left
                    left = timer[0] - (time.monotonic() - began)
                    signal.setitimer(signal.ITIMER_REAL, max(left, 1e-6), timer[1])


_UNSET = object()
#: What stops a command: Ctrl-C, SIGTERM, and SIGHUP (its terminal closed), each ending it
#: as Ctrl-C does (its own clean-up: a sweep's workers, temporary files, the cursor)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def stops_deferred():
    """Ctrl-C, SIGTERM and SIGHUP (`STOP_SIGNALS`) set aside while the block (on the main
    thread) puts process-wide state in place or takes it away in several steps, and
    taken after it, as they would have been, by the handler in place then: called, or
    the signal sent again to a default one. A stop raised between two steps left the
    rest undone for good (kernbench's watch on SIGALRM ticking into the caller's code,
    raising `KernelTimeout`; its Ctrl-C handler). The block may set a handler of its
    own for any of them (the one then in place); a handler not set from Python is left alone
    (and takes a stop at once).
    Yields the handlers set aside, by signal."""
    if threading.current_thread() is not threading.main_thread():
        yield {}
        return
    taken: list[int] = []

    def aside(signum, _frame) -> None:
        taken.append(signum)

    handlers = {signum: signal.signal(signum, aside)
                for signum in STOP_SIGNALS
                if signal.getsignal(signum) is not None}
    try:
        yield handlers
    finally:
        for signum, handler in handlers.items():
            if signal.getsignal(signum) is aside:  # the block set none of its own
                signal.signal(signum, handler)
        for signum in dict.fromkeys(taken):
            handler = signal.getsignal(signum)
            if callable(handler):
                handler(signum, sys._getframe())
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), signum)
