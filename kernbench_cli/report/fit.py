"""Tables that fit a terminal without splitting a number or a name.

Rich, given a table wider than the terminal, narrows its columns until it
fits, and a cell then wraps inside a word: `1,703,8` over `24`, `schedul`
over `er`. The rule here: a word of a cell (a run of characters without a
space) is never broken. A column whose cells are single words (numbers,
names) keeps its widest cell; a column of text may wrap down to its longest
word. When the table then fits, the columns get their widths here (Rich
would not respect those minimums). When it does not, the report may leave
optional columns out (`drop_to_fit`), and as the last resort the table is
shown in a long form: one line per row, each cell after its column's name,
wrapping between cells, never inside one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.console import Console, Group
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text


def _cells(table: Table, console: Console, index: int) -> list[Text]:
    """Column `index`'s header and cells as Text, markup read as Rich would, highlighted as
    the table is (Rich's highlighter took minutes over a cell of 100,000 letters)."""
    column = table.columns[index]
    items = [column.header, *column._cells]
    return [item if isinstance(item, Text) else
            console.render_str(str(item), highlight=table.highlight) for item in items]


def _ranges(table: Table, console: Console) -> list[tuple[int, int]]:
    """(narrowest without breaking a word, natural) width of each column, padding included."""
    options = console.options.update_width(10_000)
    out = []
    for index, column in enumerate(table.columns):
        pad = table._get_padding_width(index)
        natural = lowest = 0
        for text in _cells(table, console, index):
            widest = Measurement.get(console, options, text)
            natural = max(natural, widest.maximum)
            lowest = max(lowest, widest.maximum if column.no_wrap else widest.minimum)
        if column.max_width is not None:
            natural = max(lowest, min(natural, column.max_width))
        out.append((lowest + pad, natural + pad))
    return out


def one_line(text: str) -> str:
    """A cell's or header's lines as one: joined by a space ("vs" over "first": "vs first"),
    or by nothing after a line that ends in a dot ("pe.gemm." over "rows": "pe.gemm.rows")."""
    out = ""
    for line in text.split("\n"):
        line = " ".join(line.split())
        out += ("" if not out or out.endswith(".") else " ") + line
    return out


def fits(table: Table, console: Console, width: int) -> bool:
    """Whether `table` fits `width` columns with no word of a cell broken."""
    return sum(lo for lo, _ in _ranges(table, console)) + table._extra_width <= width


def fit(table: Table, console: Console, width: int) -> bool:
    """Give `table`'s columns widths that fit `width` without breaking a word, narrowing the
    widest first as Rich does, but none below its narrowest. False (the table untouched)
    when even the narrowest widths do not fit."""
    ranges = _ranges(table, console)
    room = width - table._extra_width
    if sum(hi for _, hi in ranges) <= room:
        return True
    if sum(lo for lo, _ in ranges) > room:
        return False
    cap = max(hi for _, hi in ranges)  # the widest a column may be: lowered until it fits
    while sum(min(hi, max(lo, cap)) for lo, hi in ranges) > room:
        cap -= 1
    widths = [min(hi, max(lo, cap)) for lo, hi in ranges]
    for index, (_, hi) in enumerate(ranges):  # what is left: a cell more, left to right
        if sum(widths) < room and widths[index] < hi:
            widths[index] += 1
    for index, (column, w) in enumerate(zip(table.columns, widths, strict=True)):
        column.width = w - table._get_padding_width(index)
    return True


def long_form(table: Table, console: Console) -> Group:
    """`table` as one line per row: the row's first cell, then each other cell after its
    column's name ("max 1.02us; util 47.6%"), wrapping only between cells."""
    heads = [one_line(_cells(table, console, i)[0].plain)
             for i in range(len(table.columns))]
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column()
    for row in range(table.row_count):
        cells = [" ".join(_cells(table, console, i)[1 + row].plain.split())
                 for i in range(len(table.columns))]
        rest = Text("; ").join(Text(f"{head} {cell}".strip())
                               for head, cell in zip(heads[1:], cells[1:], strict=True)
                               if cell)
        grid.add_row(cells[0], rest)
    parts = [*([Text.from_markup(str(table.title))] if table.title else []), grid,
             *([Text.from_markup(str(table.caption), style="dim")] if table.caption else [])]
    return Group(*parts)


def fitted(renderable, console: Console, width: int):
    """`renderable` with every table in it fitted to `width` (Groups are walked), a table
    that cannot fit in its long form."""
    if isinstance(renderable, Group):
        return Group(*(fitted(item, console, width) for item in renderable.renderables))
    if isinstance(renderable, Table) and not fit(renderable, console, width):
        return long_form(renderable, console)
    return renderable


def drop_to_fit(build: Callable[[Sequence[str]], Table], optional: Sequence[str],
                width: int | None) -> tuple[Table, list[str]]:
    """`build(dropped)` with the columns of `optional` left out, in order, until the table
    fits `width` (or none are left to leave out); the table and what was left out."""
    dropped: list[str] = []
    table = build(dropped)
    console = Console(width=10_000, markup=False)
    for name in optional:
        if width is None or fits(table, console, width):
            break
        dropped.append(name)
        table = build(dropped)
    return table, dropped


def dropped_caption(dropped: Sequence[str], width: int) -> str:
    """The caption of a table that left the columns `dropped` out to fit `width`."""
    names = [n.replace("\n", " ") for n in dropped]
    listed = ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]
    return f"{listed} left out to fit {width} columns (--json has every field)"
