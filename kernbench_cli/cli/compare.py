"""`kernbench compare`: runs side by side."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from kernbench_cli.cli.common import JsonOpt, echo_rich


def compare(
    files: Annotated[list[Path], typer.Argument(
        help="`run --json` outputs, or sweep .jsonl files (a run per row).")],
    as_json: JsonOpt = False,
) -> None:
    """Runs side by side: latency, each engine's busy time and utilisation, verdicts, with the
    change against the first."""
    from kernbench_cli.api.comparison import compare as compare_runs

    comparison = compare_runs(*files)
    if as_json:
        typer.echo(json.dumps(comparison.to_dict(), sort_keys=True, indent=2))
        return
    from kernbench_cli.report.compare import compare_table

    echo_rich(compare_table(comparison.pairs()))
