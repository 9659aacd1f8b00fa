"""`kernbench plot`: a finished sweep's figure, from its `.jsonl`, without running it again."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernbench_cli.cli.common import output_path
from kernbench_cli.cli.sweep import XOpt, YOpt


def plot(
    results: Annotated[Path, typer.Argument(
        help="A sweep's .jsonl results file (sweep --out FILE.jsonl).", metavar="RESULTS")],
    x: XOpt = None,
    y: YOpt = "latency",
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", parser=output_path,
        help="The figure: .png, .svg or .pdf (default: RESULTS as .png).")]
    = None,
) -> None:
    """Draw a finished sweep as `sweep --plot` does: the metric --y against the axis --x, and
    each point's engines. Needs kernbench[plot]."""
    from kernbench_cli.api.sweeps import load_sweep
    from kernbench_cli.report.plot import check_figure, chosen_x

    figure = out if out is not None else results.with_suffix(".png")
    check_figure(figure, "--out")  # before the file is read
    swept = load_sweep(results)
    swept.plot(figure, x, y, option="--out")
    typer.echo(f"{figure}: {y} against {chosen_x(swept.to_dicts(), x)}, "
               f"{len(swept.points)} points")
