"""`kernbench golden regen` and `kernbench golden check`."""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from kernbench_cli.cli.common import (
    DEDUP_DEFAULT,
    DedupOpt,
    ProgressOpt,
    SetOpt,
    echo_rich,
    following,
)
from kernbench_cli.errors import GoldenMismatch, KernbenchError
from kernbench_cli.fileio import check_writable, is_a

app = typer.Typer(help="Golden results: regenerate after an intended model change; check in CI.",
                  no_args_is_help=True)

OnlyOpt = Annotated[str | None, typer.Option(
    "--only", metavar="PATTERN",
    help="Only the cases whose name matches this pattern (fnmatch, e.g. 'gqa*').")]
DirOpt = Annotated[Path | None, typer.Option(
    "--dir", metavar="DIR",
    help="The goldens folder (default: the checkout's goldens/; regen creates a new one).")]
CostsOpt = Annotated[Path | None, typer.Option(
    "--costs", help="Run every case with this cost table instead of its topology's.")]


@app.command()
def regen(
    only: OnlyOpt = None,
    check: Annotated[bool, typer.Option(
        "--check", help="Write nothing; fail on any difference (same as `golden check`).")] = False,
    directory: DirOpt = None,
    costs: CostsOpt = None,
    progress: ProgressOpt = False,
) -> None:
    """Run every golden case and rewrite the goldens that changed; print what changed."""
    _run(only, directory, costs, write=not check, progress=progress)


@app.command("check")
def check_cmd(only: OnlyOpt = None, directory: DirOpt = None, costs: CostsOpt = None,
              sets: SetOpt = None, progress: ProgressOpt = False,
              dedup: DedupOpt = DEDUP_DEFAULT) -> None:
    """Run every golden case; exit 1 with a table of differences if any result moved.

    With --set, every case runs with the overrides: which goldens would a change move?"""
    _run(only, directory, costs, write=False, sets=sets or (), progress=progress, dedup=dedup)


def _default_folder(write: bool) -> Path:
    """The shipped goldens: in a checkout its goldens/ folder; in an installed package,
    ./goldens when there is one to write, else a refusal (the package is not for editing)."""
    from kernbench_cli.shipped import data_dir, installed

    if not write or not installed():
        return data_dir("goldens")
    if Path("goldens").is_dir():
        return Path("goldens")
    raise KernbenchError("golden regen: the shipped goldens are part of the installed package "
                         f"({data_dir('goldens')}); give --dir FOLDER (created if missing), or "
                         "run it in a checkout")


def _run(only: str | None, directory: Path | None, costs: Path | None, write: bool,
         sets: Sequence[str] = (), progress: bool = False, dedup: bool = DEDUP_DEFAULT) -> None:
    from rich.console import Console

    from kernbench_cli.golden.run import regen as do_regen
    from kernbench_cli.golden.run import select
    from kernbench_cli.report.golden import difference_table
    from kernbench_cli.sim.watch import Watch

    folder = directory or _default_folder(write)
    if write and not is_a(folder, "dir"):
        try:
            folder.mkdir(parents=True)
        except OSError as exc:
            raise KernbenchError(f"--dir {folder}: cannot create the folder: "
                                 f"{exc.strerror or exc}") from None
    if not is_a(folder, "dir"):
        raise KernbenchError(f"goldens folder {str(folder)!r} " + (
            "is not a folder" if os.path.lexists(folder) else "does not exist"))
    if write:  # before any case runs
        check_writable(folder, f"--dir {folder}")
    cases = select(only)
    if not cases:
        raise KernbenchError(f"no golden case matches {only!r}")
    if costs is not None or sets:  # a bad table or item is said once, before any case runs
        from kernbench_cli.address import load_address_map

        load_address_map(cases[0].topology, costs, list(sets))
    err = Console(stderr=True)
    numbers = {case.name: n for n, case in enumerate(cases, 1)}

    @contextmanager
    def follow(name: str):
        """Each case says so as it starts (and with --progress, how it gets on)."""
        err.print(f"[dim]running {name}[/dim]")
        watch = Watch()
        with following(f"{name} ({numbers[name]} of {len(cases)})", watch, progress):
            yield watch

    differences = do_regen(folder, only, write, progress=follow, costs=costs, sets=sets,
                           dedup=dedup)
    if differences:
        echo_rich(difference_table(differences))
    changed = len({d.case for d in differences})
    if write:
        typer.echo(f"{len(cases)} cases run; {changed} goldens written or removed in {folder}")
        return
    if differences:
        raise GoldenMismatch(f"{len(differences)} differences in {changed} of {len(cases)} "
                             "golden cases; if the change is intended, run `kernbench golden "
                             "regen` and add a CHANGELOG entry")
    typer.echo(f"{len(cases)} golden case{'s match' if len(cases) > 1 else ' matches'}")
