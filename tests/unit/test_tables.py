"""The commands' two-column tables (unit tier): ``cardstream replay``'s figures and
``cardstream demo``'s results, each whole at 80 columns (:mod:`streams.tables`)."""

from __future__ import annotations

import io
from typing import Any


def _rows_at_80(table: Any, header: tuple[str, str]) -> tuple[list[tuple[str, str]], list[str]]:
    """``table`` rendered as an 80-column terminal shows it: its (name, value) rows and its
    lines, after checking that no line is wider than 80 and that the header is ``header`` on
    one line."""
    from rich.console import Console

    console = Console(file=io.StringIO(), width=80, record=True, color_system=None)
    console.print(table)
    lines = console.export_text().splitlines()
    assert lines and max(map(len, lines)) <= 80, "\n".join(lines)
    top = next(i for i, x in enumerate(lines) if x.lstrip().startswith("┏"))
    assert lines[top + 2].lstrip().startswith("┡"), "\n".join(lines)  # the header: one line
    assert lines[top + 1].split() == ["┃", header[0], "┃", header[1], "┃"]
    rows = [x.strip("│ ").split("│") for x in lines if x.lstrip().startswith("│")]
    return [(a.strip(), b.strip()) for a, b in rows], lines


def test_the_comparison_table_reads_whole_at_80_columns() -> None:
    """``cardstream replay``'s table in an 80-column terminal: the header is one line, each
    figure's name and value share a line, none is cut, and no line is wider than 80. With a
    column per figure, a fresh user's trial saw every header wrapped over up to four lines."""
    from streams.cli.replay import comparison_table

    summary = {"results_topic": "cardstream.results.replay-20261207T203000Z", "events": 300,
               "replayed": 300, "compared": 297, "missing_original": 2, "stale_original": 1,
               "verdicts_changed": 4, "reasons_changed": 7, "quad_iou_mean": 0.9813,
               "quad_iou_min": 0.412, "face_iou_mean": 0.99, "face_iou_min": None,
               "changed": [{"upload_id": "u1", "before": "accepted", "after": "rejected"}]}
    rows, _ = _rows_at_80(comparison_table(summary), ("figure", "value"))
    assert rows == [
        ("replayed", "300"), ("compared", "297"), ("missing original", "2"),
        ("stale original", "1"), ("verdicts changed", "4"), ("reasons changed", "7"),
        ("quad IoU mean", "0.9813"), ("quad IoU min", "0.4120"), ("face IoU mean", "0.9900"),
        ("face IoU min", "-")]


def test_the_demo_table_reads_whole_at_80_columns() -> None:
    """The demo's table in an 80-column terminal: the header is one line, each field's name and
    value share a line (a section per upload, ``-`` for an empty value), none is cut, and no
    line is wider than 80. With a column per field (9), a fresh user's trial saw the headers
    wrapped ("uploa/d", "laten/cy ms") and every id and path folded over several lines."""
    import re

    from streams.demo import FIELDS, results_table

    uploads = [
        ("demo1765140000000-000003-e4b1f3a2", "passport_page.jpg", "card",
         "[green]accepted[/]", "", "passport 1250x880", "MRZ TD3 valid", "3104",
         "out/card/passport_page.jpg"),
        ("demo1765140000000-000006-c3d8a4b6", "no_card.jpg", "card", "[yellow]rejected[/]",
         "NO_CARD", "", "", "3512", ""),
        ("demo1765140000000-000007-19fe0c2d", "portrait_astronaut.jpg", "id_photo",
         "[green]accepted[/]", "", "one_inch 295x413", "one_inch compliant", "5620",
         "out/id_photo/portrait_astronaut.jpg"),
        ("demo1765140000000-000008-b6a7d3e8", "two_people.jpg", "id_photo",
         "[red]no result[/]", "", "", "", "", ""),
    ]
    rows, lines = _rows_at_80(results_table(uploads), ("field", "value"))
    plain = [[re.sub(r"\[/?[a-z]*\]", "", v) or "-" for v in u] for u in uploads]
    assert rows == [(f, v) for u in plain for f, v in zip(FIELDS, u, strict=True)], \
        "\n".join(lines)
    assert sum(x.lstrip().startswith("├") for x in lines) == len(uploads) - 1  # a section each
