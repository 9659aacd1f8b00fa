"""PE_MATH: a vector unit of `lanes` lanes with a per-op-class cost."""

from __future__ import annotations

from dataclasses import fields

from kernbench_cli.config.schema import MathConfig
from kernbench_cli.hw.engine import InOrderEngine, cycles_to_ps


class MathEngine(InOrderEngine):
    """``ceil(elements / lanes) * op_cycles[kind]`` cycles per command.

    `kind` is one of the `[pe.math.op_cycles]` classes (add, mul, div, cmp,
    exp, log, sqrt, reduce, cast); elements are those of the result, or of
    the input for a reduction.
    """

    __slots__ = ("clock_hz", "elements", "lanes", "op_cycles")

    def __init__(self, config: MathConfig, clock_hz: int):
        super().__init__()
        self.elements = 0  # elements computed (the timing pass counts them)
        self.lanes, self.clock_hz = config.lanes, clock_hz
        self.op_cycles = {f.name: getattr(config.op_cycles, f.name)
                          for f in fields(config.op_cycles)}

    def duration_ps(self, kind: str, elements: int) -> int:
        cycles = -(-elements // self.lanes) * self.op_cycles[kind]
        return cycles_to_ps(cycles, self.clock_hz)

    def run(self, ready: int, kind: str, elements: int) -> tuple[int, int]:
        return self.occupy(ready, self.duration_ps(kind, elements))
