"""Runs side by side (`kernbench compare`): each metric, and its change against the first run.

A run is a `run --json` object, or a row of a sweep's `.jsonl` (its
`result`). Metrics: the latency, the kernel's own metrics (`metrics.NAME`,
every one any run states: `report.metrics`), each engine's mean busy time and
utilisation, the energy, the regions, the verdicts (bound by, verified,
physical invariants held).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from kernbench_cli.config.units import format_energy_aj, format_time_ps
from kernbench_cli.errors import KernbenchError
from kernbench_cli.fileio import may_be_json_object, parse_json, read_input
from kernbench_cli.report import metrics as kernel_metrics
from kernbench_cli.report.bounds import param_text
from kernbench_cli.report.fit import one_line
from kernbench_cli.report.run import recorded_text

#: Bytes of a results file worth reading.
MAX_RESULTS_BYTES = 2**32


def enough(runs: list) -> list:
    """`runs`, if there are at least two to compare."""
    if len(runs) < 2:
        raise KernbenchError(f"compare needs at least two runs; got {len(runs)}")
    return runs


def load_file(path: Path) -> list[tuple[str, dict[str, Any], dict[str, Any] | None]]:
    """(label, run --json object, the sweep point's axes or None) of every run in one file:
    one object, or a sweep's rows."""
    def json_first(head: bytes) -> None:  # before gigabytes of another file are read
        if not may_be_json_object(head):
            raise KernbenchError(f"{path}:1: not JSON: expected `run --json` output or a "
                                 "sweep's .jsonl rows")

    try:
        text = read_input(path, MAX_RESULTS_BYTES, "a results file", json_first).decode()
    except UnicodeDecodeError:
        raise KernbenchError(f"{path}: not text: expected `run --json` output or a "
                             "sweep's .jsonl rows") from None
    try:
        whole = parse_json(text, str(path))
    except (ValueError, RecursionError):
        whole = None
    if isinstance(whole, dict) and "latency_ps" in whole:
        return [(path.name, checked(whole, str(path)), None)]
    if whole is not None and "\n" in text.strip():  # JSON, of something else: say so
        raise KernbenchError(f"{path}: JSON, but not a run: expected `run --json` output "
                             "or a sweep's .jsonl rows (`--bounds-only` and `compare` "
                             "output are no runs)")
    runs = []
    for n, line in enumerate(text.splitlines(), 1):
        try:
            row = parse_json(line, f"{path}:{n}")
        except (ValueError, RecursionError):
            raise KernbenchError(f"{path}:{n}: not JSON: expected `run --json` output or a "
                                 "sweep's .jsonl rows") from None
        result = row.get("result") if isinstance(row, dict) else None
        if not isinstance(result, dict) or "latency_ps" not in result:
            raise KernbenchError(f"{path}:{n}: no run result here (a failed sweep point, "
                                 "or not kernbench output)")
        axes = row.get("axes") if isinstance(row.get("axes"), dict) else None
        shown = " ".join(f"{k}={v}" for k, v in (axes or {}).items())
        runs.append((f"{path.name}#{row.get('point', n - 1)} {shown}".rstrip(),
                     checked(result, f"{path}:{n}"), axes))
    return runs


def checked(run: dict[str, Any], where: str) -> dict[str, Any]:
    """`run` if it has the shape of a `run --json` object where `metrics` reads it."""
    def number(value: Any) -> bool:  # finite, and an integer within 64 bits
        if isinstance(value, bool):
            return False
        if isinstance(value, int):
            return -2**63 <= value < 2**63
        return isinstance(value, float) and math.isfinite(value)

    from kernbench_cli.report.run import schema_problem  # not at start-up: it imports sim

    engines, checks = run.get("engines", {}), run.get("checks", [])
    problem = None
    if not number(run["latency_ps"]) or run["latency_ps"] < 0:
        problem = "latency_ps is not a time"
    elif (schema := schema_problem(run)) is not None:
        problem = schema
    elif not isinstance(engines, dict) or not all(
            isinstance(e, dict) and number(e.get("busy_ps")) and number(e.get("utilization"))
            for e in engines.values()):
        problem = "engines is not an object of engines"
    elif not isinstance(run.get("bound", {}), dict):
        problem = "bound is not an object"
    elif not isinstance(checks, list) or not all(isinstance(c, dict) for c in checks):
        problem = "checks is not a list of objects"
    if problem:
        raise KernbenchError(f"{where}: not a `run --json` object: {problem}")
    return run


def metrics(runs: list[tuple[str, dict[str, Any]]]) -> dict[str, list[Any]]:
    """{metric: its value in each run (None where a run has no such engine)}."""
    out: dict[str, list[Any]] = {"latency_ps": [r["latency_ps"] for _, r in runs]}
    for name in kernel_metrics.names(r for _, r in runs):
        out[kernel_metrics.PREFIX + name] = [kernel_metrics.value(r, name) for _, r in runs]
    engines = sorted({name for _, r in runs for name in r.get("engines", {})})
    for name in engines:
        stats = [r.get("engines", {}).get(name) for _, r in runs]
        out[f"{name}.busy_ps"] = [s["busy_ps"] if s else None for s in stats]
        out[f"{name}.utilization"] = [s["utilization"] if s else None for s in stats]
    if any("energy_pj" in r for _, r in runs):
        out["energy_pj"] = [(r.get("energy_pj") or {}).get("total") for _, r in runs]
        out["average_power_w"] = [r.get("average_power_w") for _, r in runs]
    names = list(dict.fromkeys(g.get("name") for _, r in runs for g in r.get("regions", [])
                               if isinstance(g, dict)))
    for name in names:  # named regions: their time on the critical path
        out[f"region {name} path_ps"] = [
            next((g.get("path_ps") for g in r.get("regions", []) if isinstance(g, dict)
                  and g.get("name") == name), None) for _, r in runs]
    out["bound"] = [(r.get("bound") or {}).get("engine") for _, r in runs]
    out["verified"] = [r.get("verified") for _, r in runs]
    out["invariants_held"] = [
        sum(1 for c in r.get("checks", []) if c.get("kind") == "invariant" and c.get("passed"))
        for _, r in runs]
    return out


def deltas(values: list[Any]) -> list[float | None]:
    """Each value's change against the first, in percent (None where not numeric)."""
    first = values[0]
    out = []
    for v in values:
        numeric = isinstance(v, (int, float)) and not isinstance(v, bool)
        if not numeric or not isinstance(first, (int, float)) or isinstance(first, bool) \
                or first == 0:
            out.append(None)
        else:
            out.append(round((v - first) / first * 100, 3))
    return out


#: How the table names a metric (its key in `--json` and csv is the metric itself).
SHOWN = {"latency_ps": "latency", "energy_pj": "energy", "average_power_w": "average power",
         "bound": "bound by", "invariants_held": "invariants held"}


def shown_name(metric: str) -> str:
    """"latency_ps" -> "latency", "dma.busy_ps" -> "dma busy", "dma.utilization" -> "dma
    util": what the table calls a metric (its values carry their units)."""
    if metric.startswith("region "):
        return metric.removesuffix(" path_ps")
    engine, _, what = metric.partition(".")
    if what:
        return f"{engine} {'busy' if what == 'busy_ps' else 'util'}"
    return SHOWN.get(metric, metric)


def settings(run: dict[str, Any], axes: dict[str, Any] | None = None) -> dict[str, str]:
    """What a run was run with, each as text: kernel, topology, cost table, the digests of
    the kernel file and of the two as resolved, a replay's recorded topology, seed, timing
    only, then a sweep point's axes as given, or else each parameter (a file the kernel
    read with its digest: an edited config.json differs) and `--set` item."""
    out = {key: str(run.get(key)) for key in ("kernel", "topology", "costs", "seed",
                                              "timing_only")}
    if run.get("kernbench_version"):  # the model is in its code
        out["kernbench"] = str(run["kernbench_version"])
    out.update((f"{key} {DIGEST}", str(run[f"{key}_digest"]))
               for key in ("kernel", "topology", "costs") if run.get(f"{key}_digest"))
    was = run.get("recorded_on")
    if isinstance(was, dict) and {"topology", "pes"} <= was.keys():  # a replay's streams
        out["recorded on"] = recorded_text(was)
    digests = run.get("file_digests") if isinstance(run.get("file_digests"), dict) else {}
    if axes is not None:
        out.update((str(k), param_text(k, v, digests)) for k, v in axes.items())
        return out
    params = run.get("params") if isinstance(run.get("params"), dict) else {}
    out.update((str(k), param_text(k, v, digests)) for k, v in sorted(params.items()))
    overrides = run.get("overrides") if isinstance(run.get("overrides"), list) else []
    out.update(str(item).split("=", 1) for item in overrides if "=" in str(item))
    return out


def changed(labels: list[str], every: list[dict[str, str]]) -> list[dict[str, str]]:
    """Per run, the settings that differ between the runs ("not set" where a run left a key
    as its topology has it); where none differ, the run's label (its file) under "run"."""
    keys = list(dict.fromkeys(key for one in every for key in one))
    differ = [key for key in keys if len({one.get(key, NOT_SET) for one in every}) > 1
              and not _explained(key, keys, every)]
    if not differ:
        return [{"run": label} for label in labels]
    return [{key: one.get(key, NOT_SET) for key in differ} for one in every]


NOT_SET = "not set"
DIGEST = "digest"


def _explained(key: str, keys: list[str], every: list[dict[str, str]]) -> bool:
    """A kernel's, topology's or cost table's digest is shown only where it is news: where
    two runs of the same names and `--set` items that could change it differ in it (an
    edited file; a file of a shipped one's name). The kernel's digest is explained by the
    kernel's name, the topology's by its name and the items other than ``costs.`` ones,
    the cost table's by its name and the ``costs.`` items (not the topology's: two
    topologies can name two cost tables of one name). A result that does not know a
    digest (made before it was kept) differs from none."""
    if not key.endswith(f" {DIGEST}"):
        return False
    given = {f"kernel {DIGEST}": ["kernel"],
             f"topology {DIGEST}": ["topology", *(k for k in keys if "." in k
                                                  and not k.startswith("costs."))],
             f"costs {DIGEST}": ["costs", *(k for k in keys if k.startswith("costs."))]}[key]
    seen: dict[tuple, str] = {}
    for one in every:
        digest = one.get(key, NOT_SET)
        if digest != NOT_SET and seen.setdefault(
                tuple(one.get(k, NOT_SET) for k in given), digest) != digest:
            return False
    return True


def _cell(name: str, value: Any) -> str:
    if value is None:
        return "-"
    if name.startswith(kernel_metrics.PREFIX):
        return kernel_metrics.cell(name.removeprefix(kernel_metrics.PREFIX), value)
    if name.endswith("_ps"):
        return format_time_ps(value)
    if name.endswith("utilization"):
        return f"{value:.1%}"
    if name == "energy_pj":
        return format_energy_aj(round(value * 10**6))
    if name == "average_power_w":
        return f"{value:.3g} W"
    return str(value)


def compare_table(runs: list[tuple[str, dict[str, Any]]], changes: list[dict[str, str]],
                  width: int | None = None) -> Table:
    """The runs side by side, a column each, under rows naming what changed between them;
    where that would not fit `width` columns, a row per run instead (as a sweep's table)."""
    from kernbench_cli.report.fit import fits

    changes = [{_setting(k): _setting(v) for k, v in change.items()} for change in changes]
    table = _by_metric(runs, changes)
    if width is None or fits(table, Console(width=10_000, markup=False), width):
        return table
    from kernbench_cli.report.sweep import sweep_table

    rows = [{"point": n + 1, "axes": change, "result": run, "error": None}
            for n, ((_, run), change) in enumerate(zip(runs, changes, strict=True))]
    table = sweep_table(rows, width)
    table.title = f"Compare: {len(runs)} runs, change against the first"
    table.caption = (f"a row per run to fit {width} columns; --format csv or json has every "
                     "metric")
    return table


#: a setting's text in the table at most this long: a longer one is cut in the middle
SETTING_CHARS = 60


def _setting(text: str) -> str:
    """A setting as the table shows it (not as Rich markup: `cli.common.echo_rich`):
    control characters escaped (a file's text must not move the terminal's cursor or
    colour it), one longer than `SETTING_CHARS` cut in the middle with its length (a cell
    of 10^4 characters took the table minutes to fit)."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    if len(text) > SETTING_CHARS:
        text = f"{text[:SETTING_CHARS // 2]}…{text[-12:]} ({len(text):,} characters)"
    return text


def _by_metric(runs: list[tuple[str, dict[str, Any]]], changes: list[dict[str, str]]) -> Table:
    table = Table(title="Compare: change against the first run", title_style="bold")
    table.add_column("", style="bold")
    for n in range(len(runs)):
        table.add_column(f"run {n + 1}", justify="right", no_wrap=True)
    keys = list(changes[0])
    for key in keys:
        table.add_row(key, *(change[key] for change in changes),
                      end_section=key == keys[-1])
    table_rows = metrics(runs)
    shown = _shown_names(list(table_rows), keys)
    for name, values in table_rows.items():
        cells = []
        for value, delta in zip(values, deltas(values), strict=True):
            text = _cell(name, value)
            if delta is not None and cells:
                text += f" ({delta:+.1f}%)"
            cells.append(text)
        table.add_row(shown[name], *cells)
    return table


def _shown_names(names: list[str], settings: list[str]) -> dict[str, str]:
    """What the table calls each metric: `shown_name`, a kernel's metric by its heading
    unless that is another row's name (`report.metrics.headings`)."""
    prefix = kernel_metrics.PREFIX
    out = {n: shown_name(n) for n in names if not n.startswith(prefix)}
    own = [n.removeprefix(prefix) for n in names if n.startswith(prefix)]
    heads = kernel_metrics.headings(own, [*settings, *out.values()])
    out.update((prefix + n, one_line(head)) for n, head in heads.items())
    return {n: out[n] for n in names}
