"""`kernbench kernels [NAME]`: what kernels there are and what parameters they take."""

from __future__ import annotations

from typing import Annotated

import typer


def kernels(
    name: Annotated[str | None, typer.Argument(
        help="A kernel name or .py path: show its parameters.")] = None,
) -> None:
    """List the shipped kernels, or one kernel's parameters, defaults, choices and presets."""
    from rich.console import Console
    from rich.table import Table

    from kernbench_cli.sim.kernels import load_kernel, shipped_kernels

    console = Console()
    if name is None:
        table = Table(title="Kernels (kernbench kernels NAME for parameters)")
        table.add_column("kernel")
        table.add_column("what it is")
        for kernel_name in shipped_kernels():
            doc = (load_kernel(kernel_name).module.__doc__ or "").strip().splitlines()
            table.add_row(kernel_name, doc[0] if doc else "")
        console.print(table)
        return
    kernel = load_kernel(name)
    doc = (kernel.module.__doc__ or "").strip()
    if doc:
        console.print(doc, markup=False, highlight=False)
    table = Table(title=f"{kernel.name} parameters (-p name=value)")
    for col in ("parameter", "default", "type", "choices"):
        table.add_column(col)
    for param, default in kernel.params.items():
        choices = kernel.choices.get(param) or tuple(kernel.presets.get(param, {}))
        table.add_row(param, str(default), type(default).__name__,
                      ", ".join(map(str, choices)))
    console.print(table)
    for param, presets in kernel.presets.items():
        for value, sets in presets.items():
            if sets:
                console.print(f"-p {param}={value} sets "
                              + ", ".join(f"{k}={v}" for k, v in sets.items()), markup=False,
                              highlight=False)
