"""Check PE_GEMM's cycle formula against SCALE-Sim 3.0.0 (output stationary).

SCALE-Sim needs numpy < 2.4, so it lives in a venv of its own:

    python3 -m venv .scalesim && .scalesim/bin/pip install "numpy<2.4" scalesim
    .scalesim/bin/python benchmarks/scalesim_check.py

For each array shape and GEMM it runs SCALE-Sim with SRAMs large enough and
bandwidth high enough that no stall occurs, reads the compute cycles from
COMPUTE_REPORT.csv, and prints them beside kernbench's
`os_gemm_cycles` (copied below, so this script imports nothing of
kernbench's and runs in SCALE-Sim's venv). tests/test_gemm.py keeps the
table this printed.
"""

from __future__ import annotations

import contextlib
import csv
import io
import sys
import tempfile
from pathlib import Path

CASES = [  # (rows, cols, M, K, N)
    (4, 4, 4, 4, 4), (8, 8, 16, 32, 16), (8, 8, 13, 7, 21), (16, 16, 64, 128, 64),
    (16, 16, 17, 100, 33), (32, 32, 32, 64, 32), (8, 16, 40, 24, 50), (16, 4, 33, 9, 10),
    (32, 8, 1, 512, 128), (128, 128, 256, 256, 256),
]

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
Dataflow : os
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


def os_gemm_cycles(m: int, k: int, n: int, rows: int, cols: int) -> int:
    """kernbench_cli.hw.gemm.os_gemm_cycles (same formula)."""
    return -(-m // rows) * -(-n // cols) * (k + rows + cols - 2) - 1


def scalesim_cycles(rows: int, cols: int, m: int, k: int, n: int) -> tuple[int, int]:
    from scalesim.scale_sim import scalesim

    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "check.cfg"
        cfg.write_text(CONFIG.format(rows=rows, cols=cols))
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
    print(f"{'array':>9} {'M':>5} {'K':>5} {'N':>5} {'scalesim':>9} {'stalls':>6} "
          f"{'kernbench':>9} {'diff':>5}")
    worst = 0
    for rows, cols, m, k, n in CASES:
        total, stalls = scalesim_cycles(rows, cols, m, k, n)
        ours = os_gemm_cycles(m, k, n, rows, cols)
        worst = max(worst, abs(total - stalls - ours))
        print(f"{rows:>4}x{cols:<4} {m:>5} {k:>5} {n:>5} {total:>9} {stalls:>6} {ours:>9} "
              f"{total - stalls - ours:>5}")
    print(f"largest |difference| in compute cycles: {worst}")
    return 0 if worst == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
