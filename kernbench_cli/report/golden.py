"""Golden differences as a Rich table: each case, then its fields that moved."""

from __future__ import annotations

from itertools import groupby

from rich.table import Table
from rich.text import Text


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    text = str(value)
    if text.startswith("sha256:"):
        return text[7:15] + "…"  # enough to tell digests apart; the file has them whole
    if len(text) > 60:  # a hostile golden's field: the table stays readable
        return f"{text[:40]}… ({len(text):,} characters)"
    return text


def difference_table(differences) -> Table:
    table = Table(title=f"Golden differences ({len(differences)})")
    table.add_column("case / field", overflow="fold")
    table.add_column("old", justify="right")
    table.add_column("new", justify="right")
    table.add_column("delta %", justify="right")
    for case, rows in groupby(differences, key=lambda d: d.case):
        table.add_row(Text(case, style="bold"), "", "", "")
        for d in rows:
            pct = d.delta_pct
            table.add_row(f"  {d.field}", _cell(d.old), _cell(d.new),
                          "" if pct is None else f"{pct:+.2f}%")
    return table
