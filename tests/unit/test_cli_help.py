"""``cardstream ... --help``: docstrings are shown reflowed, without reST markup."""

from __future__ import annotations

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from streams.cli import app, terminal_help


def test_terminal_help_joins_hard_breaks_keeps_paragraphs_and_drops_literals():
    doc = """First line.

        Per image: ``{"file",
        "status"}`` in source
        px.

        Exit status 1.
        """
    assert (terminal_help(doc)
            == 'First line.\n\nPer image: {"file", "status"} in source px.\n\nExit status 1.')


def _commands(cmd, path=()):
    sub = getattr(cmd, "commands", None)
    if sub is None:
        yield path, cmd
        return
    for name, c in sub.items():
        yield from _commands(c, (*path, name))


COMMANDS = [p for p, _ in _commands(get_command(app))]


def test_every_command_is_reflowed():
    assert len(COMMANDS) >= 15  # card, idphoto, worker, ..., topics create/describe/delete
    for path, cmd in _commands(get_command(app)):
        for paragraph in (cmd.help or "").split("\n\n"):
            assert "\n" not in paragraph, path
        assert "``" not in (cmd.help or ""), path


@pytest.mark.parametrize("path", [("card",), ("eval", "card"), ("idphoto",), ("eval", "mrz"),
                                  ("eval", "quality")], ids=" ".join)
def test_help_wraps_at_the_terminal_width(path):
    r = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "``" not in r.output and "…" not in r.output
    prose = [line for line in lines if line.startswith(" ") and not line.startswith(" Usage")]
    assert len(prose) > 3
    # a description line ends early only where the next word would not fit (or a paragraph ends)
    for line, nxt in zip(prose, prose[1:], strict=False):
        if line.strip() and nxt.strip():
            assert len(line.rstrip()) + 1 + len(nxt.split()[0]) > 78, (line, nxt)


def test_no_option_points_below_the_options():
    """typer prints the command's description above its options: an option's help that sends
    the reader "below" for a setting points at nothing (``card --profile`` did)."""
    for path, cmd in _commands(get_command(app)):
        for p in cmd.params:
            assert "below" not in (getattr(p, "help", None) or ""), (path, p.name)
