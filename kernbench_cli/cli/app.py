"""The `kernbench` command: registers the commands and turns errors into exit codes.

Command modules import their heavy dependencies (numpy, simpy, rich tables)
inside the command function, so `kernbench decode` starts as fast as a bare
Typer program.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from typer.core import TyperGroup

from kernbench_cli.cli import addr, compare, golden, kernels, run, sweep, topology
from kernbench_cli.errors import KernbenchError


class KernbenchGroup(TyperGroup):
    """Catches `KernbenchError` once, for every command and sub-command.

    The user sees ``error: <message>`` per problem on stderr and the error's
    exit code; a real bug keeps its traceback.
    """

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KernbenchError as exc:
            for line in exc.lines():
                typer.echo(f"error: {line}", err=True)
            raise typer.Exit(exc.exit_code) from None


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
    sys.exit(app())
