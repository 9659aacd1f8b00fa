"""The `kernbench` command: registers the commands and turns errors into exit codes.

Command modules import their heavy dependencies (numpy, simpy, rich tables)
inside the command function, so `kernbench decode` starts as fast as a bare
Typer program.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Annotated

import typer
from typer.core import TyperGroup

from kernbench_cli.cli import addr, compare, golden, kernels, run, sweep, topology
from kernbench_cli.cli.common import plain_metavars
from kernbench_cli.errors import KernbenchError

#: Exit codes besides a `KernbenchError`'s own (2 bad input, 1 a run that went wrong).
EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug in kernbench
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it
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

    def invoke(self, ctx):
        from kernbench_cli.fileio import begin_command

        begin_command()
        try:
            return super().invoke(ctx)
        except KernbenchError as exc:
            for line in exc.lines():
                typer.echo(f"error: {line}", err=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
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
        except _CLICK_ERROR as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # a bare `kernbench golden`: help
                raise
            command = exc.ctx.command_path if getattr(exc, "ctx", None) else "kernbench"
            typer.echo(f"error: {exc.format_message()} (see '{command} --help')", err=True)
            raise typer.Exit(exc.exit_code) from None
        except Exception as exc:
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


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so flushing it at exit raises no second BrokenPipeError."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _terminate(signum, frame) -> None:
    """SIGTERM ends a run as Ctrl-C does: temporary files removed, exit 130."""
    raise KeyboardInterrupt


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
app.command("kernels")(kernels.kernels)
app.command("decode")(addr.decode)
app.command("encode")(addr.encode)
app.add_typer(topology.app, name="topology")
app.add_typer(golden.app, name="golden")


def main() -> None:
    """Console entry point."""
    signal.signal(signal.SIGTERM, _terminate)
    try:
        try:
            app()
        finally:  # the command has ended: a late Ctrl-C no longer interrupts anything
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            sys.stdout.flush()
    except KeyboardInterrupt:  # between start-up and the command, or while it ends
        typer.echo("interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        _quiet_stdout()
        sys.exit(EXIT_BROKEN_PIPE)
