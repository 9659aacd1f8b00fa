"""docs/api.md runs as a notebook would: every ```python block in order, in one namespace,
each printing exactly the ```text block shown under it (if one is). A block marked
``<!-- api:pandas -->`` needs pandas: it runs where pandas is installed, and elsewhere must
raise the ImportError that says how to get it."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "api.md"
#: a python block, its tag if any, and the text block of its output if one follows
BLOCK = re.compile(r"(<!-- api:(\w+) -->\n)?```python\n(.*?)```\n(?:\n```text\n(.*?)```\n)?",
                   re.DOTALL)


def blocks(text: str) -> list[tuple[str, str, str | None]]:
    """(tag, code, shown output or None) of every python block, in order."""
    return [(m.group(2) or "", m.group(3), m.group(4)) for m in BLOCK.finditer(text)]


def run_block(code: str, namespace: dict, n: int, doc: str = "docs/api.md") -> str:
    """What block `n` of `doc` prints, run in `namespace` (the notebook's state so far)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"{doc} block {n}", "exec"), namespace)
    return out.getvalue()


def test_every_block_runs_and_prints_what_is_shown(monkeypatch):
    monkeypatch.chdir(ROOT)
    found = blocks(DOC.read_text())
    assert len(found) >= 8, "docs/api.md lost its worked example"
    assert DOC.read_text().count("```python") == len(found), "a python block the test misses"
    try:
        import pandas  # noqa: F401
        have_pandas = True
    except ImportError:
        have_pandas = False
    namespace: dict = {}
    for n, (tag, code, shown) in enumerate(found):
        if tag == "pandas" and not have_pandas:
            from kernbench_cli.api.tables import PandasMissing

            with pytest.raises(PandasMissing, match="pip install pandas"):
                run_block(code, namespace, n)
            continue
        printed = run_block(code, namespace, n)
        if shown is not None:
            assert printed == shown, f"docs/api.md block {n} printed:\n{printed}"


def test_the_example_covers_the_api():
    """The worked example uses each public call it promises (run, fields, sweep into a table,
    compare, replay under a --set change, an error)."""
    code = "".join(c for _, c, _ in blocks(DOC.read_text()))
    for call in ("kb.run(", "kb.sweep(", "kb.compare(", "kb.replay(", ".table()",
                 ".to_pandas()", ".to_dict()", "except kb.KernbenchError"):
        assert call in code, f"docs/api.md shows no {call}"


def test_the_readme_python_block_runs():
    """The README's short example (From Python) is real code."""
    text = (ROOT / "README.md").read_text()
    start = text.index("## From Python")
    section = text[start:text.index("\n## ", start)]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    namespace: dict = {}
    run_block(code, namespace, 0)
    assert namespace["result"].overrides == ("pe.gemm.rows=8",)


def test_getting_started_runs_as_a_notebook(monkeypatch, tmp_path):
    """docs/getting-started.md's Python, in order, in a fresh folder holding the kernel file
    the page has the reader save: each block prints exactly the text shown under it."""
    from .test_readme import page_files

    doc = ROOT / "docs" / "getting-started.md"
    text = doc.read_text()
    files = page_files(text)
    monkeypatch.chdir(tmp_path)
    for name, code in files.items():
        (tmp_path / name).write_text(code)
    found = [b for b in blocks(text) if b[1] not in files.values()]
    assert len(found) >= 2 and text.count("```python") == len(found) + len(files)
    namespace: dict = {}
    for n, (_, code, shown) in enumerate(found):
        printed = run_block(code, namespace, n, "docs/getting-started.md")
        assert shown is not None and printed == shown, \
            f"docs/getting-started.md block {n} printed:\n{printed}"


def test_the_raises_table_names_every_call_and_only_real_exceptions():
    """docs/api.md's table of what each call raises: a row per public call, and every
    exception it names is a `kb` name and a `KernbenchError`."""
    import kernbench_cli as kb

    text = DOC.read_text().split("<!-- api:raises -->", 1)[1]
    rows = re.findall(r"^\| `kb\.([\w.]+)` \| (.*) \|$", text.split("\n\n", 1)[0], re.M)
    calls = {call for call, _ in rows}
    assert calls == {"run", "replay", "sweep", "compare", "sensitivity", "load_kernel",
                     "load_topology", "load_trace", "Result.from_dict",
                     "Bounds.from_dict"}
    for call, raises in rows:
        names = set(re.findall(r"`(\w+Error|KernbenchError|GoldenMismatch)`", raises))
        assert names, call
        for name in names:
            assert issubclass(getattr(kb, name), kb.KernbenchError), (call, name)
