"""The other shapes of a printed table (`--format`): csv for a spreadsheet or pandas, md
for a document, json for a program; `table` is the Rich table itself."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from kernbench_cli.report.fit import one_line


def csv_text(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """`header` and `rows` as CSV (a None is an empty field)."""
    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(["" if v is None else v for v in row] for row in rows)
    return out.getvalue()


def markdown(table: Table) -> str:
    """`table` as a Markdown table: its title as a paragraph above, each cell's text on one
    line (a header's lines joined by spaces; `|` escaped), numbers right-aligned as in the
    table, its caption below."""
    console = Console(width=10_000, markup=False)

    def plain(item) -> str:
        text = item.plain if hasattr(item, "plain") else console.render_str(str(item)).plain
        return one_line(text).replace("|", "\\|")

    heads = [plain(column.header) for column in table.columns]
    align = [{"right": "---:", "center": ":---:"}.get(column.justify, "---")
             for column in table.columns]
    lines = [*([plain(table.title), ""] if table.title else []),
             "| " + " | ".join(heads) + " |", "|" + "|".join(align) + "|"]
    for row in range(table.row_count):
        lines.append("| " + " | ".join(plain(column._cells[row]) for column in table.columns)
                     + " |")
    if table.caption:
        lines += ["", plain(table.caption)]
    return "\n".join(lines) + "\n"
