"""`kernbench run`: simulate a kernel on a topology and report where the time went."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from kernbench_cli.cli.common import CostsOpt, JsonOpt, TopologyOpt, load_address_map
from kernbench_cli.errors import KernbenchError, VerificationError


def run(
    kernel: Annotated[str, typer.Argument(help="Kernel name (sharded_gemm, …) or .py path.")],
    topology: TopologyOpt = None,
    costs: CostsOpt = None,
    param: Annotated[list[str] | None, typer.Option(
        "--param", "-p", help="Kernel parameter as name=value; repeatable.")] = None,
    per_pe: Annotated[bool, typer.Option("--per-pe", help="Also show each PE.")] = False,
    as_json: JsonOpt = False,
    save: Annotated[Path | None, typer.Option(
        help="Write inputs and outputs to this .npz file.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the input data.")] = 0,
    timing_only: Annotated[bool, typer.Option(
        "--timing-only", help="Skip values and verification (faster; for sweeps).")] = False,
) -> None:
    """Run KERNEL on every PE of the topology, verify it, and report the time."""
    from kernbench_cli.report import run as report
    from kernbench_cli.sim.kernels import load_kernel, parse_params
    from kernbench_cli.sim.run import run_kernel

    if save is not None and timing_only:
        raise KernbenchError("--save needs values: it cannot go with --timing-only")
    module = load_kernel(kernel)
    params = parse_params(module, param or [])
    amap = load_address_map(topology, costs)
    result = run_kernel(module, amap, params, seed=seed, timing_only=timing_only)
    if save is not None:
        _save_npz(save, {**result.inputs, **result.outputs})
    if as_json:
        typer.echo(json.dumps(report.to_json(result, per_pe), sort_keys=True, indent=2))
    else:
        from rich.console import Console

        Console().print(report.render(result, per_pe))
    if result.verified is False:
        failed = [c for c in result.checks if not c.passed]
        raise VerificationError("verification failed: " + "; ".join(
            f"{c.name} max |err| {c.max_abs_err:.3g} exceeds atol {c.atol:g} + rtol {c.rtol:g}"
            for c in failed))


def _save_npz(path: Path, arrays: dict) -> None:
    """Write atomically: a whole file or none."""
    import numpy as np

    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise KernbenchError(f"--save {path}: folder {str(folder)!r} does not exist")
    handle, tmp = tempfile.mkstemp(dir=folder, suffix=".npz.tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            np.savez(out, **{k: np.asarray(v) for k, v in arrays.items()})
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise KernbenchError(f"--save {path}: {exc.strerror}") from None
