"""Check PE_GEMM's cycle function against SCALE-Sim 3.0.0, for each dataflow.

SCALE-Sim needs numpy < 2.4, so it lives in a venv of its own:

    python3 -m venv .scalesim && .scalesim/bin/pip install "numpy<2.4" scalesim
    .scalesim/bin/python benchmarks/scalesim_check.py

For each dataflow (os, ws, is), array shape and GEMM it runs SCALE-Sim with
SRAMs large enough and bandwidth high enough that no stall occurs, reads the
compute cycles ("Total Cycles" minus "Stall Cycles") from COMPUTE_REPORT.csv,
and prints them beside kernbench's `gemm_cycles` minus one: SCALE-Sim reports
the index of the last cycle, kernbench the number of cycles. The function is
copied below, so this script imports nothing of kernbench's and runs in
SCALE-Sim's venv. tests/model/test_gemm.py keeps the table this printed.
"""

from __future__ import annotations

import contextlib
import csv
import io
import sys
import tempfile
from pathlib import Path

CASES = [  # (rows, cols, M, K, N): square and not, ragged, and skinny decode shapes (M = 4)
    (4, 4, 4, 4, 4), (8, 8, 16, 32, 16), (8, 8, 13, 7, 21), (16, 16, 64, 128, 64),
    (16, 16, 17, 100, 33), (8, 16, 40, 24, 50), (16, 4, 33, 9, 10), (32, 8, 1, 512, 128),
    (16, 16, 4, 128, 256), (16, 16, 4, 256, 128), (4, 64, 4, 128, 512), (8, 8, 1, 1, 1),
]
DATAFLOWS = ("os", "ws", "is")

CONFIG = """\
[general]
run_name = check

[architecture_presets]
ArrayHeight:    {rows}
ArrayWidth:     {cols}
IfmapSramSzkB:    65536
FilterSramSzkB:   65536
OfmapSramSzkB:    65536
IfmapOffset:    0
FilterOffset:   10000000
OfmapOffset:    20000000
Bandwidth : 4096
Dataflow : {dataflow}
MemoryBanks:   1
ReadRequestBuffer: 32
WriteRequestBuffer: 32

[layout]
IfmapCustomLayout: False
IfmapSRAMBankBandwidth: 10
IfmapSRAMBankNum: 10
IfmapSRAMBankPort: 2
FilterCustomLayout: False
FilterSRAMBankBandwidth: 10
FilterSRAMBankNum: 10
FilterSRAMBankPort: 2

[sparsity]
SparsitySupport : false
SparseRep : ellpack_block
OptimizedMapping : false
BlockSize : 8
RandomNumberGeneratorSeed : 40

[run_presets]
InterfaceBandwidth: USER
UseRamulatorTrace: False
"""


def gemm_cycles(m: int, k: int, n: int, rows: int, cols: int, dataflow: str) -> int:
    """kernbench_cli.hw.gemm.gemm_cycles (the same function)."""
    folds, fold = {
        "os": (-(-m // rows) * -(-n // cols), k + rows + cols - 2),
        "ws": (-(-k // rows) * -(-n // cols), m + 2 * rows + cols - 2),
        "is": (-(-k // rows) * -(-m // cols), n + 2 * rows + cols - 2),
    }[dataflow]
    return folds * fold


def scalesim_cycles(rows: int, cols: int, m: int, k: int, n: int,
                    dataflow: str) -> tuple[int, int]:
    from scalesim.scale_sim import scalesim

    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "check.cfg"
        cfg.write_text(CONFIG.format(rows=rows, cols=cols, dataflow=dataflow))
        topo = Path(tmp) / "gemm.csv"
        topo.write_text(f"Layer, M, N, K,\ngemm, {m}, {n}, {k},\n")
        # SCALE-Sim 3 insists on a layout file even when no custom layout is used.
        layout = Path(tmp) / "layout.csv"
        layout.write_text("Layer, a, b, c, d, e, f, g, h,\ngemm, 1, 1, 1, 1, 1, 1, 1, 1,\n")
        sim = scalesim(save_disk_space=True, verbose=False, config=str(cfg), topology=str(topo),
                       layout=str(layout), input_type_gemm=True)
        with contextlib.redirect_stdout(io.StringIO()):
            sim.run_scale(top_path=tmp)
        (report,) = Path(tmp).rglob("COMPUTE_REPORT.csv")
        row = next(csv.DictReader(report.open(), skipinitialspace=True))
        return int(row["Total Cycles"]), int(row["Stall Cycles"])


def main() -> int:
    print(f"{'flow':>4} {'array':>9} {'M':>5} {'K':>5} {'N':>5} {'scalesim':>9} {'stalls':>6} "
          f"{'kernbench-1':>11} {'diff':>5}")
    worst = 0
    for dataflow in DATAFLOWS:
        for rows, cols, m, k, n in CASES:
            total, stalls = scalesim_cycles(rows, cols, m, k, n, dataflow)
            ours = gemm_cycles(m, k, n, rows, cols, dataflow) - 1
            worst = max(worst, abs(total - stalls - ours))
            print(f"{dataflow:>4} {rows:>4}x{cols:<4} {m:>5} {k:>5} {n:>5} {total:>9} "
                  f"{stalls:>6} {ours:>11} {total - stalls - ours:>5}", flush=True)
    print(f"largest |difference| in compute cycles: {worst}")
    return 0 if worst == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
