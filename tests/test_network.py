"""Shared links and HBM slices: reservation, contention, routes."""

from __future__ import annotations

from kernbench_cli.address.physaddr import PeCoord
from kernbench_cli.hw.network import Calendar, Network, book, transfer_ps
from kernbench_cli.hw.system import System


def test_transfer_time_rounds_up_to_a_picosecond():
    assert transfer_ps(1024, 51_200_000_000) == 20_000  # 1 KiB at 51.2 GB/s = 20 ns
    assert transfer_ps(1, 3_000_000_000) == 334


def test_calendar_fills_gaps_and_merges_touching_intervals():
    cal = Calendar("noc", "x", 1, 0)
    assert cal.fit(0, 10) == 0
    cal.reserve(0, 10)
    cal.reserve(30, 10)
    assert cal.fit(5, 10) == 10  # the gap [10, 30) takes it
    assert cal.fit(5, 25) == 40  # too long for the gap
    cal.reserve(10, 20)
    assert (list(cal.starts), list(cal.ends)) == ([0], [40])
    assert cal.busy_ps == 40 and cal.ops == 3


def test_book_finds_one_start_free_on_every_resource():
    a, b = Calendar("noc", "a", 1, 0), Calendar("noc", "b", 1, 0)
    a.reserve(0, 10)
    b.reserve(10, 10)
    assert book((a, b), (5, 5), 0) == 20


def _pe(n: int) -> PeCoord:
    return PeCoord(0, 0, 0, n)


def test_noc_routes_go_x_then_y(amap):
    net = Network(amap.topology)  # default: 4 x 2 PE mesh
    route = net.route(_pe(0), _pe(7))  # (0,0) -> (3,1)
    assert [c.name.split()[-1] for c in route.resources] == [
        "pe0->pe1", "pe1->pe2", "pe2->pe3", "pe3->pe7"]
    assert route.latency_ps == 4 * amap.topology.noc.latency
    assert net.route(_pe(7), _pe(0)).resources[0].name.endswith("pe7->pe6")  # directed links


def test_cross_cube_routes_use_ucie(amaps):
    net = Network(amaps["sip"].topology)  # 4 x 2 cube mesh
    route = net.route(PeCoord(0, 0, 0, 5), PeCoord(0, 0, 5, 5))  # cube (0,0) -> (1,1)
    assert route.hops == {"noc": 0, "ucie": 2, "sip_link": 0, "rack_link": 0}


def _dma_pair(amap, src_a, dst_a, src_b, dst_b, nbytes=64 * 1024):
    """Both transfers issued at t=0 by the DMA of their destination PE."""
    system = System(amap)
    net = system.network
    ends = []
    for src, dst in ((src_a, dst_a), (src_b, dst_b)):
        pe = system.pes[system.pid_of[dst]]
        ends.append(pe.dma.transfer(0, nbytes, net.path(src, dst, hbm_at=src))[1])
    return ends


def test_two_transfers_over_one_link_take_twice_as_long(amap):
    topo = amap.topology
    nbytes = 64 * 1024
    alone = _dma_pair(amap, _pe(2), _pe(0), _pe(6), _pe(5), nbytes)[0]
    # 2 -> 0 uses links 2->1, 1->0; 3 -> 1 uses 3->2, 2->1: they share 2->1
    first, second = _dma_pair(amap, _pe(2), _pe(0), _pe(3), _pe(1), nbytes)
    noc = transfer_ps(nbytes, topo.noc.bandwidth)  # 64 GB/s: the path's bottleneck
    assert noc > transfer_ps(nbytes, topo.hbm.bandwidth)
    setup, fixed = topo.pe.dma.setup, topo.hbm.latency + 2 * topo.noc.latency
    assert alone == first == setup + noc + fixed
    assert second == setup + 2 * noc + fixed  # streams after the first leaves the shared link


def test_two_readers_of_one_hbm_slice_take_twice_as_long(amap):
    topo = amap.topology
    nbytes = 64 * 1024
    hbm = transfer_ps(nbytes, topo.hbm.bandwidth)
    noc = transfer_ps(nbytes, topo.noc.bandwidth)
    # 0 -> 1 (east) and 0 -> 4 (south) share only PE 0's HBM slice
    first, second = _dma_pair(amap, _pe(0), _pe(1), _pe(0), _pe(4), nbytes)
    setup, fixed = topo.pe.dma.setup, topo.hbm.latency + topo.noc.latency
    assert first == setup + noc + fixed
    assert second == setup + hbm + noc + fixed  # the slice is busy for `hbm` first


def test_transfers_on_disjoint_resources_do_not_interact(amap):
    first, second = _dma_pair(amap, _pe(0), _pe(0), _pe(5), _pe(5))
    assert first == second
