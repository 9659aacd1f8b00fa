"""PE_DMA and HBM: the DMA window and setup overlap, HBM refresh and page openings, each
against a formula from the statement of the model in docs/model.md, and the order in which
PE_DMA serves a composite's tiles and the kernel's own commands."""

from __future__ import annotations

from kernbench_cli.hw.network import hbm_stream_bandwidth, pages_opened, transfer_ps
from tests.conftest import test_topology


def _topology(name):
    from kernbench_cli.address import load_address_map

    return load_address_map(test_topology(name)).topology


def test_a_cross_sip_load_is_bound_by_the_dma_window(run):
    """256 KiB over a 2.1 us round trip (HBM 100 ns + two SIP links of 500 ns, and the way
    back): the first 64 KiB stream at the slice's rate, each next 64 KiB one round trip
    later. A window of 1 MiB leaves the bandwidth as the bound."""
    topo = _topology("two_sips")
    rate = hbm_stream_bandwidth(topo.hbm)  # the bottleneck: the slice, not the 100 GB/s link
    one_way = topo.hbm.latency + 2 * topo.sip_link.latency
    round_trip = one_way + 2 * topo.sip_link.latency
    assert (one_way, round_trip) == (1_100_000, 2_100_000)
    result = run("window_load", "two_sips", timing_only=True)
    assert result.latency_ps == 4_000 + topo.pe.dma.setup + 3 * round_trip \
        + transfer_ps(65_536, rate) + one_way
    assert 3 * round_trip + transfer_ps(65_536, rate) > 1.3 * transfer_ps(262_144, rate)


def test_a_window_that_covers_the_round_trip_streams_at_the_bandwidth(cli):
    import json
    from pathlib import Path

    kernel = Path(__file__).parents[1] / "kernels" / "window_load.py"
    topo = _topology("two_sips")
    code, out, _ = cli("run", str(kernel), "-t", test_topology("two_sips"), "--timing-only",
                       "--json", "--set", "pe.dma.outstanding=1MiB")
    assert code == 0
    assert json.loads(out)["latency_ps"] == 4_000 + topo.pe.dma.setup + transfer_ps(
        262_144, hbm_stream_bandwidth(topo.hbm)) + topo.hbm.latency + 2 * topo.sip_link.latency


def test_strided_rows_pay_for_the_pages_they_open(run):
    """64 rows of 64 B, 8 KiB apart: 64 pages, each a quarter of tFAW (15 ns / 4 activates on
    the one channel), 240 ns, against 4 KiB at the stream rate (85.7 ns)."""
    topo = _topology("one")
    assert (topo.hbm.page_size, topo.hbm.activate_window, topo.hbm.channels) == (1024, 15_000, 1)
    assert pages_opened(0, 64, 64, 8192, 1024) == 64
    result = run("strided_load", "one", timing_only=True)
    assert transfer_ps(4096, hbm_stream_bandwidth(topo.hbm)) == 85_715
    assert result.latency_ps == 4_000 + topo.pe.dma.setup + 64 * 3_750 + topo.hbm.latency


def test_pages_opened_counts_each_page_once_per_run_of_rows():
    assert pages_opened(0, 1, 4096, 4096, 1024) == 4  # a 4 KiB stream: 4 pages
    assert pages_opened(1000, 1, 100, 100, 1024) == 2  # across a page boundary
    assert pages_opened(0, 8, 64, 128, 1024) == 1  # 8 rows inside one open page
    assert pages_opened(0, 4, 512, 768, 1024) == 3  # rows 2 and 3 share the second page


def test_a_setup_overlaps_the_transfer_before(run, cli):
    """Two 4 KiB loads back to back: the second's setup runs while the first streams, so it
    streams the moment the first is done; without overlap it waits 20 ns more."""
    import json
    from pathlib import Path

    topo = _topology("one")
    stream = transfer_ps(4096, hbm_stream_bandwidth(topo.hbm))
    setup, hbm = topo.pe.dma.setup, topo.hbm.latency
    result = run("strided_load", "one", ("mode=blocks",), timing_only=True)
    assert result.latency_ps == 4_000 + setup + 2 * stream + hbm
    kernel = Path(__file__).parents[1] / "kernels" / "strided_load.py"
    code, out, _ = cli("run", str(kernel), "-t", test_topology("one"), "-p", "mode=blocks",
                       "--timing-only", "--json", "--set", "pe.dma.setup_overlap=false")
    assert code == 0
    assert json.loads(out)["latency_ps"] == 4_000 + 2 * (setup + stream) + hbm
    busy = result.engines["dma"].busy_ps[0]
    assert busy == setup + 2 * stream  # the second setup hid under the first transfer


def test_a_load_after_a_long_composite_starts_within_a_tile(run):
    """The DMA serves the composite's tiles and the kernel's commands in issue order: a load
    issued while the tiles stream waits at most for one tile's operands in progress, not
    for the whole tile stream (as it would were the stream booked at the composite's
    issue)."""
    result = run("late_load", "default")
    records = [r for r in result.oplog if r[1] == 0]
    (load,) = [r for r in records if r[3] == "load"]
    tiles = [r for r in records if r[3] == "load_tile"]
    one_tile = 2 * max(r[6] - r[5] for r in tiles)  # an A tile and a B tile
    composite = next(r for r in records if r[3] == "composite")
    assert composite[5] < load[4] and composite[6] - load[4] > 10 * one_tile  # mid-stream
    assert load[5] - load[4] <= one_tile
