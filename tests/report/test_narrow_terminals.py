"""Output that reads on any terminal: at 60, 80 and 120 columns, no command that prints a
table splits a number or a name of a cell over two lines, and no line is wider than the
terminal.

Each command runs through the CLI with COLUMNS set; what it hands to Rich is captured on
the way (`Console.print`), and every word of every cell, header, tree label and text it
printed must appear whole in what came out (a split word leaves two pieces, a cut one an
ellipsis, neither of them the word).
"""

from __future__ import annotations

import json
import re

import pytest
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from tests.conftest import test_topology

WIDTHS = (60, 80, 120)
KERNELS = ("gqa_attention", "rmsnorm", "sharded_gemm", "softmax")
ONE = test_topology("one")


def words(renderable) -> list[str]:
    """The words (runs of non-space characters) of everything `renderable` shows."""
    if isinstance(renderable, str):
        return Text.from_markup(renderable).plain.split()
    if isinstance(renderable, Text):
        return renderable.plain.split()
    if isinstance(renderable, Group):
        return [w for item in renderable.renderables for w in words(item)]
    if isinstance(renderable, Tree):
        return words(renderable.label) + [w for c in renderable.children for w in words(c)]
    if isinstance(renderable, Table):
        return [w for column in renderable.columns
                for cell in (column.header, *column._cells) for w in words(cell)]
    return []


@pytest.fixture
def shown(cli, monkeypatch):
    """Run a command at a width: (its exit code, its output, the words Rich was given)."""
    given: list = []
    real = Console.print

    def record(self, *objects, **kwargs):
        given.extend(objects)
        return real(self, *objects, **kwargs)

    monkeypatch.setattr(Console, "print", record)

    def run(width: int, *args: str) -> tuple[int, str, str, list[str]]:
        monkeypatch.setenv("COLUMNS", str(width))
        given.clear()
        code, out, err = cli(*args)
        return code, out, err, [w for item in given for w in words(item)]

    return run


def assert_reads_well(width: int, output: str, given: list[str], log: str = "") -> None:
    """`output` (stdout) fits `width`, and every word of `given` is whole in it or in `log`
    (stderr: progress lines, not laid out to the width)."""
    wide = [line for line in output.splitlines() if len(line) > width]
    assert not wide, f"{len(wide)} lines wider than {width}: {wide[0]!r}"
    out = set(re.split(r"[\s\u2500-\u257f]+", output + log))
    broken = sorted({w for w in given if w not in out})
    assert not broken, f"at {width} columns these were split or cut: {broken[:8]}\n{output}"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A recording, two `run --json` outputs and a sweep's rows, made once."""
    from typer.testing import CliRunner

    from kernbench_cli.cli.app import app

    tmp = tmp_path_factory.mktemp("narrow")
    runner = CliRunner()

    def run(*args: str) -> str:
        done = runner.invoke(app, list(args))
        assert done.exit_code == 0, done.output
        return done.stdout

    run("run", "softmax", "-t", ONE, "--timing-only", "--record", str(tmp / "s.kbt"))
    for name, bandwidth in (("a", "x1"), ("b", "x2")):
        (tmp / f"{name}.json").write_text(run("run", "softmax", "-t", ONE, "--timing-only",
                                              "--json", "--set", f"hbm.bandwidth={bandwidth}"))
    run("sweep", "softmax", "-t", ONE, "--timing-only", "-j", "1", "--set",
        "hbm.bandwidth=x1,x2,x4", "--set", "costs.issue.*=x1,x0.5", "--out",
        str(tmp / "sweep.jsonl"))
    return tmp


def commands(files) -> list[tuple[str, ...]]:
    return [
        *(("run", k) for k in KERNELS),
        ("run", "gqa_attention", "-t", "sip", "--timing-only"),
        ("run", "softmax", "-t", ONE, "--per-pe", "--races"),
        ("run", "softmax", "-t", ONE, "--timing-only", "--sensitivity"),
        ("run", "rmsnorm", "--timing-only", "--critical-path", str(files / "path.jsonl")),
        ("replay", str(files / "s.kbt"), "--set", "hbm.latency=x2"),
        ("sweep", "softmax", "-t", ONE, "--timing-only", "-j", "1", "--set",
         "pe.math.lanes=16,32", "--set", "hbm.bandwidth=x1,x2"),
        ("compare", str(files / "a.json"), str(files / "b.json")),
        ("compare", str(files / "sweep.jsonl")),
        ("golden", "check", "--only", "softmax.default*", "--set", "hbm.bandwidth=x2"),
        *(("topology", "show", t) for t in ("default", "sip", "rack")),
        ("kernels",), *(("kernels", k) for k in KERNELS),
        ("decode", "0x1234"), ("decode", "0x7ffffffffffff"),
    ]


@pytest.mark.parametrize("width", WIDTHS)
def test_no_table_splits_a_number_or_a_name(shown, files, width):
    for args in commands(files):
        code, output, log, given = shown(width, *args)
        assert code in (0, 1, 3), (args, log[-2000:])  # 3: decode, not in the topology
        assert given or args[0] == "decode", f"{args}: nothing printed through Rich"
        try:
            assert_reads_well(width, output, given, log)
        except AssertionError as problem:
            raise AssertionError(f"kernbench {' '.join(args)}: {problem}") from None


def test_the_check_catches_a_split_number(shown):
    """The check itself: Rich left to narrow a table of long numbers splits them."""
    table = Table("engine", "ops")
    table.add_row("scheduler", "1,703,824")
    console = Console(width=16, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(table)
    text = console.export_text()
    with pytest.raises(AssertionError, match="split or cut"):
        assert_reads_well(16, text, words(table))


def test_json_output_is_unchanged_by_the_width(cli, monkeypatch, files):
    outputs = set()
    for width in WIDTHS:
        monkeypatch.setenv("COLUMNS", str(width))
        _, out, _ = cli("compare", str(files / "a.json"), str(files / "b.json"), "--json")
        outputs.add(out)
    assert len(outputs) == 1 and json.loads(outputs.pop())["runs"]


def test_a_kernels_long_words_are_not_run_through_richs_highlighter(cli, tmp_path,
                                                                       monkeypatch):
    """Fitting the summary to the terminal ran each cell through Rich's highlighter, which
    the table itself does not: a metric's or bound's "how" of 100,000 letters took minutes
    (its regular expressions backtrack over a long word). The cell is shown, cut to fit."""
    from rich.highlighter import ReprHighlighter

    def refuse(self, text):
        raise AssertionError(f"highlighted: {text.plain[:40]}")

    monkeypatch.setattr(ReprHighlighter, "highlight", refuse)
    path = tmp_path / "long.py"
    path.write_text("PARAMS = {}\n\ndef setup(host, p):\n    return {}\n\n"
                    "def kernel(tl):\n    tl.cycles(1000)\n\n"
                    "def metrics(topology, p, run):\n    return {'m': (1.0, 'a' * 100000)}\n\n"
                    "def bounds(topology, p):\n    return {'b': (1, 'a' * 100000)}\n\n"
                    "def reference(host, p):\n    return {}\n\n"
                    "def outputs(host, args, p):\n    return {}\n")
    code, out, err = cli("run", str(path), "-t", ONE)
    assert code == 0, err
    assert "m 1\n" in out and "b bound        1ps =" in out and "a" * 60 in out
