"""The commands' terminal tables: one layout, two columns, a name and its value a row (rich),
for ``cardstream replay``'s figures and ``cardstream demo``'s results."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from rich.table import Table


def name_value_table(title: str, header: tuple[str, str],
                     sections: Iterable[Sequence[tuple[str, str]]],
                     justify: Literal["left", "right"] = "left") -> Table:
    """A table of two columns, ``header``'s name and value, one ``(name, value)`` pair a row,
    the rows in ``sections`` with a line between two (an empty section is left out).

    It reads whole in an 80-column terminal whatever the number of rows: a name stays on one
    line, and a value folds onto more lines only where it is wider than what the terminal
    leaves (a long path), never cut. A column per figure wrapped the headers over several lines
    at 80 columns ("uploa/d", "verdic/ts/change/d"). Values are rich markup (``[green]...[/]``).

    Args:
        title: above the table.
        header: the two columns' names.
        sections: each a sequence of ``(name, value)`` rows.
        justify: the values' alignment (``right`` for figures).
    """
    from rich.table import Table

    tab = Table(title=title)
    tab.add_column(header[0], no_wrap=True)
    tab.add_column(header[1], justify=justify, overflow="fold")
    rows = [list(s) for s in sections if s]
    for i, section in enumerate(rows):
        for j, (name, value) in enumerate(section):
            tab.add_row(name, value, end_section=j == len(section) - 1 and i < len(rows) - 1)
    return tab
