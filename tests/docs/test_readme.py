"""The README's set-up commands are the ones CI runs; every command the README and the
docs pages show prints what they show; the README stays one screenful that maps every docs
page, and every relative link in them resolves."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def readme_command(tag: str) -> str:
    text = (ROOT / "README.md").read_text()
    match = re.search(rf"<!-- readme:{tag} -->\n```sh\n(.+?)\n```", text)
    assert match, f"README has no <!-- readme:{tag} --> command block"
    return match.group(1)


def test_ci_runs_the_readme_commands_verbatim():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    for tag in ("main", "test"):
        assert readme_command(tag) in ci, f"the README's {tag} command is not a line of .ci/run"


def test_ci_checks_the_goldens_after_the_tests():
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line and not line.startswith(("#", "echo"))]
    golden = next(i for i, line in enumerate(ci)
                  if line.endswith(".venv/bin/kernbench golden check"))
    assert ci.index(readme_command("test")) < golden


# ------------------------------------------------------------ the commands the pages show

#: Shown commands not run here: the sweep examples of these pages take a minute (their rows
#: are the sweep tests' business).
NOT_RUN = {"docs/exploring.md": ("kernbench sweep ",), "docs/energy.md": ("kernbench sweep ",)}
#: Pages whose commands run in a fresh folder holding the page's files (a ```python block
#: right after ``<!-- file: NAME -->`` is file NAME): every command on them runs.
IN_A_FOLDER = ("docs/getting-started.md",)
#: Every page whose ``$ kernbench`` blocks are run.
PAGES = ("README.md", "docs/running.md", "docs/workloads.md", "docs/exploring.md",
         "docs/energy.md", "docs/model.md", "docs/kernels.md", *IN_A_FOLDER)
FILE = re.compile(r"<!-- file: (\S+) -->\n```python\n(.*?)```\n", re.DOTALL)


def page_files(text: str) -> dict[str, str]:
    """{name: text} of the files a page has the reader save."""
    return {m.group(1): m.group(2) for m in FILE.finditer(text)}


def shown_commands(text: str) -> list[tuple[str, list[str]]]:
    """(command, the output shown under it) for every ``$ kernbench …`` in a code block."""
    shown, blocks, block = [], [], None
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            if block is None:
                block = []
            else:
                blocks.append(block)
                block = None
        elif block is not None:
            block.append(line)
    for lines in blocks:
        i = 0
        while i < len(lines):
            if not lines[i].startswith("$ kernbench"):
                i += 1
                continue
            command = lines[i][2:]
            while command.endswith("\\"):
                i += 1
                command = command[:-1] + lines[i].strip()
            i += 1
            output = []
            while i < len(lines) and not lines[i].startswith("$ "):
                output.append(lines[i])
                i += 1
            while output and not output[-1].strip():
                output.pop()
            shown.append((command, output))
    return shown


def _same(shown: str, got: str) -> bool:
    if shown.startswith("simulated "):  # wall-clock time: only the command count
        return shown.split(" in ")[0] == got.split(" in ")[0]
    return shown == got


def _matches(shown: list[str], got: list[str]) -> bool:
    """`shown` is `got`, where a line "…" stands for any lines, and the wall-clock part of
    the `simulated` line (after " in ") is not compared."""
    if not shown:
        return not got
    if shown[0] == "…":
        return any(_matches(shown[1:], got[k:]) for k in range(len(got) + 1))
    return bool(got) and _same(shown[0], got[0]) and _matches(shown[1:], got[1:])


@pytest.mark.parametrize(("doc", "command", "output"), [
    pytest.param(doc, c, o, id=f"{doc}: {c[:60]}") for doc in PAGES
    for c, o in shown_commands((ROOT / doc).read_text())
    if not c.startswith(NOT_RUN.get(doc, ()))])
def test_the_readme_shows_what_the_cli_prints(cli, monkeypatch, tmp_path, doc, command,
                                              output):
    monkeypatch.setenv("COLUMNS", "80")
    if doc in IN_A_FOLDER:
        monkeypatch.chdir(tmp_path)
        for name, text in page_files((ROOT / doc).read_text()).items():
            (tmp_path / name).write_text(text)
    _, out, err = cli(*shlex.split(command)[1:])
    got = (out + err).splitlines()
    assert _matches(output, got), "\n".join(["shown:", *output, "printed:", *got])


def test_getting_started_runs_all_it_shows_and_the_readme_leads_there():
    """Each step of the page is a command the test above runs (none left out), its kernel
    is a file the page has the reader save, and the README points at the page before its
    first section."""
    text = (ROOT / "docs/getting-started.md").read_text()
    commands = [c.split()[1] for c, _ in shown_commands(text)]
    assert {"run", "sweep", "--version"} <= set(commands)
    assert any("--set" in c for c, _ in shown_commands(text))
    assert any("--plot" in c for c, _ in shown_commands(text))
    assert list(page_files(text)) == ["scale.py"]
    assert any(c.startswith("kernbench run scale.py") for c, _ in shown_commands(text))
    readme = (ROOT / "README.md").read_text()
    assert "(docs/getting-started.md)" in readme[:readme.index("\n## ")]


def test_every_json_key_is_documented(cli):
    import json

    _, out, _ = cli("run", "gqa_attention", "--json", "--per-pe", "--races")
    obj = json.loads(out)
    named = ("engines", "params", "by_engine", "by_cause", "resource_waits", "bounds_ps", "metrics",
             "what_if_2x_faster_saves_ps")  # keyed by names, not fixed keys
    keys = set()

    def walk(value, parent: str) -> None:
        if isinstance(value, dict):
            for key, sub in value.items():
                if parent not in named:
                    keys.add(key)
                walk(sub, "" if parent in named else key)
        elif isinstance(value, list):
            for sub in value:
                walk(sub, parent)

    walk(obj, "")
    text = (ROOT / "docs" / "running.md").read_text()
    table = text[text.index("## The `--json` object"):text.index("## The timeline")]
    missing = sorted(k for k in keys if f"`{k}" not in table and f"{k}`" not in table
                     and f" {k}," not in table)
    assert not missing, f"docs/running.md's --json table misses {missing}"


# ------------------------------------------------------------ the README and its map of the docs

README_LINES = 300
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def doc_pages() -> list[Path]:
    return sorted((ROOT / "docs").glob("*.md"))


def anchors(text: str) -> set[str]:
    """GitHub's anchor for every heading: lower case, punctuation but `-` and `_` dropped,
    each space a `-`."""
    found = set()
    for line in text.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def test_the_readme_is_one_screenful():
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_LINES, f"README.md has {lines} lines, more than {README_LINES}"


def test_the_readme_links_every_docs_page():
    readme = (ROOT / "README.md").read_text()
    linked = {m.group(1) for m in LINK.finditer(readme) if m.group(1)}
    missing = [p.name for p in doc_pages() if f"docs/{p.name}" not in linked]
    assert not missing, f"README.md does not link {missing}"


@pytest.mark.parametrize("page", ["README.md", *(f"docs/{p.name}" for p in doc_pages())])
def test_every_relative_link_resolves(page):
    """Each relative link (and image) names a file that exists, and a `#anchor` a heading
    of the page it points at."""
    source = ROOT / page
    broken = []
    for match in LINK.finditer(source.read_text()):
        target = match.group(1) or match.group(2)
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (source.parent / path).resolve() if path else source
        if not file.exists() or (anchor and anchor not in anchors(file.read_text())):
            broken.append(target)
    assert not broken, f"{page}: links that do not resolve: {broken}"
