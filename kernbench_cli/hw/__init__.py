"""How blocks behave in time: one component per hardware block, and the timing pass.

Per-PE engines are in order, so their timing is arithmetic (``start =
max(ready, free_at)``); shared blocks (links, HBM slices) keep a reservation
calendar. `timing` times the command streams the functional pass emitted
(`kernbench_cli.stream`) on them. Nothing here imports the kernel language.
"""
