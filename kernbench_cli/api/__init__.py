"""The Python API behind `import kernbench_cli as kb` (docs/api.md), one module per concern.

`kernbench_cli/__init__.py` lends these names out lazily: `runs` (load a kernel, a topology
or a trace; run; replay), `sweeps`, `comparison`, and the frozen result types in `result`.
The Typer CLI (`kernbench_cli.cli`) is a thin layer over them.
"""
