"""`kernbench golden regen` and `kernbench golden check`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from kernbench_cli.cli.common import SetOpt
from kernbench_cli.errors import GoldenMismatch

app = typer.Typer(help="Golden results: regenerate after an intended model change; check in CI.",
                  no_args_is_help=True)

OnlyOpt = Annotated[str | None, typer.Option(
    "--only", help="Only the cases whose name matches this pattern (fnmatch, e.g. 'gqa*').")]
DirOpt = Annotated[Path | None, typer.Option(
    "--dir", help="The goldens folder (default: the shipped goldens/).")]
CostsOpt = Annotated[Path | None, typer.Option(
    "--costs", help="Run every case with this cost table instead of its topology's.")]


@app.command()
def regen(
    only: OnlyOpt = None,
    check: Annotated[bool, typer.Option(
        "--check", help="Write nothing; fail on any difference (same as `golden check`).")] = False,
    directory: DirOpt = None,
    costs: CostsOpt = None,
) -> None:
    """Run every golden case and rewrite the goldens that changed; print what changed."""
    _run(only, directory, costs, write=not check)


@app.command("check")
def check_cmd(only: OnlyOpt = None, directory: DirOpt = None, costs: CostsOpt = None,
              sets: SetOpt = None) -> None:
    """Run every golden case; exit 1 with a table of differences if any result moved.

    With --set, every case runs with the overrides: which goldens would a change move?"""
    _run(only, directory, costs, write=False, sets=sets or ())


def _run(only: str | None, directory: Path | None, costs: Path | None, write: bool,
         sets: Sequence[str] = ()) -> None:
    from rich.console import Console

    from kernbench_cli.errors import KernbenchError
    from kernbench_cli.golden.run import regen as do_regen
    from kernbench_cli.golden.run import select
    from kernbench_cli.report.golden import difference_table
    from kernbench_cli.resources import data_dir

    folder = directory or data_dir("goldens")
    if not folder.is_dir():
        raise KernbenchError(f"goldens folder {str(folder)!r} does not exist")
    cases = select(only)
    if not cases:
        raise KernbenchError(f"no golden case matches {only!r}")
    err = Console(stderr=True)
    differences = do_regen(folder, only, write,
                           progress=lambda name: err.print(f"[dim]running {name}[/dim]"),
                           costs=costs, sets=sets)
    out = Console()
    if differences:
        out.print(difference_table(differences))
    changed = len({d.case for d in differences})
    if write:
        out.print(f"{len(cases)} cases run; {changed} goldens written or removed in {folder}")
        return
    if differences:
        raise GoldenMismatch(f"{len(differences)} differences in {changed} of {len(cases)} "
                             "golden cases; if the change is intended, run `kernbench golden "
                             "regen` and add a CHANGELOG entry")
    out.print(f"{len(cases)} golden case{'s match' if len(cases) > 1 else ' matches'}")
