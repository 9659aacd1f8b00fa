"""`tl.program_id` and `tl.num_programs` on each axis: PE in cube, cube in SIP, SIP."""

from __future__ import annotations


def test_each_axis_counts_its_own_programs(run):
    """On a topology where the three axes differ (4 PEs a cube, 3 cubes a SIP, 2 SIPs),
    every PE writes its program ids and counts, and they verify."""
    result = run("axes", "axes")
    assert result.verified, result.checks
    assert result.num_pes == 24
