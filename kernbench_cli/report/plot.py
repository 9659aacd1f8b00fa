"""A sweep as a figure (`sweep --plot FILE`, `kernbench plot`): a metric against one axis,
and where time went.

Panel 1: the metric (`y`, default the latency; or one the kernel states,
`report.metrics`) against the swept axis `x`, one line per combination of the
other axes' values (a point without the metric is left out); for the latency,
each line's tightest roofline bound (the run's work at the peak of the
resource that bounds it most) dashed beside it. Axis values are placed by
their number: in the unit they share, or, where they are written in different
units of one kind (``512MB/s``, ``1GB/s``), by their number in the stored
unit (the row's ``axis_numbers``), each tick labelled as given. Panel 2: per
point, each per-PE engine's mean busy time as bars side by side (engines
overlap in time, so stacked bars would sum past the latency), the latency
drawn over them. An axis whose values are powers of two is log2; axis labels
carry the swept keys and their units, the title the kernel, topology and the
keys held fixed; legends sit outside the data. Needs matplotlib (the `plot`
extra); the file type follows the name (.png, .svg, .pdf). The figure is
written atomically; its metadata carries no date, so equal sweeps give equal
SVG and PDF files.
"""

from __future__ import annotations

import math
import os
import re
import stat
from pathlib import Path
from typing import Any

from kernbench_cli.errors import KernbenchError
from kernbench_cli.hw.engines import ENGINES
from kernbench_cli.report import metrics

FORMATS = (".png", ".svg", ".pdf")
#: --y choices: metric -> (label with unit, how to get it from a run's JSON)
METRICS = {
    "latency": ("latency (us)", lambda r: r["latency_ps"] / 1e6),
    "gemm_mac_utilization": ("GEMM MAC utilisation (%)",
                             lambda r: 100 * r["gemm_mac_utilization"]),
    "hbm_gbps": ("HBM bandwidth achieved (GB/s)", lambda r: r["hbm_gbps"]),
    "energy": ("energy (uJ)", lambda r: r["energy_pj"]["total"] / 1e6),
    "power": ("average power (W)", lambda r: r["average_power_w"]),
    # performance per watt: (runs/s) / W = runs per joule; none for a run that took no
    # energy (a cost table of zero energies): not a point on the line
    "perf_per_watt": ("runs per joule ((runs/s)/W)",
                      lambda r: 1e12 / r["energy_pj"]["total"] if r["energy_pj"]["total"]
                      else None),
}


def check(path: Path, x: str | None, y: str, axes: list[str],
          states_metrics: bool = False) -> None:
    """The plot options, checked before any point runs. A `y` that is not one of `METRICS`
    may be a metric the kernel states, when it `states_metrics` (it has a `metrics()`):
    which ones is known only from the points (`metric`)."""
    check_figure(path, "--plot")
    if y not in METRICS and not states_metrics:
        raise KernbenchError(f"--y {y!r}: one of {', '.join(METRICS)} (the kernel states "
                             "no metrics of its own)")
    check_x(x, axes)


def check_figure(path: Path, option: str) -> None:
    """That a figure can be drawn to `path` (`option` names it in errors): its type, and
    matplotlib."""
    if path.suffix not in FORMATS:
        raise KernbenchError(f"{option} {str(path)!r}: the figure must end in "
                             f"{', '.join(FORMATS)}")
    _matplotlib(option)


def _matplotlib(option: str):
    """matplotlib, imported as kernbench draws with it: its settings files checked first
    (one that is a FIFO held the import for good: matplotlib reads ``./matplotlibrc`` and
    the user's before anything else), and the Agg backend it draws with chosen as it loads
    (a `MPLBACKEND` it does not know was an internal error, though never used); the
    figures are then drawn in matplotlib's default style, not the user's (`_drawn`)."""
    for path in _settings_files():
        try:
            info = os.stat(path)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode) and not stat.S_ISDIR(info.st_mode):
            raise KernbenchError(f"{option}: matplotlib would read its settings from {path}, "
                                 "which is not a regular file (a FIFO, a device, a socket)")
    given = os.environ.get("MPLBACKEND")
    os.environ["MPLBACKEND"] = "agg"
    try:
        import matplotlib
    except ImportError:
        raise KernbenchError(f"{option} needs matplotlib: pip install 'kernbench[plot]'") \
            from None
    finally:
        if given is None:
            os.environ.pop("MPLBACKEND", None)
        else:
            os.environ["MPLBACKEND"] = given
    return matplotlib


def _settings_files() -> list[str]:
    """Where matplotlib looks for a ``matplotlibrc`` (its `matplotlib_fname`), in order."""
    found = ["matplotlibrc"]
    given = os.environ.get("MATPLOTLIBRC")
    if given:
        found += [given, os.path.join(given, "matplotlibrc")]
    config = os.environ.get("MPLCONFIGDIR") or os.path.join(
        os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config"), "matplotlib")
    return [*found, os.path.join(config, "matplotlibrc")]


def check_x(x: str | None, axes: list[str], option: str = "--x") -> None:
    """`--x` (`option`: the API's ``x``), if given, is one of the sweep's `axes`."""
    if x is not None and x not in axes:
        raise KernbenchError(f"{option} {x!r}: not a swept axis (axes: "
                             f"{', '.join(axes) or 'none'})")


def metric(y: str, rows: list[dict[str, Any]], option: str = "--y") -> tuple[str, Any]:
    """(axis label, value of a run's JSON or None) of `--y` `y` (`option`: the API's ``y``):
    one of `METRICS`, or a metric some point's kernel states, named as it is (``tpot_ps``)
    or by its JSON path (``metrics.tpot_ps``); a one-line error naming the choices
    otherwise."""
    if y in METRICS:
        return METRICS[y]
    stated = metrics.names(r["result"] for r in rows)
    name = y.removeprefix(metrics.PREFIX)
    if name not in stated:
        raise KernbenchError(f"{option} {y!r}: not a metric of these points; one of "
                             f"{', '.join([*METRICS, *stated])}")
    label, factor = metrics.axis(name)

    def get(result: dict[str, Any]) -> float | None:
        number = metrics.value(result, name)
        return None if number is None else number * factor

    return label, get


_NUMBER = r"\s*(x)?([-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)\s*(.*)"


def _number(text: str) -> float | None:
    """The number of an axis value ("204.8GB/s" -> 204.8, a factor "x2" -> 2)."""
    match = re.fullmatch(_NUMBER, str(text))
    return float(match.group(2)) if match else None


def _unit(text: str) -> str:
    """The unit of an axis value ("204.8GB/s" -> "GB/s"; a factor "x2": "x the topology's")."""
    match = re.fullmatch(_NUMBER, str(text))
    if match is None:
        return ""
    return "x the topology's" if match.group(1) else match.group(3)


def _powers_of_two(values: list[float]) -> bool:
    """Whether `values` are at least three distinct powers of two (2^-k too)."""
    return len(set(values)) >= 3 and all(v > 0 and math.log2(v).is_integer() for v in values)


def axis_label(key: str, values: list[str]) -> str:
    """"hbm.bandwidth (GB/s)": the key and the unit its values are in."""
    unit = _unit(values[0]) if values else ""
    return f"{key} ({unit})" if unit and all(_unit(v) == unit for v in values) else key


def plot(path: Path, rows: list[dict[str, Any]], x: str | None, y: str, title: str,
         option: str = "--plot") -> None:
    """Draw `figure(rows, x, y, title)` to `path` (`option` names it in errors)."""
    metric(y, rows)  # an unknown metric: an error before any drawing
    matplotlib = _matplotlib(option)
    import matplotlib.pyplot as plt

    from kernbench_cli.fileio import atomic_write

    fig = figure(rows, x, y, title)
    metadata = {".pdf": {"CreationDate": None}, ".svg": {"Date": None}}.get(path.suffix, {})
    try:
        with plt.style.context("default"), matplotlib.rc_context({"svg.hashsalt": "kernbench"}):
            atomic_write(path, lambda out: fig.savefig(out, format=path.suffix[1:], dpi=100,
                                                       metadata=metadata, bbox_inches="tight"),
                         option)
    finally:
        plt.close(fig)


def figure(rows: list[dict[str, Any]], x: str | None, y: str, title: str):
    """The sweep's figure (matplotlib, not yet saved): the two panels of the module's
    docstring. `title` names the kernel and topology; the keys held fixed follow it."""
    matplotlib = _matplotlib("--plot")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with plt.style.context("default"), matplotlib.rc_context(
            {"svg.hashsalt": "kernbench"}):  # the same ids in every run
        return _figure(plt, rows, x, y, title)


def _figure(plt, rows: list[dict[str, Any]], x: str | None, y: str, title: str):
    """`figure`, in matplotlib's default style."""
    keys = list(rows[0]["axes"]) if rows else []
    varying = _varying(rows)
    x = chosen_x(rows, x)
    fixed = ", ".join(f"{k}={rows[0]['axes'][k]}" for k in keys if k not in varying)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 8), constrained_layout=True)
    fig.suptitle(title + (f"\nfixed: {fixed}" if fixed else ""))
    _metric_panel(top, rows, x, y, [k for k in varying if k != x])
    _engine_panel(bottom, [r for r in rows if r["result"] is not None], varying)
    return fig


def _varying(rows: list[dict[str, Any]]) -> list[str]:
    """The axes whose value differs between points."""
    keys = list(rows[0]["axes"]) if rows else []
    return [k for k in keys if len({str(r["axes"][k]) for r in rows}) > 1]


def chosen_x(rows: list[dict[str, Any]], x: str | None) -> str | None:
    """The axis along x: `x`, or else the first that varies (or the first axis)."""
    keys = list(rows[0]["axes"]) if rows else []
    varying = _varying(rows)
    return x or (varying[0] if varying else keys[0] if keys else None)


def _metric_panel(ax, rows: list[dict[str, Any]], x: str | None, y: str,
                  others: list[str]) -> None:
    """The metric against `x`, a line per combination of the `others`' values; for the
    latency, each line's tightest roofline bound dashed in its colour."""
    label, get = metric(y, rows)
    xs_text = list(dict.fromkeys(str(r["axes"].get(x, "")) for r in rows))
    places = _places(rows, x, xs_text)
    numeric = places is not None
    lines: dict[str, list[tuple[float, float, float | None, str]]] = {}
    for row in rows:
        if row["result"] is None or get(row["result"]) is None:
            continue
        name = ", ".join(f"{k}={row['axes'][k]}" for k in others) or y
        text = str(row["axes"][x])
        at = places[text] if numeric else xs_text.index(text)
        roofline = row["result"].get("roofline") or []
        bound = (roofline[0]["ps"] / 1e6, roofline[0]["resource"]) if roofline else (None, "")
        lines.setdefault(name, []).append((at, get(row["result"]), *bound))
    for name, points in lines.items():
        points.sort()
        (drawn,) = ax.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                           label=name)
        if y == "latency" and all(p[2] is not None for p in points):
            kinds = "/".join(dict.fromkeys(p[3] for p in points))
            ax.plot([p[0] for p in points], [p[2] for p in points], linestyle="--",
                    color=drawn.get_color(), label=f"{name}: tightest bound ({kinds})")
    shared = numeric and len({_unit(v) for v in xs_text}) == 1
    if numeric and _powers_of_two([places[v] for v in xs_text]):
        ax.set_xscale("log", base=2)
        ax.set_xticks([places[v] for v in xs_text], xs_text)  # the values, not 2^k
        ax.minorticks_off()
    elif numeric and not shared:  # numbers in the stored unit: each tick as given
        ax.set_xticks([places[v] for v in xs_text], xs_text)
    if not numeric:
        ax.set_xticks(range(len(xs_text)), xs_text)
    ax.set_xlabel(axis_label(x, xs_text) if x else "point")
    ax.set_ylabel(label)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))


def _places(rows: list[dict[str, Any]], x: str | None, xs_text: list[str]
            ) -> dict[str, float] | None:
    """Where each value of axis `x` sits: its number in the unit all share (``204.8GB/s``
    at 204.8), or, in different units of one kind, its number in the stored unit (the
    rows' ``axis_numbers``); None where they are not all numbers of one kind (the values
    are then spaced evenly, in order)."""
    plain = [_number(v) for v in xs_text]
    if any(p is None for p in plain):
        return None
    if len({_unit(v) for v in xs_text}) == 1:
        return dict(zip(xs_text, plain, strict=True))
    stored: dict[str, tuple[Any, Any]] = {}
    for row in rows:
        text = str(row["axes"].get(x, ""))
        stored[text] = ((row.get("axis_numbers") or {}).get(x),
                        (row.get("axis_units") or {}).get(x))
    units = {stored.get(v, (None, None))[1] for v in xs_text}
    if len(units) != 1 or any(stored.get(v, (None,))[0] is None for v in xs_text):
        return None
    return {v: stored[v][0] for v in xs_text}


def _engine_panel(ax, done: list[dict[str, Any]], varying: list[str]) -> None:
    """Per point, each engine's mean busy time per PE, side by side, the latency over them;
    the points named by the values of the axes that vary."""
    width = 0.8 / len(ENGINES)
    for n, engine in enumerate(ENGINES):
        busy = [(r["result"].get("engines", {}).get(engine) or {}).get("busy_ps", 0) / 1e6
                for r in done]
        ax.bar([i - 0.4 + width * (n + 0.5) for i in range(len(done))], busy, width,
               label=engine.upper())
    ax.plot(range(len(done)), [r["result"]["latency_ps"] / 1e6 for r in done], color="black",
            marker="_", markersize=24, markeredgewidth=2, linestyle="none", label="latency")
    ticks = [", ".join(str(r["axes"][k]) for k in varying) or str(r["point"]) for r in done]
    wide = max(map(len, ticks), default=0) > 6
    ax.set_xticks(range(len(done)), ticks, rotation=45 if wide else 0,
                  ha="right" if wide else "center", fontsize="small")
    ax.set_xlabel(", ".join(varying) if varying else "point")
    ax.set_ylabel("mean busy time per PE (us)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
