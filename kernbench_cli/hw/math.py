"""PE_MATH: a vector unit of `lanes` lanes with a per-op-class cost."""

from __future__ import annotations

from dataclasses import fields

from kernbench_cli.config.schema import MathConfig
from kernbench_cli.hw.engine import InOrderEngine, cycles_to_ps


class MathEngine(InOrderEngine):
    """A pipelined vector unit: ``ceil(elements / lanes) * op_cycles[kind]`` cycles of issue
    per command, and the result ready ``latency[kind]`` cycles after its last element.

    `kind` is one of the `[pe.math.op_cycles]` classes (add, mul, div, cmp,
    exp, log, sqrt, reduce, cast); elements are those of the result, or of
    the input for a reduction. The unit takes the next command as soon as the
    last element of one has entered the pipeline (busy time is the issue
    cycles), so independent commands overlap their latencies and only a
    command that consumes a result waits for it (its producer's end includes
    the latency).
    """

    __slots__ = ("by_class", "clock_hz", "elements", "lanes", "latency", "op_cycles")

    def __init__(self, config: MathConfig, clock_hz: int):
        super().__init__()
        self.elements = 0  # elements computed (the timing pass counts them)
        self.by_class = {f.name: 0 for f in fields(config.op_cycles)}  # and by op class
        self.lanes, self.clock_hz = config.lanes, clock_hz
        self.op_cycles = {f.name: getattr(config.op_cycles, f.name)
                          for f in fields(config.op_cycles)}
        self.latency = {f.name: cycles_to_ps(getattr(config.latency, f.name), clock_hz)
                        for f in fields(config.latency)}

    def duration_ps(self, kind: str, elements: int) -> int:
        """Issue time of a command: how long it holds the unit."""
        cycles = -(-elements // self.lanes) * self.op_cycles[kind]
        return cycles_to_ps(cycles, self.clock_hz)

    def run(self, ready: int, kind: str, elements: int) -> tuple[int, int]:
        """(start, when the result is ready)."""
        start, end = self.occupy(ready, self.duration_ps(kind, elements))
        return start, end + self.latency[kind]
