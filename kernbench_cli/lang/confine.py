"""What a kernel module's code may not do to the process that runs it.

Kernels are plain Python in kernbench's own process. While a kernel module's
code runs (its import, `setup`, `kernel`, `reference`, `outputs`: `confined`),
four things it could do would take the run down with no report, so each is a
kernel error with the kernel's line instead:

- **starting a thread** (`threading.Thread.start`): the PEs' kernels run one at
  a time in greenlets; a thread is outside the model, and a non-daemon one
  left running would keep kernbench from ever exiting;
- **`os._exit()`**: the process would end at once, exit status and all, with
  no report and temporary files left behind;
- **`os.fork()`**: the child would carry on with the run, and the report would
  be printed once per process;
- **raising `KeyboardInterrupt`**: kernbench stops for Ctrl-C and SIGTERM
  (`Interrupted`, raised by its signal handlers); a `KeyboardInterrupt` the
  kernel's own code raises is the kernel's error, not the user's stop.

Kernel code may redirect its prints (`contextlib.redirect_stdout`), but
`sys.stdout` and `sys.stderr` are put back as they were when the block ends:
a kernel that set them to None or to a buffer and returned took kernbench's
report with it (an internal error, or a run that printed nothing). So is the
working directory (`os.chdir`): the run's relative output paths were checked
against the one it started in, and went to the kernel's, leaving an old file
at the path asked for as if this run had written it (and `kb.run` left its
caller elsewhere).

The checks apply to the thread that runs the kernel code only (a Dask worker
runs other work on its other threads). The guards are put in place when the
first thread enters `confined` and the functions that were there put back when
the last one leaves, so the process is left as it was found: a notebook that
called `kb.run` keeps its standard library. `printing_to_stderr` sends what the
thread running a kernel prints to stderr for the same span, leaving what other
threads print where it went.
"""

from __future__ import annotations

import _thread
import atexit
import contextlib
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager

from kernbench_cli.lang.watchdog import end_now, ends_process, in_a_library, stops_deferred

#: The exit status of a command stopped by Ctrl-C or SIGTERM.
EXIT_INTERRUPTED = 130


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM: the user stopped kernbench."""


class KernelMisuse(BaseException):
    """Kernel code did what `confined` forbids; the message says what. A `BaseException`,
    so a kernel's ``except Exception`` does not carry on past it."""


_CONFINED: set[int] = set()  # threads (`threading.get_ident`) running kernel code
_LOCK = threading.Lock()  # guards the patches below and their count
#: (owner, attribute, the guard put there, what was there before), while any thread is
#: confined
_PATCHED: list[tuple[object, str, object, object]] = []


def _guard(original, refuse):
    """`original`, refused (`refuse` gives the message; None: allowed here) in a confined
    thread."""
    def guarded(*args, **kwargs):
        if threading.get_ident() in _CONFINED:
            message = refuse(*args)
            if message is not None:
                raise KernelMisuse(message)
        return original(*args, **kwargs)

    guarded.__wrapped__ = original
    return guarded


def _refusals() -> list[tuple[object, str, object]]:
    """(owner, attribute, the message of a refused call) of each guarded function."""
    out: list[tuple[object, str, object]] = [
        (threading.Thread, "start", lambda *_: (
            "a kernel may not start a thread: the PEs' kernels run one at a time in the "
            "functional pass, and a thread is outside the model")),
        (os, "_exit", lambda status=None, *_: (
            f"the kernel called os._exit({status!r}): it would end kernbench with no "
            "report")),
    ]
    out.append((atexit, "register", lambda *_: None if in_a_library(
        sys._getframe(2).f_code.co_filename) else (
        "a kernel may not register an exit handler (atexit): it would run after kernbench's "
        "report, outside the run (one that never returned kept the process alive)")))
    for name in ("fork", "forkpty"):
        if hasattr(os, name):
            out.append((os, name, lambda *_, name=name: (
                f"the kernel called os.{name}(): the child would carry on with the run "
                "(and print its report again)")))
    return out


def _install() -> None:
    """Put the guards in place (the first thread to enter `confined`); under `_LOCK`."""
    for owner, attr, refuse in _refusals():
        original = getattr(owner, attr)
        guard = _guard(original, refuse)
        setattr(owner, attr, guard)
        _PATCHED.append((owner, attr, guard, original))


def _uninstall() -> None:
    """Put back what was there (the last thread to leave `confined`), unless something
    else has replaced a guard since: that is left as it is. Under `_LOCK`."""
    while _PATCHED:
        owner, attr, guard, original = _PATCHED.pop()
        if getattr(owner, attr) is guard:
            setattr(owner, attr, original)


@contextmanager
def confined():
    """Run the block as kernel code: see the module's docstring."""
    ident = threading.get_ident()
    if ident in _CONFINED:  # nested (a kernel's setup calls into a run): already confined
        yield
        return
    previous = cwd = None
    entered = False
    try:
        with stops_deferred() as aside:  # in place whole, or (a stop first) not at all
            if threading.current_thread() is threading.main_thread():
                handler = aside.get(signal.SIGINT)
                if callable(handler) and handler is not _interrupt_handler:
                    _CHAINED.append(handler)
                    previous = handler
                    signal.signal(signal.SIGINT, _interrupt_handler)
            with _LOCK:
                _streams_taken()
                if not _CONFINED:
                    _install()
                    _CWD[:] = [_cwd()]
                _CONFINED.add(ident)
                entered, cwd = True, _CWD[0]
        yield
    finally:
        with stops_deferred():  # undone whole: a stop half-way left the guards in place
            if entered:
                _leave(ident, cwd)
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
                _CHAINED.pop()


def _leave(ident: int, cwd: str | None) -> None:
    """Thread `ident` leaves `confined` (`cwd`: the directory it goes back to)."""
    with _LOCK:
        _CONFINED.discard(ident)
        if not _CONFINED:
            _uninstall()
        _streams_put_back()  # as kernbench has them, whatever the kernel set
        if not _CONFINED:
            _CWD.clear()
            _STOPS[0] = 0
    if cwd is not None and _cwd() != cwd:
        with contextlib.suppress(OSError):  # gone since: nowhere to go back to
            os.chdir(cwd)


#: (sys.stdout, sys.stderr) as they were when the first thread entered `confined` or
#: `printing_to_stderr`, until the last leaves: what they are put back to (the `_Router`
#: in sys.stdout's place while threads are routed). One pair for all threads: a thread
#: that kept its own took another's `_Router` for the original, or put the original back
#: while another thread was routed.
_STREAMS: list[tuple] = []


def _streams_taken() -> None:
    """A thread enters `confined` or `printing_to_stderr`; under `_LOCK`."""
    if not _CONFINED and not _ROUTED:
        _STREAMS[:] = [(sys.stdout, sys.stderr)]


def _streams_put_back() -> None:
    """A thread leaves `confined`: sys.stdout and sys.stderr as kernbench has them now;
    under `_LOCK`."""
    if _STREAMS:
        out, err = _STREAMS[0]
        sys.stdout, sys.stderr = (_ROUTER[0] if _ROUTER else out), err
    if not _CONFINED and not _ROUTED:
        _STREAMS.clear()


def _cwd() -> str | None:
    """The working directory; None if it cannot be read (deleted since)."""
    try:
        return os.getcwd()
    except OSError:
        return None


#: The working directory when the first thread entered `confined`, until the last leaves:
#: each thread leaving goes back to it. One for all threads, as the directory is the
#: process's: a thread that kept its own could take a kernel's `os.chdir` for it.
_CWD: list = []
_CHAINED: list = []  # the SIGINT handler `_interrupt_handler` stands in front of


def deferred_from_finalizer(signum, frame) -> bool:
    """Whether a stop (`signum`) landed inside a finalizer (``__del__``), and was sent again
    to be taken once it returns: an exception raised in a finalizer is not raised but
    printed ("Exception ignored in ...") and lost, and the run would go on."""
    while frame is not None:
        if frame.f_code.co_name == "__del__":  # sent again 10 ms on: it has returned by then
            _thread.start_new_thread(_send_again, (signum,))
            return True
        frame = frame.f_back
    return False


def _send_again(signum: int) -> None:
    time.sleep(0.01)
    os.kill(os.getpid(), signum)


def _interrupt_handler(signum, frame) -> None:
    """Ctrl-C while kernel code runs: the handler that was there, its stop made `Interrupted`
    (a second one may end the process: `stopping`)."""
    if deferred_from_finalizer(signum, frame):
        return
    try:
        _CHAINED[-1](signum, frame)
    except KeyboardInterrupt:
        stopping()
        raise Interrupted from None


_STOPS = [0]  # Ctrl-C and SIGTERM raised while kernel code ran, since it began


def stopping() -> None:
    """Ctrl-C or SIGTERM is about to raise `Interrupted`. If kernel code runs and took the
    one before (it ran on: an ``except BaseException`` in a loop), in the CLI
    (`watchdog.end_process_when_stuck`) the process ends now: ``interrupted``, exit 130."""
    if not _CONFINED or not ends_process():
        return
    _STOPS[0] += 1
    if _STOPS[0] > 1:
        end_now("interrupted (the kernel's code took the stop before this one and ran on)",
                EXIT_INTERRUPTED)


# ------------------------------------------------------------------ prints to stderr

_ROUTED: set[int] = set()  # threads whose prints go to stderr
_ROUTER: list[_Router] = []  # the stand-in on sys.stdout, while any thread is routed


class _Router:
    """Stands in for `sys.stdout` while threads print to stderr: a routed thread's writes
    go to `sys.stderr` (dropped if there is none), every other thread's to the stream that
    was there."""

    def __init__(self, stdout):
        self.stdout = stdout

    def _target(self):
        if threading.get_ident() in _ROUTED:
            return sys.stderr if sys.stderr is not None else _Dropped()
        return self.stdout

    def write(self, text: str) -> int:
        return self._target().write(text)

    def flush(self) -> None:
        self._target().flush()

    def __getattr__(self, name: str):
        return getattr(self._target(), name)


#: The one stand-in, for the life of the process: another thread may still be inside
#: `print()` with it after it leaves sys.stdout (CPython 3.11's `print` holds sys.stdout
#: borrowed), which with a stand-in made per run and freed as it left crashed the process
#: (a segmentation fault). Its `stdout` is what it stood in for last.
_STAND_IN = _Router(None)


class _Dropped:
    """A stream that keeps nothing (stderr is None: a GUI's Python, a closed descriptor)."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


@contextmanager
def printing_to_stderr():
    """What this thread prints in the block goes to stderr (a kernel's prints: so that
    `--json` on stdout stays JSON); other threads' prints are left where they go. `sys.stdout`
    is what it was once no thread is in such a block (unless something else replaced it
    meanwhile: then that is left)."""
    ident = threading.get_ident()
    if ident in _ROUTED or sys.stdout is None:
        yield
        return
    with _LOCK:
        _streams_taken()
        if not _ROUTED:
            if sys.stdout is not _STAND_IN:
                _STAND_IN.stdout = sys.stdout
            _ROUTER.append(_STAND_IN)
            sys.stdout = _STAND_IN
        _ROUTED.add(ident)
    try:
        yield
    finally:
        with _LOCK:
            _ROUTED.discard(ident)
            if not _ROUTED:
                router = _ROUTER.pop()
                if sys.stdout is router:
                    sys.stdout = router.stdout
            if not _CONFINED and not _ROUTED:
                _STREAMS.clear()
