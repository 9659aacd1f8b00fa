"""`tl.program_id` and `tl.num_programs` on each axis: PE in cube, cube in SIP, SIP."""

from __future__ import annotations


def test_each_adr0022_axis_on_a_topology_where_they_differ(run):
    """program_id / num_programs per axis: PE in cube, cube in SIP, SIP (4, 3 and 2 here)."""
    result = run("axes", "axes")
    assert result.verified, result.checks
    assert result.num_pes == 24
