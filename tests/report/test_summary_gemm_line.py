"""The summary's GEMM line: utilisations at one pass a MAC, and, where MACs took more
passes (f32), the share of the array's cells at work."""

from __future__ import annotations

import kernbench_cli as kb
from kernbench_cli.report.run import gemm_array_utilization, gemm_text


def test_an_f32_gemm_says_its_cells_were_at_work_three_times_its_mac_rate():
    """f32 sharded_gemm on `default`: 8,388,608 MACs a PE in 104,064 busy cycles of a
    16x16 array is 31.5% at one pass a MAC, which read as the array's occupancy; at f32's
    3 passes a MAC its cells were at work 94.5% of the time. An f16 GEMM's line is as
    before."""
    f32 = kb.run("sharded_gemm", params={"dtype": "f32"}, timing_only=True).raw
    used = gemm_array_utilization(f32)
    assert f"{used:.1%}" == "31.5%"
    assert gemm_text(f32).endswith(f"array {used:.1%} used while busy, at one pass a MAC; "
                                   "these took 3 passes a MAC (pe.gemm.passes), so its cells "
                                   f"were at work {3 * used:.1%} of the time it was busy")
    assert f"{3 * used:.1%}" == "94.5%"
    f16 = kb.run("sharded_gemm", timing_only=True).raw
    assert gemm_text(f16).endswith(f"array {gemm_array_utilization(f16):.1%} used while busy")
    two = kb.run("sharded_gemm", timing_only=True, set=["pe.gemm.passes.f16=2"]).raw
    assert "these took 2 passes a MAC (pe.gemm.passes)" in gemm_text(two)  # not "f32"
