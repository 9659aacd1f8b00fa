"""PE_GEMM: an output-stationary systolic array of rows x cols MACs."""

from __future__ import annotations

from kernbench_cli.config.schema import GemmConfig
from kernbench_cli.hw.engine import InOrderEngine, cycles_to_ps


def os_gemm_cycles(m: int, k: int, n: int, rows: int, cols: int) -> int:
    """Compute cycles of C[m,n] = A[m,k] @ B[k,n] on an R x C output-stationary array.

    ``ceil(m/R) * ceil(n/C) * (k + R + C - 2) - 1``: each fold maps an R x C
    block of C onto the array, streams k operand wavefronts through it and
    needs R + C - 2 more cycles to fill and drain the skew; folds run back to
    back. This is SCALE-Sim 3.0.0's compute-cycle count for the OS dataflow
    without memory stalls (the -1: SCALE-Sim reports the index of the last
    cycle); benchmarks/scalesim_check.py runs SCALE-Sim to confirm it, and
    tests/test_gemm.py holds a table of its answers.
    """
    folds = -(-m // rows) * -(-n // cols)
    return folds * (k + rows + cols - 2) - 1


class GemmEngine(InOrderEngine):
    """In-order GEMM engine; one `run` per dot or per composite tile. `flops` counts 2·m·k·n."""

    __slots__ = ("clock_hz", "cols", "flops", "rows")

    def __init__(self, config: GemmConfig, clock_hz: int):
        super().__init__()
        self.rows, self.cols, self.clock_hz = config.rows, config.cols, clock_hz
        self.flops = 0

    def duration_ps(self, m: int, k: int, n: int) -> int:
        return cycles_to_ps(os_gemm_cycles(m, k, n, self.rows, self.cols), self.clock_hz)

    def run(self, ready: int, m: int, k: int, n: int) -> tuple[int, int]:
        self.flops += 2 * m * k * n
        return self.occupy(ready, self.duration_ps(m, k, n))
