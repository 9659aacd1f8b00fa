"""`kernbench compare`: runs side by side."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from kernbench_cli.cli.common import Format, FormatOpt, JsonOpt, chosen_format, echo_rich


def compare(
    files: Annotated[list[Path], typer.Argument(
        help="`run --json` outputs, or sweep .jsonl files (a run per row).")],
    fmt: FormatOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Runs side by side, labelled by the settings that differ between them: latency, the
    kernel's own metrics, each engine's busy time and utilisation, verdicts, with the change
    against the first."""
    from kernbench_cli.api.comparison import compare as compare_runs

    fmt = chosen_format(fmt, as_json)
    comparison = compare_runs(*files)
    if fmt is Format.json:
        typer.echo(json.dumps(comparison.to_dict(), sort_keys=True, indent=2))
        return
    if fmt is Format.csv:
        from kernbench_cli.report.formats import csv_text

        keys, n = list(comparison.changed[0]), len(comparison.runs)
        typer.echo(csv_text(["run", *keys, "metric", "value", "delta_pct"], (
            [comparison.runs[i], *comparison.changed[i].values(), name, values[i],
             comparison.delta_pct[name][i]]
            for name, values in comparison.metrics.items() for i in range(n))), nl=False)
        return
    from kernbench_cli.report.compare import compare_table

    if fmt is Format.md:
        from kernbench_cli.report.formats import markdown

        typer.echo(markdown(compare_table(comparison.pairs(), list(comparison.changed))),
                   nl=False)
        return
    from rich.console import Console

    echo_rich(compare_table(comparison.pairs(), list(comparison.changed), Console().width))
