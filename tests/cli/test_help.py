"""Help texts print as written: Typer reads them as Rich markup, where ``kernbench[plot]``
is a style tag that vanishes (`sweep --help` said "needs kernbench")."""

from __future__ import annotations

import os
import re

import pytest
import typer

from kernbench_cli.cli.app import app


def _paths(command, path=()):
    """(command path, click command) of every command and group below `command`."""
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from _paths(sub, (*path, name))


def _flat(text: str) -> str:
    """`text` without the help boxes' borders, its spaces collapsed (help wraps)."""
    return " ".join(re.sub(r"[\u2500-\u257f]", " ", text).split())


def test_every_help_text_is_shown_as_written(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    bracketed = 0
    for path, command in _paths(typer.main.get_command(app)):
        _, out, _ = cli(*path, "--help")
        shown = _flat(out)
        texts = [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]
        for text in texts:
            for piece in re.findall(r"\S*\[[^\]\s]*\]\S*", text):
                bracketed += 1
                assert _flat(piece) in shown, (path, piece)
    assert bracketed >= 2  # kernbench[plot], kernbench[dask] at least


@pytest.mark.parametrize(("name", "value", "width"), [
    ("COLUMNS", "0", 40), ("COLUMNS", "1", 40), ("COLUMNS", "10000000000", 1000),
    ("TERMINAL_WIDTH", "10000000000", 1000), ("COLUMNS", "\u00b2", 80)])
def test_a_width_out_of_reason_is_taken_within_it(kernbench, name, value, width):
    """COLUMNS=0 printed an empty report with exit 0, COLUMNS=1 one character a line (no
    latency to read), and a width of 10^10 filled the machine's memory with the help's
    padding: widths are taken between 40 and 1,000 columns."""
    env = {**os.environ, name: value}
    done = kernbench.run("run", "rmsnorm", "--timing-only", env=env)
    assert done.returncode == 0 and re.search(r"^latency +\d", done.stdout, re.M)
    assert max(map(len, done.stdout.splitlines())) <= width
    done = kernbench.run("--help", env=env)
    assert done.returncode == 0 and "Usage" in done.stdout
    assert max(map(len, done.stdout.splitlines())) <= width


def test_every_help_is_the_same_under_python_oo(kernbench):
    """`python -OO` drops docstrings, which are the commands' descriptions: `kernbench
    --help` listed the commands bare, and each command's help had no first line. They are
    read from the source then (as kernels' descriptions are)."""
    env = {**os.environ, "COLUMNS": "120"}
    for path in ((), ("run",), ("golden",), ("topology", "show")):  # lists, and a command's
        plain = kernbench.run(*path, "--help", env=env)
        optimised = kernbench.run(*path, "--help", env={**env, "PYTHONOPTIMIZE": "2"})
        assert plain.returncode == optimised.returncode == 0, path
        assert optimised.stdout == plain.stdout, path
