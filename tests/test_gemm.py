"""PE_GEMM against SCALE-Sim 3.0.0 (output stationary, stall-free).

The table is what benchmarks/scalesim_check.py printed when run with
SCALE-Sim 3.0.0 in its own venv ("Total Cycles" minus "Stall Cycles" of
COMPUTE_REPORT.csv, with SRAMs and bandwidth large enough for zero stalls).
"""

import pytest

from kernbench_cli.config.schema import GemmConfig
from kernbench_cli.hw.gemm import GemmEngine, os_gemm_cycles

SCALESIM_3_0_0 = [  # rows, cols, M, K, N, compute cycles
    (4, 4, 4, 4, 4, 9),
    (8, 8, 16, 32, 16, 183),
    (8, 8, 13, 7, 21, 125),
    (16, 16, 64, 128, 64, 2527),
    (16, 16, 17, 100, 33, 779),
    (32, 32, 32, 64, 32, 125),
    (8, 16, 40, 24, 50, 919),
    (16, 4, 33, 9, 10, 242),
    (32, 8, 1, 512, 128, 8799),
    (128, 128, 256, 256, 256, 2039),
]


@pytest.mark.parametrize(("rows", "cols", "m", "k", "n", "cycles"), SCALESIM_3_0_0)
def test_cycles_equal_scalesim(rows, cols, m, k, n, cycles):
    assert os_gemm_cycles(m, k, n, rows, cols) == cycles


def test_folds_run_back_to_back():
    # one more row than the array holds doubles the folds: 2 x (K + R + C - 2) - 1
    assert os_gemm_cycles(17, 10, 16, 16, 16) == 2 * (10 + 30) - 1
    assert os_gemm_cycles(16, 10, 16, 16, 16) == (10 + 30) - 1


def test_engine_converts_cycles_at_the_pe_clock_and_runs_in_order():
    engine = GemmEngine(GemmConfig(rows=8, cols=8), clock_hz=1_250_000_000)  # 800 ps/cycle
    assert engine.duration_ps(13, 7, 21) == 125 * 800
    assert engine.run(0, 13, 7, 21) == (0, 100_000)
    assert engine.run(50_000, 8, 8, 8) == (100_000, 100_000 + (8 + 14 - 1) * 800)
    assert engine.busy_ps == 100_000 + 21 * 800
    assert engine.ops == 2
