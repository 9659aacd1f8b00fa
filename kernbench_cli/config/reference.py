"""docs/configuration.md, rendered from the `config.schema` declarations.

`python -m kernbench_cli.config.reference > docs/configuration.md` rewrites
it; a test fails when the file and the schema disagree.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from kernbench_cli.config.schema import KINDS, REQUIRED, CostTable, Topology

_INTRO = """\
# kernbench configuration reference

Generated from `kernbench_cli/config/schema.py` by
`python -m kernbench_cli.config.reference`; do not edit by hand.

A **topology** file (`topologies/*.toml`) describes one system; the **cost
table** it names (`costs = "…"`, relative to the topology file, or
`--costs FILE`) holds the issue costs of
[ADR-0064](decisions.md#adr-0064-issue-costs) (the design records cited are
summarised in [decisions.md](decisions.md)). Every quantity is a string
with a unit (`"1.5GHz"`, `"64KiB"`, `"30ns"`, `"51.2GB/s"`); times are kept
as integer picoseconds. Unknown keys are errors (with a did-you-mean), and
every error names the file and the key path. Keys may be left out and take
the default shown, except the `[system]` keys, which are required.

Defaults describe an HBM3-class near-memory design; the *source* column says
where each number comes from. Absolute latencies are only as good as these
numbers: calibrate them before quoting results as predictions.
"""

_PE_WINDOW_NOTE = """\
The `[pe.resources]` ranges answer
[ADR-0031](decisions.md#adr-0031-physaddr-pe-resource-extension)'s open D2. Each is
`{ start = 0x…, size = "…" }`, an offset inside one PE's 1 GiB resource
window (`pe_offset`, the 30 bits `ext:sub_offset` of a PE-unit PhysAddr).
Starts and sizes are multiples of 4 KiB, ranges may not overlap or leave the
window, the TCM range must hold `pe.tcm.size` and the IPCQ range
`4 x pe.ipcq.slots x pe.ipcq.slot_size`. Gaps are reserved: addresses there
(or past the used part of a range) neither encode nor decode.
"""


def _default_text(meta: dict[str, Any]) -> str:
    default = meta.get("default", REQUIRED)
    if default is REQUIRED:
        return "**required**"
    if isinstance(default, dict):
        inner = ", ".join(f"{k} = {_toml(v)}" for k, v in default.items())
        return f"`{{ {inner} }}`"
    return f"`{_toml(default)}`"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, int) and value > 4096:
        return f"{value:#x}"
    return str(value)


def _rows(cls: type, where: str, out: list[str]) -> None:
    subsections, inline = [], {}
    for f in fields(cls):
        if f.metadata.get("internal"):
            continue
        path = f"{where}.{f.name}" if where else f.name
        sub = f.metadata.get("section")
        if sub is not None and "default" not in f.metadata:
            subsections.append((sub, path, f.metadata["doc"]))
            continue
        if sub is not None:
            inline.setdefault(sub, []).append(path)
        unit = "table" if sub is not None else KINDS[f.metadata["kind"]][1]
        doc = f.metadata["doc"].replace("|", "\\|")
        source = f.metadata.get("source", "").replace("|", "\\|")
        out.append(f"| `{path}` | {unit} | {_default_text(f.metadata)} | {doc} | {source} |")
    for sub, paths in inline.items():
        out.append("")
        out.append(f"Each of {', '.join(f'`{p}`' for p in paths)} is a table with these keys:")
        out.append("")
        out.append("| key | unit | meaning |")
        out.append("|---|---|---|")
        for f in fields(sub):
            out.append(f"| `{f.name}` | {KINDS[f.metadata['kind']][1]} | {f.metadata['doc']} |")
    for sub, path, doc in subsections:
        out.append("")
        out.append(f"### `[{path}]`: {doc}")
        out.append("")
        out.append("| key | unit | default | meaning | source |")
        out.append("|---|---|---|---|---|")
        _rows(sub, path, out)


def render() -> str:
    out = [_INTRO, "## Topology file", "", "| key | unit | default | meaning | source |",
           "|---|---|---|---|---|"]
    _rows(Topology, "", out)
    out += ["", _PE_WINDOW_NOTE, "## Cost table file", "",
            "| key | unit | default | meaning | source |", "|---|---|---|---|---|"]
    _rows(CostTable, "", out)
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    print(render(), end="")
