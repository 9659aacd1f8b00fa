"""The PE's engines, listed once.

Every module that names the engines reads this table: the PE's attributes and the TOML
sections `[pe.<name>]`, the walk's and op log's engine codes, the report's rows and the
JSON keys, the energy parts (each engine's, then the rest), dedup's copying and the
Chrome trace's tracks. Adding an engine starts here (docs/architecture.md has the
checklist).
"""

from __future__ import annotations

from typing import NamedTuple


class EngineKind(NamedTuple):
    """One engine: `name` (TOML section, `Pe` attribute, report row, JSON key, energy
    part), `code` (the walk's and op log's), `title` (as the design names it) and what
    it does."""

    name: str
    code: int
    title: str
    does: str


#: The engines in report order; a code is its index.
TABLE: tuple[EngineKind, ...] = (
    EngineKind("cpu", 0, "PE_CPU", "issues the kernel's commands in order"),
    EngineKind("scheduler", 1, "PE_SCHEDULER", "queues commands and plans composites' tiles"),
    EngineKind("dma", 2, "PE_DMA", "loads, stores, message copies and tile moves"),
    EngineKind("gemm", 3, "PE_GEMM", "the systolic array: dots and composite tiles"),
    EngineKind("math", 4, "PE_MATH", "the vector unit: element-wise, reductions, casts"),
)
#: Engine names, in report order.
ENGINES: tuple[str, ...] = tuple(e.name for e in TABLE)
PE_CPU, PE_SCHEDULER, PE_DMA, PE_GEMM, PE_MATH = (e.code for e in TABLE)
assert all(e.code == i for i, e in enumerate(TABLE))
