"""The `kernbench` command: registers the commands and turns errors into exit codes.

Command modules import their heavy dependencies (numpy, simpy, rich tables)
inside the command function, so `kernbench decode` starts as fast as a bare
Typer program.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import signal
import sys
from typing import Annotated

import typer
from typer.core import TyperGroup

from kernbench_cli.cli import addr, compare, golden, kernels, plot, run, sweep, topology
from kernbench_cli.cli.common import plain_help, plain_metavars
from kernbench_cli.errors import KernbenchError
from kernbench_cli.lang.confine import (
    EXIT_INTERRUPTED,
    Interrupted,
    deferred_from_finalizer,
    stopping,
)
from kernbench_cli.lang.watchdog import STOP_SIGNALS, end_process_when_stuck

#: Exit codes besides a `KernbenchError`'s own (2 bad input, 1 a run that went wrong).
EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug in kernbench
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: stdout's reader went away


#: Click's usage errors (from whichever click Typer uses: its own copy in recent versions).
_CLICK_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


class KernbenchGroup(TyperGroup):
    """Turns every way a command can end into one line and an exit code, once.

    ``error: <message>`` per problem on stderr and the error's exit code for a
    `KernbenchError` or a usage error; ``interrupted`` and 130 for Ctrl-C or SIGTERM (temporary
    files are removed on the way out: see `fileio.atomic_write`); anything
    else is a bug in kernbench: ``internal error: … (please report)`` on one
    line, the traceback in a file named there, and exit 70.
    """

    def main(self, *args, **kwargs):
        plain_help(self)
        return super().main(*args, **kwargs)

    def invoke(self, ctx):
        from kernbench_cli.fileio import begin_command, end_command

        begin_command()
        _INTERRUPT_SAID[0] = False  # once a command (tests run many in one process)
        try:
            return self._invoke(ctx)
        finally:
            end_command()

    def _invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KernbenchError as exc:
            for line in exc.lines():
                typer.echo(f"error: {line}", err=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            _said_interrupted()
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except BrokenPipeError:  # `kernbench … | head`: the reader has all it wanted
            _quiet_stdout()
            raise typer.Exit(EXIT_BROKEN_PIPE) from None
        except MemoryError:  # not a bug: a problem too large for this machine
            typer.echo("error: this machine ran out of memory (a smaller problem, or "
                       "--timing-only, which keeps no values)", err=True)
            raise typer.Exit(1) from None
        except (typer.Exit, typer.Abort):
            raise
        except OSError as exc:
            if exc.errno not in _STDOUT_ERRORS:
                _internal_error(exc)
            _stdout_failed(exc)
        except _CLICK_ERROR as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # a bare `kernbench golden`: help
                raise
            command = exc.ctx.command_path if getattr(exc, "ctx", None) else "kernbench"
            typer.echo(f"error: {exc.format_message()} (see '{command} --help')", err=True)
            raise typer.Exit(exc.exit_code) from None
        except Exception as exc:
            _internal_error(exc)


def _internal_error(exc: Exception) -> None:
    """A bug in kernbench: one line on stderr, the traceback in a file, exit 70."""
    report = _save_traceback()
    first = str(exc).splitlines()[0][:200] if str(exc) else ""
    typer.echo(f"internal error: {type(exc).__name__}: {first} (please report, with "
               f"the traceback in {report})", err=True)
    raise typer.Exit(EXIT_INTERNAL) from None


def _save_traceback() -> str:
    """Write the current exception's traceback to a fresh file in the temp folder; its path."""
    import tempfile
    import traceback

    from kernbench_cli import __version__

    try:
        handle, path = tempfile.mkstemp(prefix="kernbench-internal-error-", suffix=".txt")
        with os.fdopen(handle, "w") as out:
            out.write(f"kernbench {__version__}, python {sys.version.split()[0]}\n"
                      f"argv: {sys.argv}\n\n{traceback.format_exc()}")
    except OSError:
        return "(no file: the temp folder is not writable)"
    return path


#: errno of a write to stdout that cannot succeed: a full disk or quota, a file past the
#: size limit (`ulimit -f`), a closed or dead descriptor (a broken pipe is EPIPE: exit 141,
#: quietly)
_STDOUT_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EBADF, errno.EIO)


def _stdout_failed(exc: OSError) -> None:
    """The report could not be written to stdout: one line on stderr, exit 1."""
    global _STDOUT_FAILED
    _STDOUT_FAILED = True
    with contextlib.suppress(OSError, ValueError):
        _quiet_stdout()
    try:
        typer.echo(f"error: cannot write to stdout: {exc.strerror or exc}", err=True)
    except OSError:  # stderr is what failed: nothing can say so; what it holds goes nowhere,
        with contextlib.suppress(OSError, ValueError):  # not into a failed flush at exit
            _quiet_stdout(sys.stderr)
    raise typer.Exit(1)


_STDOUT_FAILED = False  # `_stdout_failed` pointed stdout at /dev/null (not a broken pipe)


def _buffered_streams() -> None:
    """Under PYTHONUNBUFFERED (`python -u`), stdout and stderr write straight to the
    descriptor, which drops what a short write leaves (a pipe whose reader went, a file at
    its size limit) without an error: each goes through a buffer, which writes the rest or
    raises, flushed at each line (so stdout and stderr to one pipe or log keep their
    order, as unbuffered output does). stderr is `_Diagnostics` either way."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        raw = getattr(stream, "buffer", None)
        if not isinstance(stream, io.TextIOWrapper) or raw is None:
            continue
        if isinstance(raw, io.FileIO):
            raw = io.BufferedWriter(raw)
        elif name == "stdout":
            continue
        kind = _Diagnostics if name == "stderr" else io.TextIOWrapper
        _REPLACED.append(stream)  # kept: collected, it would close the buffer they share
        setattr(sys, name, kind(raw, encoding=stream.encoding, errors=stream.errors,
                                line_buffering=True))


_REPLACED: list = []  # the streams `_buffered_streams` stands in for


class _Diagnostics(io.TextIOWrapper):
    """stderr: progress lines and messages, which say how the command goes but are not its
    result (stdout, its output files and its exit code are). A write that fails for want
    of room (a full disk, a file size limit) or of a reader (a closed pipe) ended a run
    whose report and outputs were fine, at its first progress line: the stream is then
    pointed at /dev/null, and the command goes on as with `2>/dev/null`."""

    def write(self, text: str) -> int:
        try:
            return super().write(text)
        except OSError as exc:
            self._lost(exc)
            return super().write(text)

    def flush(self) -> None:
        try:
            super().flush()
        except OSError as exc:
            self._lost(exc)
            super().flush()

    def _lost(self, exc: OSError) -> None:
        if exc.errno not in (*_STDOUT_ERRORS, errno.EPIPE):
            raise exc
        _quiet_stdout(self)  # what the buffer holds goes to /dev/null with the rest


def _open_closed_streams() -> None:
    """Started with stdin or stderr closed (`2>&-`): each is /dev/null, descriptor and
    Python stream, as a daemon's are. Otherwise the next file opened would take the
    descriptor (what a worker or a library writes to stderr would land in an output), and
    every message, progress line and worker start would meet None."""
    for fd, name, mode in ((0, "stdin", "r"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, mode, closefd=False,  # noqa: SIM115 - kept for good
                                    errors="backslashreplace"))


#: the widths tables and help are laid out at, whatever the environment says (`_sane_width`)
WIDTHS = (40, 1000)


def _blocking_streams() -> None:
    """stdout and stderr blocking while the command runs, as they were at exit: a parent
    that shares a non-blocking pipe (a slow reader) made the report's writes past the
    pipe's 64 KiB fail, a truncated JSON and a chained traceback. The flag belongs to
    the pipe the parent shares, so it is put back as it was."""
    import atexit

    for fd in (1, 2):
        try:
            blocking = os.get_blocking(fd)
        except OSError:  # closed, or no such flag here
            continue
        if not blocking:
            os.set_blocking(fd, True)
            atexit.register(_nonblocking_again, fd)


def _nonblocking_again(fd: int) -> None:
    """Put `fd` back to non-blocking (`_blocking_streams`), once what is left is written."""
    with contextlib.suppress(OSError, ValueError):
        (sys.stdout if fd == 1 else sys.stderr).flush()
    with contextlib.suppress(OSError):
        os.set_blocking(fd, False)


def _sane_width() -> None:
    """COLUMNS (Rich's width) and TERMINAL_WIDTH (Typer's help) within `WIDTHS`: at 0 Rich
    printed nothing, and at 1 a character a line, with exit 0 and no result; at 10^10 the
    help's padding took all the machine's memory. A digit that is no ASCII one ("²",
    which Rich took for a number and int() did not) is dropped; other text Rich ignores."""
    low, high = WIDTHS
    for name in ("COLUMNS", "TERMINAL_WIDTH"):
        value = os.environ.get(name, "")
        if value.isdigit() and not value.isascii():  # "²": a digit to Rich, not to int()
            del os.environ[name]
        elif value.isdigit() and not low <= int(value) <= high:
            os.environ[name] = str(min(max(int(value), low), high))


def _on_devnull() -> bool:
    """Whether stdout's descriptor is /dev/null."""
    try:
        here, null = os.fstat(sys.stdout.fileno()), os.stat(os.devnull)
    except (OSError, ValueError, AttributeError):
        return False
    return (here.st_dev, here.st_ino) == (null.st_dev, null.st_ino)


def _quiet_stdout(stream=None) -> None:
    """Point stdout (or `stream`) at /dev/null, so flushing it at exit raises no second
    BrokenPipeError."""
    devnull, fd = os.open(os.devnull, os.O_WRONLY), (stream or sys.stdout).fileno()
    if devnull != fd:
        os.dup2(devnull, fd)
        os.close(devnull)


_INTERRUPT_SAID = [False]


def _said_interrupted() -> None:
    """Print `interrupted` (once): Ctrl-C or SIGTERM ended the command."""
    if not _INTERRUPT_SAID[0]:
        _INTERRUPT_SAID[0] = True
        typer.echo("interrupted", err=True)


def _terminate(signum, frame) -> None:
    """SIGTERM, and SIGHUP (the terminal closed), end a run as Ctrl-C does: temporary files
    removed, a sweep's workers stopped, the cursor shown again, exit 130 (a second one that
    kernel code took the first of, at once: `confine.stopping`)."""
    if deferred_from_finalizer(signum, frame):
        return
    stopping()
    raise Interrupted


plain_metavars()
app = typer.Typer(
    name="kernbench",
    cls=KernbenchGroup,
    help="Benchmark Triton-like kernels on a model of an HBM near-memory accelerator.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
def _version(show: bool) -> None:
    if show:
        from kernbench_cli import __version__

        typer.echo(f"kernbench {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[bool, typer.Option(
        "--version", help="Print the version and exit.", is_eager=True, callback=_version)]
    = False,
) -> None:
    """Benchmark Triton-like kernels on a model of an HBM near-memory accelerator."""


app.command("run")(run.run)
app.command("replay")(run.replay)
app.command("sweep")(sweep.sweep)
app.command("compare")(compare.compare)
app.command("plot")(plot.plot)
app.command("kernels")(kernels.kernels)
app.command("decode")(addr.decode)
app.command("encode")(addr.encode)
app.add_typer(topology.app, name="topology")
app.add_typer(golden.app, name="golden")


def _helps_from_source(group: typer.Typer) -> None:
    """Under `python -OO`, which drops docstrings, each command's help (its docstring) read
    from its source: every command's description was empty."""
    import ast
    import inspect
    import textwrap

    for info in group.registered_commands:
        if info.help is None and info.callback is not None and info.callback.__doc__ is None:
            try:
                source = textwrap.dedent(inspect.getsource(info.callback))
                info.help = ast.get_docstring(ast.parse(source).body[0])
            except (OSError, TypeError, SyntaxError, IndexError):
                pass  # no source to read: no description, as before
    for sub in group.registered_groups:
        _helps_from_source(sub.typer_instance)


if sys.flags.optimize >= 2:
    _helps_from_source(app)


def main() -> None:
    """Console entry point."""
    signal.signal(signal.SIGTERM, _terminate)
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:  # not under nohup
        signal.signal(signal.SIGHUP, _terminate)
    end_process_when_stuck()  # kernel code that takes every stop: see `lang.watchdog`
    if sys.stdout is None:  # started with stdout closed (`kernbench … >&-`)
        sys.exit(EXIT_BROKEN_PIPE)
    _open_closed_streams()
    _blocking_streams()
    _sane_width()
    _buffered_streams()
    was_devnull = _on_devnull()
    try:
        try:
            app()
        except SystemExit as done:
            if done.code == EXIT_INTERRUPTED:  # Typer ends a Ctrl-C during its own set-up
                _said_interrupted()  # (before the command runs) with 130, silently
            # Click and Rich answer a broken pipe (help, tables) with exit 1, Click with a
            # wrapper on stdout, Rich by pointing it at /dev/null: the reader went away
            if done.code == 1 and not _STDOUT_FAILED and (
                    type(sys.stdout).__name__ == "PacifyFlushWrapper"
                    or (not was_devnull and _on_devnull())):
                sys.exit(EXIT_BROKEN_PIPE)
            raise
        finally:  # the command has ended: a late Ctrl-C no longer interrupts anything
            for signum in STOP_SIGNALS:
                signal.signal(signum, signal.SIG_IGN)
            sys.stdout.flush()
    except KeyboardInterrupt:  # between start-up and the command, or while it ends
        _said_interrupted()
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        _quiet_stdout()
        sys.exit(EXIT_BROKEN_PIPE)
    except OSError as exc:  # the last of the report, flushed at exit
        if exc.errno not in _STDOUT_ERRORS:
            raise
        try:
            _stdout_failed(exc)
        except typer.Exit as stop:
            sys.exit(stop.exit_code)
