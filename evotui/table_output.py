"""Tables printed by the headless commands (``tasks``, ``report``, ``memory list``, ...).

On a terminal a table is drawn with rich, fitted to its width. When stdout is not a terminal (a pipe,
a file, another program) it is plain TSV: a header line, then one line per row, every value whole,
never cut to a width that belongs to no one. ``--json`` stays the way to get typed data.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from rich.console import Console, JustifyMethod


@dataclass(frozen=True)
class Column:
    """One column: its header, how it aligns on a terminal, and whether it may be cut there (the
    widest free-text column, e.g. a title) or folds onto more lines (ids, numbers: never cut)."""

    name: str
    justify: JustifyMethod = "left"
    cut: bool = False
    min_width: int | None = None


def to_terminal(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (stdout by default) is a terminal a person reads."""
    stream = stream or sys.stdout
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def tsv_cell(value: Any) -> str:
    """A value on one TSV field: tabs and line breaks become spaces, nothing is cut."""
    text = "" if value is None else str(value)
    return " ".join(text.replace("\t", " ").splitlines()) if ("\t" in text or "\n" in text or "\r" in text) else text


def print_table(columns: Iterable[Column | str], rows: Iterable[Iterable[Any]], *, title: str | None = None,
                stream: TextIO | None = None, console: Console | None = None) -> None:
    """Print ``rows`` under ``columns``: a rich table on a terminal, TSV otherwise.

    Cells are plain values (str, numbers); rich markup is not interpreted, so a task named
    ``[bold]`` prints as itself."""
    cols = [c if isinstance(c, Column) else Column(c) for c in columns]
    cells = [list(r) for r in rows]
    stream = stream or sys.stdout
    if console is None and not to_terminal(stream):
        stream.write("\t".join(c.name for c in cols) + "\n")
        for row in cells:
            stream.write("\t".join(tsv_cell(v) for v in row) + "\n")
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console(file=stream)
    table = Table(box=None, header_style="bold", title=title, padding=(0, 1), pad_edge=False)
    # A column that may be cut gets what the others leave (they keep their natural width), so on a
    # narrow terminal the title is shortened, never the ids.
    natural = [max([len(c.name), *(len(str(r[i])) for r in cells if i < len(r))]) + 1 for i, c in enumerate(cols)]
    cut = [i for i, c in enumerate(cols) if c.cut]
    room = console.width - sum(w for i, w in enumerate(natural) if i not in cut)
    for c in cols:
        limit = max(c.min_width or 10, room // max(1, len(cut))) if c.cut else None
        table.add_column(c.name, justify=c.justify, min_width=c.min_width, max_width=limit,
                         overflow="ellipsis" if c.cut else "fold", no_wrap=c.cut)
    for row in cells:
        table.add_row(*(Text("" if v is None else str(v)) for v in row))
    console.print(table)
