"""A sweep as a figure (`sweep --plot FILE`): a metric against one axis, and where time went.

Panel 1: the metric (`y`, default the latency) against the swept axis `x`,
one line per combination of the other axes' values. Panel 2: per point,
the mean busy time of each per-PE engine, stacked. Needs matplotlib (the
`plot` extra); the file type follows the name (.png, .svg, .pdf). The
figure is written atomically; its metadata carries no date, so equal sweeps
give equal SVG and PDF files.
"""

from __future__ import annotations

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


def _number(text: str) -> float | None:
    """The leading number of an axis value ("204.8GB/s" -> 204.8), for a numeric x axis."""
    match = re.match(r"\s*([-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)", text)
    return float(match.group(1)) if match else None


def plot(path: Path, rows: list[dict[str, Any]], x: str | None, y: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "kernbench"  # the same ids in every run
    import matplotlib.pyplot as plt

    from kernbench_cli.fileio import atomic_write

    keys = list(rows[0]["axes"]) if rows else []
    varying = [k for k in keys if len({r["axes"][k] for r in rows}) > 1]
    x = x or (varying[0] if varying else keys[0] if keys else None)
    label, get = METRICS[y]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 8), constrained_layout=True)
    fig.suptitle(title)
    xs_text = list(dict.fromkeys(r["axes"].get(x, "") for r in rows))
    numeric = all(_number(v) is not None for v in xs_text)
    others = [k for k in varying if k != x]
    lines: dict[str, list[tuple[Any, float]]] = {}
    for row in rows:
        if row["result"] is None:
            continue
        name = ", ".join(f"{k}={row['axes'][k]}" for k in others) or y
        at = _number(row["axes"][x]) if numeric else xs_text.index(row["axes"][x])
        lines.setdefault(name, []).append((at, get(row["result"])))
    for name, points in lines.items():
        points.sort()
        top.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=name)
    if not numeric:
        top.set_xticks(range(len(xs_text)), xs_text)
    top.set_xlabel(x if not numeric else f"{x} ({_unit(xs_text[0])})" if _unit(xs_text[0])
                   else x)
    top.set_ylabel(label)
    top.grid(True, alpha=0.3)
    if len(lines) > 1:
        top.legend(fontsize="small")
    done = [r for r in rows if r["result"] is not None]
    base = [0.0] * len(done)
    for engine in ENGINES:
        busy = [r["result"].get("engines", {}).get(engine, {}).get("busy_ps", 0) / 1e6
                for r in done]
        bottom.bar(range(len(done)), busy, bottom=base, label=engine.upper())
        base = [a + b for a, b in zip(base, busy, strict=True)]
    bottom.set_xticks(range(len(done)), [str(r["point"]) for r in done])
    bottom.set_xlabel("point (see the table)")
    bottom.set_ylabel("mean busy time per PE (us), stacked by engine")
    bottom.legend(fontsize="small", ncols=len(ENGINES))
    metadata = {".pdf": {"CreationDate": None}, ".svg": {"Date": None}}.get(path.suffix, {})
    atomic_write(path, lambda out: fig.savefig(out, format=path.suffix[1:], dpi=100,
                                               metadata=metadata), "--plot")
    plt.close(fig)


def _unit(text: str) -> str:
    """The unit after an axis value's number ("204.8GB/s" -> "GB/s")."""
    match = re.match(r"\s*[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?\s*(.*)", text)
    return match.group(1) if match else ""
