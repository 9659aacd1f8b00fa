"""A sweep as a figure (`sweep --plot FILE`): a metric against one axis, and where time went.

Panel 1: the metric (`y`, default the latency) against the swept axis `x`,
one line per combination of the other axes' values; for the latency, each
line's tightest roofline bound (the run's work at the peak of the resource
that bounds it most) dashed beside it. Panel 2: per point, each per-PE
engine's mean busy time as bars side by side (engines overlap in time, so
stacked bars would sum past the latency), the latency drawn over them. An
axis whose values are powers of two is log2; axis labels carry the swept
keys and their units, the title the kernel, topology and the keys held
fixed; legends sit outside the data. Needs matplotlib (the `plot` extra);
the file type follows the name (.png, .svg, .pdf). The figure is written
atomically; its metadata carries no date, so equal sweeps give equal SVG
and PDF files.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from kernbench_cli.errors import KernbenchError

FORMATS = (".png", ".svg", ".pdf")
ENGINES = ("cpu", "scheduler", "dma", "gemm", "math")
#: --y choices: metric -> (label with unit, how to get it from a run's JSON)
METRICS = {
    "latency": ("latency (us)", lambda r: r["latency_ps"] / 1e6),
    "gemm_mac_utilization": ("GEMM MAC utilisation (%)",
                             lambda r: 100 * r["gemm_mac_utilization"]),
    "hbm_gbps": ("HBM bandwidth achieved (GB/s)", lambda r: r["hbm_gbps"]),
    "energy": ("energy (uJ)", lambda r: r["energy_pj"]["total"] / 1e6),
    "power": ("average power (W)", lambda r: r["average_power_w"]),
    # performance per watt: (runs/s) / W = runs per joule
    "perf_per_watt": ("runs per joule ((runs/s)/W)", lambda r: 1e12 / r["energy_pj"]["total"]),
}


def check(path: Path, x: str | None, y: str, axes: list[str]) -> None:
    """The plot options, checked before any point runs."""
    if path.suffix not in FORMATS:
        raise KernbenchError(f"--plot {str(path)!r}: the figure must end in "
                             f"{', '.join(FORMATS)}")
    if y not in METRICS:
        raise KernbenchError(f"--y {y!r}: one of {', '.join(METRICS)}")
    if x is not None and x not in axes:
        raise KernbenchError(f"--x {x!r}: not a swept axis (axes: {', '.join(axes) or 'none'})")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise KernbenchError("--plot needs matplotlib: pip install 'kernbench[plot]'") from None


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


def plot(path: Path, rows: list[dict[str, Any]], x: str | None, y: str, title: str) -> None:
    """Draw `figure(rows, x, y, title)` to `path`."""
    import matplotlib.pyplot as plt

    from kernbench_cli.fileio import atomic_write

    fig = figure(rows, x, y, title)
    metadata = {".pdf": {"CreationDate": None}, ".svg": {"Date": None}}.get(path.suffix, {})
    atomic_write(path, lambda out: fig.savefig(out, format=path.suffix[1:], dpi=100,
                                               metadata=metadata, bbox_inches="tight"),
                 "--plot")
    plt.close(fig)


def figure(rows: list[dict[str, Any]], x: str | None, y: str, title: str):
    """The sweep's figure (matplotlib, not yet saved): the two panels of the module's
    docstring. `title` names the kernel and topology; the keys held fixed follow it."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "kernbench"  # the same ids in every run
    import matplotlib.pyplot as plt

    keys = list(rows[0]["axes"]) if rows else []
    varying = [k for k in keys if len({str(r["axes"][k]) for r in rows}) > 1]
    x = x or (varying[0] if varying else keys[0] if keys else None)
    fixed = ", ".join(f"{k}={rows[0]['axes'][k]}" for k in keys if k not in varying)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 8), constrained_layout=True)
    fig.suptitle(title + (f"\nfixed: {fixed}" if fixed else ""))
    _metric_panel(top, rows, x, y, [k for k in varying if k != x])
    _engine_panel(bottom, [r for r in rows if r["result"] is not None], varying)
    return fig


def _metric_panel(ax, rows: list[dict[str, Any]], x: str | None, y: str,
                  others: list[str]) -> None:
    """The metric against `x`, a line per combination of the `others`' values; for the
    latency, each line's tightest roofline bound dashed in its colour."""
    label, get = METRICS[y]
    xs_text = list(dict.fromkeys(str(r["axes"].get(x, "")) for r in rows))
    numeric = all(_number(v) is not None for v in xs_text)
    lines: dict[str, list[tuple[float, float, float | None, str]]] = {}
    for row in rows:
        if row["result"] is None:
            continue
        name = ", ".join(f"{k}={row['axes'][k]}" for k in others) or y
        text = str(row["axes"][x])
        at = _number(text) if numeric else xs_text.index(text)
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
    if numeric and _powers_of_two([_number(v) for v in xs_text]):
        ax.set_xscale("log", base=2)
        ax.set_xticks([_number(v) for v in xs_text], xs_text)  # the values, not 2^k
        ax.minorticks_off()
    if not numeric:
        ax.set_xticks(range(len(xs_text)), xs_text)
    ax.set_xlabel(axis_label(x, xs_text) if x else "point")
    ax.set_ylabel(label)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))


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
