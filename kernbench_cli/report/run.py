"""A `RunResult` for people (Rich tables) and for machines (versioned JSON).

Engine rows, table names and JSON keys share one spelling: the TOML section
(`dma`, `gemm`, …, and `hbm`, `noc`, `ucie`, `sip_link`, `rack_link` for the
shared blocks). Per-PE engines have one instance per PE; a shared level
counts only the links or slices the run used.
"""

from __future__ import annotations

import math
from typing import Any

from rich.console import Group
from rich.table import Table

from kernbench_cli import __version__
from kernbench_cli.config.units import format_energy_aj, format_size, format_time_ps
from kernbench_cli.config.units import format_time_short as short
from kernbench_cli.errors import clip
from kernbench_cli.hw.engines import ENGINES
from kernbench_cli.report import metrics as kernel_metrics
from kernbench_cli.report.bounds import param_text
from kernbench_cli.report.regions import region_table, regions_json
from kernbench_cli.sim.bounds import largest
from kernbench_cli.sim.energy import basis
from kernbench_cli.sim.result import EngineStats, RunResult

SCHEMA_VERSION = 1


def schema_problem(run: dict) -> str | None:
    """What is wrong with a `run --json` object's schema_version (another than this
    kernbench's); None if nothing (or none given: files from before it was written)."""
    version = run.get("schema_version", SCHEMA_VERSION)
    if version == SCHEMA_VERSION:
        return None
    return f"schema_version {clip(version)} is not the one this kernbench reads " \
        f"({SCHEMA_VERSION})"


#: Below this busy fraction no single engine is said to bound a kernel.
BOUND_THRESHOLD = 0.6


def _util(busy: int, latency: int) -> float:
    return busy / latency if latency else 0.0


def busiest(result: RunResult) -> tuple[str | None, float]:
    """(engine, busy fraction) of the busiest instance of any engine (utilisation)."""
    best, best_u = None, 0.0
    for name, stats in result.engines.items():
        if name == "scheduler" or not stats.instances:
            continue
        u = _util(max(stats.busy_ps), result.latency_ps)
        if u > best_u:
            best, best_u = name, u
    return best, best_u


def bound(result: RunResult) -> tuple[str | None, float]:
    """(engine, share of the critical path) of what the path spends most time on; without a
    path (an old result), the busiest engine if busy above 60%."""
    path = result.critical_path
    if path is not None and path.latency_ps:
        engine, ps = next(iter(path.by_engine.items()))
        return engine, ps / path.latency_ps
    name, u = busiest(result)
    return (name if u >= BOUND_THRESHOLD else None), u


def bound_text(result: RunResult) -> str:
    name, share = bound(result)
    if name is None:
        return (f"latency: no engine is busy {BOUND_THRESHOLD:.0%} of the time (busiest "
                f"{share:.0%}); dependencies and transfer latencies set the pace")
    stats = result.engines.get(name)
    util = (f"; its busiest unit is busy {_util(max(stats.busy_ps), result.latency_ps):.1%} "
            "of the run") if stats is not None and stats.instances else ""
    pe = result.critical_path.busiest_pe(name) if result.critical_path else None
    where = f" (most on PE {pe})" if pe is not None and result.num_pes > 1 else ""
    return f"{name}: {share:.1%} of the critical path{where}{util}"


def critical_path_text(result: RunResult) -> str:
    path = result.critical_path
    parts = []
    for engine, ps in list(path.by_engine.items())[:5]:
        pe = path.busiest_pe(engine)
        waits = {r: w for r, w in path.resource_waits().items() if r.startswith(f"{engine} ")}
        where = (f" ({max(waits, key=waits.get).split(' ', 1)[1]})" if waits else
                 f" (PE {pe})" if pe is not None and result.num_pes > 1 else "")
        parts.append(f"{engine} {ps / path.latency_ps:.1%}{where}")
    causes = ", ".join(f"{cause} {ps / path.latency_ps:.1%}"
                       for cause, ps in list(path.by_cause.items())[:4])
    return f"{', '.join(parts)}; by cause: {causes}"


def critical_path_lines(result: RunResult) -> list[str]:
    """The critical path as JSON lines, one step each, from time 0 to the latency: the PE,
    the command (its index in the PE's stream) and kernel line, what ran, where the time
    went and why, and when."""
    import json

    return [json.dumps({"pid": s.pid, "pe": result.pe_labels[s.pid], "command": s.command,
                        "line": s.line, "kind": s.kind, "engine": s.engine, "cause": s.cause,
                        "resource": s.resource or None, "start_ps": s.start_ps,
                        "end_ps": s.end_ps}, sort_keys=True)
            for s in result.critical_path.steps]


def what_if(result: RunResult) -> list[tuple[str, int]]:
    """(engine, about how many ps sooner) if each of the path's top two engines were 2x
    faster: half its time on the path. An estimate, not a bound: another path may take
    over (less saved), and the in-order engines may serve their work in another order
    (more saved: a tile load no longer queued behind a receive)."""
    path = result.critical_path
    return [(engine, ps // 2) for engine, ps in list(path.by_engine.items())[:2]]


def what_if_text(result: RunResult) -> str:
    saved = "; ".join(f"{engine} 2x faster: about {format_time_ps(ps)} sooner"
                      for engine, ps in what_if(result))
    return (f"{saved} (half their time on the path: estimates, as another path or another "
            "order of work may follow; --sensitivity measures)")


def gemm_efficiency(result: RunResult) -> float:
    """Fraction of the peak MAC throughput of every PE over the run (a narrow datapath's
    MACs counted at its MACs per cell: `RunResult.array_flops`)."""
    peak = result.peak_flops_per_ps * result.latency_ps * result.num_pes
    return result.array_flops / peak if peak else 0.0


def gemm_array_utilization(result: RunResult) -> float:
    """SCALE-Sim's utilisation: MACs / (rows x cols x the GEMM engines' busy cycles), a
    narrow datapath's MACs counted at its MACs per cell."""
    busy_cycles = sum(result.engines["gemm"].busy_ps) * result.clock_hz / 10**12
    macs_per_cycle = result.peak_flops_per_ps * 10**12 / result.clock_hz / 2
    return result.array_flops / 2 / (macs_per_cycle * busy_cycles) if busy_cycles else 0.0


def gemm_text(result: RunResult) -> str:
    """The summary's GEMM line: both utilisations count MACs at the array's one-pass rate;
    where MACs took more passes than one (a format's `pe.gemm.passes`: f32's 3 by default),
    the share of the cells at work too, which those passes fill (a GEMM of 3 passes a MAC
    runs at most a third of the peak MAC rate)."""
    text = (f"{gemm_efficiency(result):.1%} of peak MAC throughput over the run; array "
            f"{gemm_array_utilization(result):.1%} used while busy")
    macs = result.array_flops / 2
    if result.array_cycles <= macs:
        return text
    busy = sum(result.engines["gemm"].busy_ps) * result.clock_hz / 10**12
    cells = result.peak_flops_per_ps * 10**12 / result.clock_hz / 2
    at_work = result.array_cycles / (cells * busy)
    return (f"{text}, at one pass a MAC; these took {result.array_cycles / macs:.3g} passes "
            f"a MAC (pe.gemm.passes), so its cells were at work {at_work:.1%} of the time it "
            "was busy")


def hbm_bandwidth(result: RunResult) -> tuple[float, float]:
    """(achieved, peak) HBM bandwidth over the run, in GB/s."""
    achieved = result.hbm_bytes / result.latency_ps * 1000 if result.latency_ps else 0.0
    return achieved, result.hbm_peak_bytes_per_ps * 1000


def recorded_elsewhere(result: RunResult) -> bool:
    """Whether `result` is a replay of streams recorded on another topology (by name, digest
    or PEs) than the one it re-timed them on."""
    was = result.recorded_on
    return bool(was) and (was["topology"], was.get("topology_digest", result.topology_digest),
                          was["pes"]) != (result.topology, result.topology_digest,
                                          result.num_pes)


def recorded_text(was: dict[str, Any]) -> str:
    """Where a replay's streams were recorded (`RunResult.recorded_on`), as text."""
    digest = f" #{was['topology_digest']}" if "topology_digest" in was else ""
    return f"{was['topology']}{digest}, {was['pes']} PEs"


def verification_text(result: RunResult) -> str:
    if result.timing_only:
        return "not verified: timing only"
    parts = []
    for c in result.checks:
        verdict = "PASS" if c.passed else "FAIL"
        whose = f"declared by the kernel for its {c.dtype}" if c.declared else c.dtype
        if c.scores:  # an argmax: how far its choice's reference score is below the largest
            whose = (f"{whose}, twice that of {c.scores}, on how far the chosen one's "
                     "reference score is below the largest")
        parts.append(f"{verdict} {c.name}: max |err| {c.max_abs_err:.3g} "
                     f"(tolerance {whose}: atol {c.atol:g} + rtol {c.rtol:g} x |ref|)"
                     + (f" ({c.note})" if c.note else ""))
    return "; ".join(parts) if parts else "no outputs to check"


def argmax_detail(check) -> str:
    """What the error of an argmax output's check is (`--json`'s `detail`)."""
    return (f"an argmax of {check.scores}: its error is how far the chosen index's reference "
            f"score lies below the largest, within twice {check.scores}' tolerance")


def tcm_high_water(result: RunResult) -> tuple[int, int, int, int] | None:
    """(pid, bytes, when, line) of the PE whose TCM held the most."""
    if not result.tcm_high_water:
        return None
    pid = max(range(len(result.tcm_high_water)),
              key=lambda p: (result.tcm_high_water[p][0], -p))
    return (pid, *result.tcm_high_water[pid])


def tcm_text(result: RunResult) -> str:
    pid, used, when, line = tcm_high_water(result)
    share = used / result.tcm_bytes if result.tcm_bytes else 0.0
    return (f"{used:,} B ({share:.1%}) of {format_size(result.tcm_bytes)} at most (tensors "
            f"and tile buffers; PE {pid} at t={format_time_ps(when)}, kernel line {line})")


def race_lines(result: RunResult, amap, shown: str) -> list[str]:
    """One line per race (see sim.races)."""
    return [race.text(amap, shown, result.lines) for race in result.races or []]


def invariants_text(result: RunResult) -> str:
    names = ", ".join(i.name for i in result.invariants)
    return f"{len(result.invariants)} physical invariants hold ({names})"


def energy_parts(result: RunResult) -> list[tuple[str, int]]:
    """(part, attojoules) of the run's energy, largest first, static as one part; parts the
    run did not use are left out."""
    energy = result.energy
    parts = [(name, aj) for name, aj in energy.dynamic.items() if aj]
    parts.append(("static", energy.static))
    return sorted(parts, key=lambda p: (-p[1], p[0]))


def average_power_w(result: RunResult) -> float:
    """The run's energy over its latency, in watts (aJ / ps = µW)."""
    return result.energy.total / result.latency_ps / 10**6 if result.latency_ps else 0.0


def energy_text(result: RunResult) -> str:
    total = result.energy.total
    top = ", ".join(f"{name} {aj / total:.1%}" for name, aj in energy_parts(result)[:4]) \
        if total else "nothing counted"
    return (f"{format_energy_aj(total)}, {average_power_w(result):.3g} W average over the "
            f"latency; {top} (table below)")


def energy_table(result: RunResult) -> Table:
    """Each part of the run's energy with what it counted (count x the `[energy]` entry)."""
    total = result.energy.total
    out = Table(title=f"Energy: {format_energy_aj(total)} (each count x its [energy] "
                      "entry)")
    for col in ("part", "energy", "share", "counted"):
        out.add_column(col, justify="right" if col in ("energy", "share") else "left",
                       overflow="fold" if col == "counted" else "ellipsis")
    for name, aj in energy_parts(result):
        out.add_row(name, format_energy_aj(aj), f"{aj / total:.1%}" if total else "-",
                    basis(name, result.energy))
    return out


#: the roofline line's resources, tightest first (`--json` has every one)
ROOFLINE_SHOWN = 4


def roofline_text(result: RunResult) -> str:
    """The roofline bounds, the `ROOFLINE_SHOWN` tightest, each with how far the latency is
    above it, and how many looser ones are left to `--json`."""
    parts = []
    for roof in result.roofline[:ROOFLINE_SHOWN]:
        ratio = result.latency_ps / roof.ps if roof.ps else float("inf")
        parts.append(f"{roof.name} {format_time_ps(roof.ps)} ({ratio:.2f}x)")
    more = len(result.roofline) - ROOFLINE_SHOWN
    if more > 0:
        parts.append(f"{more} looser in --json")
    tight = result.roofline[0]
    return (f"{', '.join(parts)}: each resource's work at its peak, and the latency over "
            f"it; the tightest is {tight.unit}: {tight.how}")


def bound_gap(result: RunResult) -> tuple[str, int, float | None] | None:
    """(name, ps, latency / ps) of the largest bound the kernel states (the gap None for a
    bound of 0 ps), or None if it states none."""
    found = largest(result.bounds)
    if found is None:
        return None
    name, ps = found
    return name, ps, (result.latency_ps / ps if ps else None)


def lower_bound_text(result: RunResult) -> str:
    """The summary's "lower bound" row: the largest bound and the latency over it."""
    gap = bound_gap(result)
    if gap is None:
        return ""
    name, ps, ratio = gap
    over = f"; the latency is {ratio:.2f}x that" if ratio is not None else ""
    return (f"{format_time_ps(ps)}, the {name} bound: the largest the kernel states "
            f"(analytic){over}")


def shortcuts_text(repeats: dict[str, int]) -> str:
    """How many repetitions of a `tl.repeat` body a timing-only run copied, not ran: a body
    whose commands differ in a later repetition (a global it reads) breaks the contract,
    and only `--no-shortcuts` would show it."""
    total = sum(repeats.values())
    return (f"{repeats['copied']:,} of {total:,} repetitions of a tl.repeat body copied, "
            "not run (each alike to two before it; --no-shortcuts runs every one)")


def summary(result: RunResult) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    params = " ".join(f"{k}={param_text(k, v, result.file_digests)}"
                      for k, v in sorted(result.params.items()))
    achieved, peak = hbm_bandwidth(result)
    rate = result.commands / result.wall_s if result.wall_s else 0.0
    rows = [
        ("kernel", f"{result.kernel}  ({params})"),
        ("topology", f"{result.topology} #{result.topology_digest}: {result.num_pes} PEs; "
                     f"costs {result.costs} #{result.costs_digest}"),
        *([("recorded on", f"{recorded_text(result.recorded_on)}: the streams the kernel "
                           "made there, re-timed here")] if recorded_elsewhere(result) else []),
        *([("set", " ".join(result.overrides))] if result.overrides else []),
        ("latency", format_time_ps(result.latency_ps)),
        ("verification", verification_text(result)),
        ("model checks", invariants_text(result)),
        ("bound by", bound_text(result)),
        *([("roofline", roofline_text(result))] if result.roofline else []),
        *([("critical path", critical_path_text(result)), ("what if", what_if_text(result))]
          if result.critical_path is not None and result.latency_ps else []),
        *([("TCM", tcm_text(result))] if result.tcm_high_water else []),
        *([("races", f"{len(result.races)} found between PEs (listed below)" if result.races
            else "none between PEs")] if result.races is not None else []),
        ("GEMM", gemm_text(result)),
        ("HBM", f"{achieved:.1f} GB/s of {peak:.1f} GB/s peak"),
        *([("energy", energy_text(result))] if result.energy is not None else []),
        ("simulated", f"{result.commands:,} commands in {result.wall_s:.2f} s wall "
                      f"({rate:,.0f} commands/s)"),
        *([("shortcuts", shortcuts_text(result.repeats))] if result.repeats.get("copied")
          else []),
    ]
    at = next(i for i, (key, _) in enumerate(rows) if key == "latency") + 1
    for name, (ps, how) in sorted(result.bounds.items()):
        ratio = result.latency_ps / ps if ps else float("inf")
        rows.insert(at, (f"{name} bound", f"{format_time_ps(ps)} = {how}; the latency is "
                                           f"{ratio:.2f}x that"))
    lower = lower_bound_text(result)
    if lower:
        rows.insert(at, ("lower bound", lower))
    if result.metrics:
        rows.insert(at, ("metrics", "; ".join(
            f"{name} {kernel_metrics.cell(name, value)} {how}".rstrip()
            for name, (value, how) in result.metrics.items())))
    for key, value in rows:
        table.add_row(key, value)
    return table


#: The engine table's columns a narrow terminal leaves out, the least needed first.
ENGINE_OPTIONAL = ("energy", "wait", "min", "idle", "max")


def engine_table(result: RunResult, width: int | None = None) -> Table:
    """Busy, wait, idle and utilisation per engine, and its dynamic energy: columns of
    `ENGINE_OPTIONAL` are left out (the caption says which) while the table would not fit
    `width` columns without splitting a number."""
    from kernbench_cli.report.fit import drop_to_fit, dropped_caption

    energy = result.energy.dynamic if result.energy is not None else None
    optional = ENGINE_OPTIONAL if energy is not None else ENGINE_OPTIONAL[1:]
    table, dropped = drop_to_fit(lambda out: _engines(result, energy, out), optional, width)
    if dropped == ["energy"]:
        table.caption = f"energy by engine: the Energy table (no room in {width} columns)"
    elif dropped:
        table.caption = dropped_caption(dropped, width)
    return table


def _engines(result: RunResult, energy: dict[str, int] | None, dropped) -> Table:
    table = Table(title="Engines: busy time (min, mean, max over the n units); wait, idle "
                        "and util of the mean")
    columns = [c for c in ("engine", "n", "min", "mean", "max", "wait", "idle", "util", "ops",
                           *(("energy",) if energy is not None else ())) if c not in dropped]
    for col in columns:
        table.add_column(col, justify="left" if col == "engine" else "right", no_wrap=True)
    for name, stats in result.engines.items():
        row = _engine_numbers(stats, result.latency_ps)
        cells = {"engine": name, "n": str(stats.instances), "min": short(row["busy_min_ps"]),
                 "mean": short(row["busy_ps"]), "max": short(row["busy_max_ps"]),
                 "wait": short(row["wait_ps"]) if stats.wait_ps else "-",
                 "idle": short(row["idle_ps"]), "util": f"{row['utilization']:.1%}",
                 "ops": f"{row['ops']:,}",
                 "energy": format_energy_aj(energy.get(name, 0)) if energy is not None else ""}
        table.add_row(*(cells[c] for c in columns))
    return table


def per_pe_table(result: RunResult) -> Table:
    table = Table(title="Per PE: busy time")
    table.add_column("PE r.s.c.p")
    names = [n for n in ENGINES if n in result.engines]
    for name in names:
        table.add_column(name, justify="right")
    table.add_column("CPU stall", justify="right")
    for i, label in enumerate(result.pe_labels):
        cells = [short(result.engines[n].busy_ps[i]) for n in names]
        label = ".".join(part.split("=")[1] for part in label.split())
        table.add_row(label, *cells, short(result.cpu_stall_ps[i]))
    return table


def render(result: RunResult, per_pe: bool = False, width: int | None = None) -> Group:
    """The report; tables that would not fit `width` columns leave optional columns out."""
    parts = [summary(result), engine_table(result, width)]
    if result.regions:
        parts.append(region_table(result))
    if result.energy is not None:
        parts.append(energy_table(result))
    if per_pe:
        parts.append(per_pe_table(result))
    return Group(*parts)


def _engine_numbers(stats: EngineStats, latency: int) -> dict[str, Any]:
    busy = stats.busy_ps
    mean = sum(busy) // len(busy) if busy else 0
    return {
        "instances": stats.instances,
        "busy_ps": mean,
        "wait_ps": sum(stats.wait_ps) // len(stats.wait_ps) if stats.wait_ps else 0,
        "busy_min_ps": min(busy, default=0),
        "busy_max_ps": max(busy, default=0),
        "idle_ps": latency - mean,
        "utilization": _util(mean, latency),
        "utilization_max": _util(max(busy, default=0), latency),
        "ops": sum(stats.ops),
    }


def to_json(result: RunResult, per_pe: bool = False) -> dict[str, Any]:
    """The machine-readable result (schema_version 1).

    Times are integer picoseconds (``*_ps``) with ``*_ns`` beside them for
    convenience; engine busy/idle are means over instances. Wall-clock time is
    left out so that equal inputs give byte-identical JSON.
    """
    engines = {}
    for name, stats in result.engines.items():
        row = _engine_numbers(stats, result.latency_ps)
        for key in ("busy", "wait", "idle"):
            row[f"{key}_ns"] = row[f"{key}_ps"] / 1000
        row["utilization"] = round(row["utilization"], 6)
        row["utilization_max"] = round(row["utilization_max"], 6)
        engines[name] = row
    (name, share), (top, util) = bound(result), busiest(result)
    achieved, peak = hbm_bandwidth(result)
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kernbench_version": __version__,
        "kernel": result.kernel,
        **({"kernel_digest": result.kernel_digest} if result.kernel_digest else {}),
        "topology": result.topology,
        "costs": result.costs,
        "topology_digest": result.topology_digest,
        "costs_digest": result.costs_digest,
        **({"file_digests": result.file_digests} if result.file_digests else {}),
        **({"recorded_on": result.recorded_on} if result.recorded_on else {}),
        "overrides": list(result.overrides),
        "pes": result.num_pes,
        "params": result.params,
        "seed": result.seed,
        "timing_only": result.timing_only,
        "latency_ps": result.latency_ps,
        "latency_ns": result.latency_ps / 1000,
        "verified": result.verified,
        "max_abs_err": _json_number(result.max_abs_err),
        "checks": _checks_json(result),
        "commands": result.commands,
        "engines": engines,
        "bound": {"by": name or "latency", "engine": name, "path_share": round(share, 6),
                  "busiest_engine": top, "utilization": round(util, 6)},
        "gemm_mac_utilization": round(gemm_efficiency(result), 6),
        "gemm_array_utilization": round(gemm_array_utilization(result), 6),
        "hbm_gbps": round(achieved, 6),
        "hbm_peak_gbps": round(peak, 6),
        "bounds_ps": {name: ps for name, (ps, _) in sorted(result.bounds.items())},
        **_gap_json(result),
        "metrics": {name: value for name, (value, _) in result.metrics.items()},
        "roofline": [{"resource": r.name, "ps": r.ps, "unit": r.unit, "how": r.how,
                      "latency_over_bound": round(result.latency_ps / r.ps, 6) if r.ps
                      else None} for r in result.roofline],
    }
    _optional_json(result, out, per_pe)
    return out


def _checks_json(result: RunResult) -> list[dict[str, Any]]:
    """`to_json`'s checks: each output's verification (a `detail` where it checks an argmax
    or could not measure every value), then each physical invariant."""
    return [{"kind": "verification", "name": c.name, "dtype": c.dtype,
             "max_abs_err": _json_number(c.max_abs_err), "atol": c.atol, "rtol": c.rtol,
             "passed": c.passed, **({"detail": argmax_detail(c)} if c.scores else
                                    {"detail": c.note} if c.note else {})}
            for c in result.checks] + [
        {"kind": "invariant", "name": i.name, "passed": i.passed, "detail": i.detail}
        for i in result.invariants]


def _gap_json(result: RunResult) -> dict[str, Any]:
    """`lower_bound` (the name of the largest bound the kernel states), `lower_bound_ps`,
    `bound_gap` (the latency over it): null when it states none."""
    gap = bound_gap(result)
    name, ps, ratio = gap if gap is not None else (None, None, None)
    return {"lower_bound": name, "lower_bound_ps": ps,
            "bound_gap": round(ratio, 6) if ratio is not None else None}


def _energy_json(result: RunResult) -> dict[str, Any]:
    """`energy_pj` (pJ from the exact attojoules) and `average_power_w`."""
    energy = result.energy
    return {"energy_pj": {
                "total": energy.total / 10**6, "dynamic": (energy.total - energy.static) / 10**6,
                "static": energy.static / 10**6, "static_pe": energy.pe_static / 10**6,
                "static_cube": energy.cube_static / 10**6,
                "parts": {name: aj / 10**6 for name, aj in energy.dynamic.items() if aj}},
            "average_power_w": round(average_power_w(result), 6)}


def _optional_json(result: RunResult, out: dict[str, Any], per_pe: bool) -> None:
    """The keys a run has only sometimes: energy, races, TCM high water, critical path,
    per PE."""
    if result.energy is not None:
        out.update(_energy_json(result))
    if result.regions:
        out["regions"] = regions_json(result)
    if result.races is not None:
        out["races"] = [
            {"why": r.why, "addr": r.lo, "bytes": r.hi - r.lo,
             "accesses": [{"pe": result.pe_labels[x.pid], "command": x.command,
                           "line": result.lines[x.pid][x.command] if result.lines else 0,
                           "write": x.write, "start_ps": x.start_ps, "end_ps": x.end_ps}
                          for x in (r.first, r.second)]}
            for r in result.races]
    high = tcm_high_water(result)
    if high is not None:
        pid, used, when, line = high
        out["tcm_high_water"] = {"pe": result.pe_labels[pid], "bytes": used, "time_ps": when,
                                 "line": line, "tcm_bytes": result.tcm_bytes}
    if result.critical_path is not None:
        path = result.critical_path
        out["critical_path"] = {
            "by_engine": path.by_engine, "by_cause": path.by_cause,
            "resource_waits": path.resource_waits(), "steps": len(path.steps),
            "what_if_2x_faster_saves_ps": dict(what_if(result))}
    if per_pe:
        out["per_pe"] = [
            {"pe": label, "cpu_stall_ps": result.cpu_stall_ps[i],
             **({"tcm_high_water_bytes": result.tcm_high_water[i][0],
                 "tcm_high_water_ps": result.tcm_high_water[i][1],
                 "tcm_high_water_line": result.tcm_high_water[i][2]}
                if result.tcm_high_water else {}),
             **{f"{n}_busy_ps": result.engines[n].busy_ps[i]
                for n in ENGINES}}
            for i, label in enumerate(result.pe_labels)]


def _json_number(value: float | None) -> float | None:
    """`value` as JSON can hold it: NaN and infinities (an output that is not a number
    where the reference is) become null; the check's `passed` says it failed."""
    return value if value is None or math.isfinite(value) else None

