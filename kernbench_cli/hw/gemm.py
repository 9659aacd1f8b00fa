"""PE_GEMM: a rows x cols systolic array, output-, weight- or input-stationary."""

from __future__ import annotations

from kernbench_cli.config.schema import GemmConfig
from kernbench_cli.hw.engine import InOrderEngine, cycles_to_ps

DATAFLOWS = ("os", "ws", "is")


def gemm_cycles(m: int, k: int, n: int, rows: int, cols: int, dataflow: str = "os") -> int:
    """Cycles of C[m,n] = A[m,k] @ B[k,n] on an R x C systolic array, by dataflow.

    The array is folded over the GEMM; folds run back to back, each streaming
    the temporal dimension through the array plus the cycles to fill and
    drain its skew:

    - ``os`` (output stationary: C tiles stay): ``ceil(m/R) * ceil(n/C)``
      folds of ``k + R + C - 2`` cycles;
    - ``ws`` (weight stationary: B tiles stay, R rows load first):
      ``ceil(k/R) * ceil(n/C)`` folds of ``m + 2R + C - 2``;
    - ``is`` (input stationary: A tiles stay): ``ceil(k/R) * ceil(m/C)``
      folds of ``n + 2R + C - 2``.

    This is the number of cycles; SCALE-Sim 3.0.0 reports one less (the index
    of the last cycle) for every shape tried, stall-free
    (benchmarks/scalesim_check.py runs it; tests/model/test_gemm.py keeps its table).
    The tile planner of composites and the engine use this one function.
    """
    if dataflow == "os":
        return -(-m // rows) * -(-n // cols) * (k + rows + cols - 2)
    if dataflow == "ws":
        return -(-k // rows) * -(-n // cols) * (m + 2 * rows + cols - 2)
    if dataflow == "is":
        return -(-k // rows) * -(-m // cols) * (n + 2 * rows + cols - 2)
    raise ValueError(f"unknown dataflow {dataflow!r} (known: {', '.join(DATAFLOWS)})")


def gemm_passes(config: GemmConfig, width: int) -> int:
    """Times the array runs a GEMM's folds for operands `width` bytes wide (the wider of
    the two): `pe.gemm.passes.f32` for 4-byte operands, `.f16` for narrower ones."""
    return config.passes.f32 if width >= 4 else config.passes.f16


class GemmEngine(InOrderEngine):
    """In-order GEMM engine; one `run` per dot or per composite tile. `flops` counts 2·m·k·n.

    A GEMM takes `gemm_cycles` times the passes its operand width needs
    (`gemm_passes`): an f32 GEMM on a bf16 array runs every fold several times.
    """

    __slots__ = ("clock_hz", "cols", "config", "dataflow", "flops", "mac_passes", "rows")

    def __init__(self, config: GemmConfig, clock_hz: int):
        super().__init__()
        self.rows, self.cols, self.clock_hz = config.rows, config.cols, clock_hz
        self.dataflow = config.dataflow
        self.config = config
        self.flops = 0
        self.mac_passes = 0  # MACs x the array passes their width takes (energy)

    def duration_ps(self, m: int, k: int, n: int, width: int) -> int:
        cycles = gemm_cycles(m, k, n, self.rows, self.cols, self.dataflow)
        return cycles_to_ps(cycles * gemm_passes(self.config, width), self.clock_hz)

    def mac_passes_of(self, m: int, k: int, n: int, width: int) -> int:
        """MACs times array passes of one GEMM: what its energy is counted by."""
        return m * k * n * gemm_passes(self.config, width)

    def run(self, ready: int, m: int, k: int, n: int, width: int) -> tuple[int, int]:
        self.flops += 2 * m * k * n
        self.mac_passes += self.mac_passes_of(m, k, n, width)
        return self.occupy(ready, self.duration_ps(m, k, n, width))
