"""Option types and parsing shared by the commands."""

from __future__ import annotations

import contextlib
import time
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from kernbench_cli.errors import AddressError, KernbenchError, clip
from kernbench_cli.fileio import MAX_JSON_INT, file_name

TopologyOpt = Annotated[
    str | None,
    typer.Option("--topology", "-t", metavar="NAME|PATH",
                 help="Topology name (default, sip, rack) or TOML path; without it, default."),
]
CostsOpt = Annotated[
    Path | None,
    typer.Option("--costs", help="Cost-table TOML; overrides the one the topology names."),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", metavar="KEY=VALUE",
                 help="Override a topology key (hbm.bandwidth=409.6GB/s, pe.gemm.rows=64) or, "
                      "prefixed costs., a cost-table key (costs.issue.composite=80ns); "
                      "repeatable."),
]
SeedOpt = Annotated[int, typer.Option(
    help="Seed of the input data (the same seed, the same inputs).", min=0, max=MAX_JSON_INT,
    metavar="INT")]
ParamOpt = Annotated[list[str] | None, typer.Option(
    "--param", "-p", metavar="NAME=VALUE",
    help="Kernel parameter (`kernbench kernels KERNEL` lists them); repeatable.")]


def output_path(text: str | Path) -> Path:
    """Typer's parser for an option naming a file to write (`fileio.file_name`)."""
    if isinstance(text, Path):  # a default
        return text
    try:
        return file_name(text, "")
    except KernbenchError as exc:
        raise typer.BadParameter(str(exc)) from None


JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of text.")]


class Format(StrEnum):
    """What `--format` prints: the Rich table, CSV, Markdown or JSON."""

    table = "table"
    csv = "csv"
    md = "md"
    json = "json"


FormatOpt = Annotated[Format | None, typer.Option(
    "--format", help="table (the default), csv (a row per value, for pandas or a "
                     "spreadsheet), md (Markdown) or json (as --json).")]


def chosen_format(fmt: Format | None, as_json: bool) -> Format:
    """The format `--format` and `--json` ask for (refused when they disagree)."""
    if as_json and fmt not in (None, Format.json):
        from kernbench_cli.errors import KernbenchError

        raise KernbenchError(f"--json and --format {fmt.value} disagree: give one")
    return Format.json if as_json else fmt or Format.table


PerPeOpt = Annotated[bool, typer.Option("--per-pe", help="Also show each PE.")]

#: Seconds between the plain progress lines of `--progress` (stderr not a terminal).
PROGRESS_EVERY = 10.0
#: Seconds before the first of them: a long setup says what it is doing at once.
PROGRESS_FIRST = 1.0

DEDUP_DEFAULT = True  # one representative per class of PEs (docs/benchmarks.md)
DedupOpt = Annotated[bool, typer.Option(
    "--dedup/--no-dedup", help="Time one PE per class of PEs that time alike, or every PE in "
                               "full (the results are the same).")]

SHORTCUTS_DEFAULT = True  # copy a repetition proven alike (`tl.repeat`)
ShortcutsOpt = Annotated[bool, typer.Option(
    "--shortcuts/--no-shortcuts", help="Timing only: copy a loop body's repetitions (a "
                                       "decoder layer's) proven alike to the ones before, or "
                                       "run every one (the results are the same).")]

ProgressOpt = Annotated[bool, typer.Option(
    "--progress", help="With stderr not a terminal (piped, a log), print plain progress "
                       f"lines there: as each pass begins, after {PROGRESS_FIRST:g} s and every "
                       f"{PROGRESS_EVERY:g} s (on a terminal a spinner shows it anyway).")]


@contextmanager
def following(message: str, watch, progress: bool = False):
    """Show how a run (its `sim.watch.Watch`) gets on, on stderr, while the block runs.

    On a terminal a spinner with `watch.text()`, twice a second. Elsewhere, with
    `progress`, plain lines (no spinner, no carriage returns): one as each pass begins
    (setup too), one after `PROGRESS_FIRST` seconds and then every `PROGRESS_EVERY`, one
    when the run is done; without it, nothing.
    Either way a big run's estimate (`sim.watch.estimate`) is printed as its timing pass
    begins.
    """
    import sys
    import threading

    from kernbench_cli.sim.watch import estimate

    tty = sys.stderr.isatty()
    plain = progress and not tty
    status = None  # the spinner, on a terminal

    def say(line: str) -> None:
        if status is not None:  # a line above the spinner
            status.console.print(line, markup=False, highlight=False, soft_wrap=True)
            return
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def began(watch) -> None:
        if plain:
            say(f"{message}: {_phase(watch)}")
        line = estimate(watch)
        if line is not None:
            say(f"{message}: {line}")

    watch.on_begin = began
    started = time.perf_counter()
    stop = threading.Event()
    with contextlib.ExitStack() as stack:
        if tty:
            from rich.console import Console

            status = stack.enter_context(Console(stderr=True, markup=False).status(message))
            first, tick, update = 0.5, 0.5, lambda: status.update(f"{message}: {watch.text()}")
        else:
            first, tick, update = (min(PROGRESS_FIRST, PROGRESS_EVERY), PROGRESS_EVERY,
                                   lambda: say(f"{message}: {watch.text()}"))
        thread = threading.Thread(target=lambda: _every(stop, first, tick, update), daemon=True)
        if tty or plain:
            thread.start()
        try:
            yield
        finally:
            stop.set()
            if thread.is_alive():
                thread.join()
            watch.on_begin = None
    if plain:
        say(f"{message}: done in {time.perf_counter() - started:.1f} s")


def _phase(watch) -> str:
    """A pass beginning, as `--progress` says it: its phase, and once the functional pass
    is done, its commands (those `tl.repeat` copied) and seconds."""
    done = watch.functional
    copied = f", {done[2]:,} of them copied" if done and done[2] else ""
    return watch.phase + (f" (functional pass: {done[0]:,} commands{copied} in "
                          f"{done[1]:.1f} s)" if done else "")


def _every(stop, first: float, seconds: float, do) -> None:
    """Call `do` after `first` seconds, then every `seconds`, until `stop` is set."""
    wait = first
    while not stop.wait(wait):
        do()
        wait = seconds


def echo_rich(*renderables) -> None:
    """Print Rich renderables: as they are on a terminal; piped, without the padding Rich
    puts at the end of lines (so `grep`, `diff` and files see clean text). Every table is
    fitted to the terminal's width without breaking a number or a name in a cell, or shown
    in its long form where it cannot be (`report.fit`). Strings are not Rich markup (names,
    paths and values come from the user's files): style goes in `Text` or a style
    argument."""
    import sys

    from rich.console import Console

    from kernbench_cli.report.fit import fitted

    console = Console(markup=False)  # a cell's text is text: a file's "[/b]" is no tag
    renderables = [fitted(item, console, console.width) for item in renderables]
    if console.is_terminal:
        console.print(*renderables, sep="\n")
        return
    with console.capture() as capture:
        console.print(*renderables, sep="\n")
    sys.stdout.write("".join(line.rstrip() + "\n" for line in capture.get().splitlines()))


def parse_int(text: str, what: str) -> int:
    """An integer as `-p` reads one (`config.units.read_integer`: decimal, or 0x, 0o, 0b,
    single ``_`` between digits); AddressError names `what` and the text as typed."""
    from kernbench_cli.config.units import read_integer

    clean = text.strip()
    try:
        value = read_integer(clean) if len(clean) <= 1_000_000 else None
    except ValueError:
        value = None
    except OverflowError:  # more decimal digits than Python converts
        value = -1 if clean.startswith("-") else 1 << 64
    if value is None:
        raise AddressError(f"{what} {clip(text)} is not a number (hex 0x…, or decimal)")
    if value < 0:
        raise AddressError(f"{what} {clip(text)} is negative")
    if value >> 64:  # wider than any field: said without printing 10^5 digits
        shown = clean if len(clean) <= 40 else f"{clean[:24]}…{clean[-8:]} ({len(clean):,} " \
            "characters)"
        raise AddressError(f"{what} {shown} is too large (more than 64 bits)")
    return value


def plain_help(command) -> None:
    """Help texts shown as written: Typer reads them as Rich markup, which takes
    ``kernbench[plot]`` for a style tag and prints ``kernbench``. Escapes the markup of the
    help of `command`, its parameters and every command below it (once)."""
    from rich.markup import escape

    if getattr(command, "_plain_help", False):
        return
    command._plain_help = True
    for attr in ("help", "short_help", "epilog"):
        if getattr(command, attr, None):
            setattr(command, attr, escape(getattr(command, attr)))
    for param in command.params:
        if getattr(param, "help", None):
            param.help = escape(param.help)
    for sub in getattr(command, "commands", {}).values():
        plain_help(sub)


def plain_metavars() -> None:
    """Help in the usual Unix form: ``--seed INT``, ``--save PATH``, ``KERNEL``.

    Recent Typer labels options ``<int>``, flags ``<bool>`` and a required
    argument ``{kernel}``; this puts back what users of other tools read
    (a flag shows no value; an argument shows its upper-case name). An
    option's own ``metavar`` (``KEY=VALUE``) is kept. Older Typer (real click)
    needs none of it and is left alone.
    """
    from typer import core

    param = getattr(core, "_TyperParameter", None)
    if param is None or not hasattr(param, "display_type") or getattr(param, "_plain", False):
        return
    typed = param.display_type
    labels = {"int": "INT", "integer": "INT", "float": "NUMBER", "str": "TEXT", "text": "TEXT",
              "path": "PATH", "file": "PATH", "directory": "DIR"}

    def display_type(self, ctx):
        if getattr(self, "is_flag", False):
            return None
        if isinstance(self, core.TyperArgument):
            return None  # its name column says it already
        label = typed(self, ctx).strip("<>")
        if label.startswith("list[") and label.endswith("]"):
            label = label[5:-1]
        return labels.get(label.lower(), label.upper())

    def usage_name(self) -> str:
        name = self.display_name_raw.upper()
        name = name if self.required else f"[{name}]"
        return name + ("..." if self.nargs != 1 else "")

    param.display_type = display_type
    if hasattr(core.TyperArgument, "_usage_display_name"):
        core.TyperArgument._usage_display_name = usage_name
    if hasattr(core.TyperArgument, "_rich_display_name"):
        core.TyperArgument._rich_display_name = lambda self: self.display_name_raw.upper()
    param._plain = True
