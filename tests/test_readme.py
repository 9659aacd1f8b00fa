"""The README's set-up commands are the ones CI runs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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
    assert ci.index(readme_command("test")) < ci.index(".venv/bin/kernbench golden check")
