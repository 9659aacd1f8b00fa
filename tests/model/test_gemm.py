"""PE_GEMM against SCALE-Sim 3.0.0, for each dataflow (stall-free).

The table is what benchmarks/scalesim_check.py printed when run with
SCALE-Sim 3.0.0 in its own venv ("Total Cycles" minus "Stall Cycles" of
COMPUTE_REPORT.csv, with SRAMs and bandwidth large enough for zero stalls).
SCALE-Sim reports the index of the last cycle, so a GEMM takes one cycle more
than it says: the -1 applies once per GEMM, never per fold or per tile.
"""

import pytest

from kernbench_cli.config.schema import GemmConfig
from kernbench_cli.errors import ConfigError
from kernbench_cli.hw.gemm import GemmEngine, gemm_cycles

SCALESIM_3_0_0 = [  # dataflow, rows, cols, M, K, N, compute cycles SCALE-Sim reports
    ("os", 4, 4, 4, 4, 4, 9),
    ("os", 8, 8, 16, 32, 16, 183),
    ("os", 8, 8, 13, 7, 21, 125),
    ("os", 16, 16, 64, 128, 64, 2527),
    ("os", 16, 16, 17, 100, 33, 779),
    ("os", 8, 16, 40, 24, 50, 919),
    ("os", 16, 4, 33, 9, 10, 242),
    ("os", 32, 8, 1, 512, 128, 8799),
    ("os", 16, 16, 4, 128, 256, 2527),
    ("os", 16, 16, 4, 256, 128, 2287),
    ("os", 4, 64, 4, 128, 512, 1551),
    ("os", 8, 8, 1, 1, 1, 14),
    ("ws", 4, 4, 4, 4, 4, 13),
    ("ws", 8, 8, 16, 32, 16, 303),
    ("ws", 8, 8, 13, 7, 21, 104),
    ("ws", 16, 16, 64, 128, 64, 3519),
    ("ws", 16, 16, 17, 100, 33, 1322),
    ("ws", 8, 16, 40, 24, 50, 839),
    ("ws", 16, 4, 33, 9, 10, 200),
    ("ws", 32, 8, 1, 512, 128, 18175),
    ("ws", 16, 16, 4, 128, 256, 6399),
    ("ws", 16, 16, 4, 256, 128, 6399),
    ("ws", 4, 64, 4, 128, 512, 18943),
    ("ws", 8, 8, 1, 1, 1, 22),
    ("is", 4, 4, 4, 4, 4, 13),
    ("is", 8, 8, 16, 32, 16, 303),
    ("is", 8, 8, 13, 7, 21, 85),
    ("is", 16, 16, 64, 128, 64, 3519),
    ("is", 16, 16, 17, 100, 33, 1105),
    ("is", 8, 16, 40, 24, 50, 719),
    ("is", 16, 4, 33, 9, 10, 395),
    ("is", 32, 8, 1, 512, 128, 3167),
    ("is", 16, 16, 4, 128, 256, 2415),
    ("is", 16, 16, 4, 256, 128, 2783),
    ("is", 4, 64, 4, 128, 512, 18623),
    ("is", 8, 8, 1, 1, 1, 22),
]


@pytest.mark.parametrize(("dataflow", "rows", "cols", "m", "k", "n", "cycles"), SCALESIM_3_0_0)
def test_cycles_equal_scalesim_plus_one(dataflow, rows, cols, m, k, n, cycles):
    assert gemm_cycles(m, k, n, rows, cols, dataflow) == cycles + 1


def test_folds_run_back_to_back():
    # one more row than the array holds doubles the folds: 2 x (K + R + C - 2)
    assert gemm_cycles(17, 10, 16, 16, 16) == 2 * (10 + 30)
    assert gemm_cycles(16, 10, 16, 16, 16) == 10 + 30


def test_a_single_mac_takes_a_cycle():
    assert gemm_cycles(1, 1, 1, 1, 1) == 1


def test_decode_shapes_favour_input_stationary():
    """M = 4 query rows: OS keeps 4 of 16 rows busy; IS streams N through the array."""
    os_, ws, is_ = (gemm_cycles(4, 128, 256, 16, 16, d) for d in ("os", "ws", "is"))
    assert is_ < os_ < ws


def test_engine_converts_cycles_at_the_pe_clock_and_runs_in_order():
    engine = GemmEngine(GemmConfig(rows=8, cols=8), clock_hz=1_250_000_000)  # 800 ps/cycle
    assert engine.duration_ps(13, 7, 21, 2) == 126 * 800
    assert engine.run(0, 13, 7, 21, 2) == (0, 126 * 800)
    assert engine.run(50_000, 8, 8, 8, 2) == (126 * 800, 126 * 800 + (8 + 14) * 800)
    assert engine.busy_ps == (126 + 22) * 800
    # f32 operands: every fold three times (pe.gemm.passes.f32, bf16x3)
    assert engine.duration_ps(13, 7, 21, 4) == 3 * 126 * 800
    assert (engine.ops, engine.flops) == (2, 2 * (13 * 7 * 21 + 8 * 8 * 8))


def test_the_dataflow_is_a_topology_key(write_topology):
    from kernbench_cli.config import load_topology

    topo = load_topology(write_topology('[pe.gemm]\ndataflow = "is"\n'))
    assert topo.pe.gemm.dataflow == "is"
    engine = GemmEngine(topo.pe.gemm, topo.pe.clock)
    assert engine.duration_ps(4, 128, 256, 2) == gemm_cycles(4, 128, 256, 16, 16, "is") * 1000
    bad = write_topology('[pe.gemm]\ndataflow = "rs"\n', name="bad.toml")
    with pytest.raises(ConfigError, match=r'pe.gemm.dataflow: expected "os", "ws" or "is" '
                                          r"\(output, weight or input stationary\), got 'rs'"):
        load_topology(bad)
