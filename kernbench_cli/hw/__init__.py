"""How blocks behave in time: one component per hardware block.

Per-PE engines are in order, so their timing is arithmetic (``start =
max(ready, free_at)``); shared blocks (links, HBM slices) keep a reservation
calendar. Nothing here imports the kernel language.
"""
