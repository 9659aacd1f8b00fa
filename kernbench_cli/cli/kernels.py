"""`kernbench kernels [NAME]`: what kernels there are and what parameters they take."""

from __future__ import annotations

from typing import Annotated

import typer


def kernels(
    name: Annotated[str | None, typer.Argument(
        help="A kernel name or .py path: show its parameters.", metavar="KERNEL")] = None,
) -> None:
    """List the shipped kernels, or one kernel's parameters, defaults, choices and presets."""
    from rich.table import Table
    from rich.text import Text

    from kernbench_cli.cli.common import echo_rich
    from kernbench_cli.sim.kernels import load_kernel, shipped_kernels

    if name is None:
        table = Table(title="Kernels (kernbench kernels NAME for parameters)")
        table.add_column("kernel")
        table.add_column("what it is")
        for kernel_name in shipped_kernels():
            doc = load_kernel(kernel_name).doc.splitlines()
            table.add_row(kernel_name, doc[0] if doc else "")
        echo_rich(table)
        return
    kernel = load_kernel(name)
    doc = kernel.doc
    table = Table(title=f"{kernel.name} parameters (-p name=value)")
    for col in ("parameter", "default", "unit", "description"):
        table.add_column(col, overflow="fold")
    for param, default in kernel.params.items():
        text, unit = kernel.info(param)
        choices = kernel.choices.get(param) or tuple(kernel.presets.get(param, {}))
        if choices:
            text += f" (one of: {', '.join(map(str, choices))})"
        table.add_row(param, str(default), unit or type(default).__name__, text)
    lines = [f"-p {param}={value} sets " + ", ".join(f"{k}={v}" for k, v in sets.items())
             for param, presets in kernel.presets.items() for value, sets in presets.items()
             if sets]
    echo_rich(*([Text(doc), ""] if doc else []), table, *(Text(line) for line in lines))
