"""Shared links and HBM slices: reservation, contention, routes."""

from __future__ import annotations

from kernbench_cli.address.physaddr import PeCoord
from kernbench_cli.config import load_topology
from kernbench_cli.hw.network import Calendar, Network, book, hbm_stream_bandwidth, transfer_ps
from kernbench_cli.hw.system import System
from tests.conftest import test_topology


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
    assert book((a, b), 5, 0) == (20, b)  # a frees at 10, then b is busy until 20


def _pe(n: int) -> PeCoord:
    return PeCoord(0, 0, 0, n)


def test_noc_routes_go_x_then_y(amap):
    net = Network(amap.topology)  # default: 4 x 2 PE mesh
    route = net.route(_pe(0), _pe(7))  # (0,0) -> (3,1)
    assert [c.name.split()[-1] for c in route.resources] == [
        "pe0->pe1", "pe1->pe2", "pe2->pe3", "pe3->pe7"]
    assert route.latency_ps == 4 * amap.topology.noc.latency
    assert net.route(_pe(7), _pe(0)).resources[0].name.endswith("pe7->pe6")  # directed links


def test_cross_cube_routes_cross_each_cubes_noc_to_its_ucie_ports(amaps):
    """sip: 4 x 2 cubes of 4 x 4 PEs; a cube's UCIe port on a side is the PE in the middle
    of that edge (E: x 3, y 2 = PE 11; W: PE 8; N: PE 2; S: PE 14)."""
    net = Network(amaps["sip"].topology)
    route = net.route(PeCoord(0, 0, 0, 5), PeCoord(0, 0, 5, 5))  # cube (0,0) -> (1,1)
    names = [c.name for c in route.resources]
    assert names == [
        "rack=0 sip=0 cube=0 pe5->pe6", "rack=0 sip=0 cube=0 pe6->pe7",  # to cube 0's E port
        "rack=0 sip=0 cube=0 pe7->pe11",
        "rack=0 sip=0 cube0->cube1",  # UCIe east
        "rack=0 sip=0 cube=1 pe8->pe9", "rack=0 sip=0 cube=1 pe9->pe10",  # W port to S port
        "rack=0 sip=0 cube=1 pe10->pe14",
        "rack=0 sip=0 cube1->cube5",  # UCIe south
        "rack=0 sip=0 cube=5 pe2->pe1", "rack=0 sip=0 cube=5 pe1->pe5",  # N port to PE 5
    ]
    assert route.hops == {"noc": 8, "ucie": 2, "sip_link": 0, "rack_link": 0}
    topo = amaps["sip"].topology
    assert route.latency_ps == 8 * topo.noc.latency + 2 * topo.ucie.latency


def test_cross_sip_routes_go_through_each_sips_port(amaps):
    """A SIP's link to the rack switch attaches at PE 0 of cube 0."""
    net = Network(amaps["rack"].topology)
    route = net.route(PeCoord(0, 1, 0, 5), PeCoord(0, 2, 0, 0))
    levels = [c.level for c in route.resources]
    assert levels == ["noc", "noc", "sip_link", "sip_link"]  # pe5 -> pe4 -> pe0, up, down
    assert [c.name for c in route.resources][2:] == ["rack=0 sip=1 up", "rack=0 sip=2 down"]


def test_a_cross_sip_transfer_crosses_both_sips_nocs_and_takes_the_configured_time(run):
    """two_sips: 2 SIPs of 2 x 1 cubes of 2 x 1 PEs. PE 3 (SIP 0, cube 1, PE 1) loads 1 KiB
    from PE 7's slice (SIP 1, cube 1, PE 1) and stores it back; neither end is at its SIP's
    port (cube 0, PE 0). Each way crosses, in each SIP, cube 1's NoC (PE 1 -> its W UCIe
    port, PE 0), the UCIe link, cube 0's NoC (its E port, PE 1 -> PE 0, the SIP port), and
    the two SIP links: 4 NoC hops, 2 UCIe, 2 SIP links, plus the slice. A transfer takes
    setup + max(bytes / the slowest of those, one page opened) + their latencies and the
    HBM's, all from the configuration. Fails if `Network._make_route` drops the
    destination SIP's leg (`self._within_sip(links, dst[:2], *SIP_PORT, dst.cube, dst.pe)`
    deleted: the load loses SIP 0's hops, the store SIP 1's)."""
    result = run("cross_sip", "two_sips")
    load, store = (r for r in result.oplog if r[1] == 3)
    topo = load_topology(test_topology("two_sips"))
    nbytes = 1024
    slowest = min(hbm_stream_bandwidth(topo.hbm), topo.noc.bandwidth, topo.ucie.bandwidth,
                  topo.sip_link.bandwidth)
    one_page = -(-topo.hbm.activate_window // (4 * topo.hbm.channels))
    stream = max(transfer_ps(nbytes, slowest), one_page)
    latency = (topo.hbm.latency + 4 * topo.noc.latency + 2 * topo.ucie.latency
               + 2 * topo.sip_link.latency)
    assert load[7] == store[7] == nbytes
    assert load[6] - load[5] == topo.pe.dma.setup + stream + latency
    assert store[5] == load[6]  # it stores what the load brought
    assert store[6] - store[5] == topo.pe.dma.setup + stream + latency
    hbm = ["hbm rack=0 sip=1 cube=1 pe=1"]
    assert [list(p) for p in result.oplog.paths] == [
        hbm + _to_port(1) + ["sip_link rack=0 sip=1 up", "sip_link rack=0 sip=0 down"]
        + _from_port(0),
        hbm + _to_port(0) + ["sip_link rack=0 sip=0 up", "sip_link rack=0 sip=1 down"]
        + _from_port(1)]


def _to_port(sip: int) -> list[str]:
    """two_sips: from cube 1's PE 1 to the SIP's port (cube 0, PE 0)."""
    return [f"noc rack=0 sip={sip} cube=1 pe1->pe0", f"ucie rack=0 sip={sip} cube1->cube0",
            f"noc rack=0 sip={sip} cube=0 pe1->pe0"]


def _from_port(sip: int) -> list[str]:
    return [f"noc rack=0 sip={sip} cube=0 pe0->pe1", f"ucie rack=0 sip={sip} cube0->cube1",
            f"noc rack=0 sip={sip} cube=1 pe0->pe1"]


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
    noc = transfer_ps(nbytes, topo.noc.bandwidth)
    # 0 -> 1 (east) and 0 -> 4 (south) share only PE 0's HBM slice
    first, second = _dma_pair(amap, _pe(0), _pe(1), _pe(0), _pe(4), nbytes)
    setup, fixed = topo.pe.dma.setup, topo.hbm.latency + topo.noc.latency
    assert first == setup + noc + fixed
    # the first transfer's bytes leave the slice at the NoC's rate, so the slice is held for
    # `noc`, not for `bytes / its own bandwidth`: the second streams after that
    assert second == setup + 2 * noc + fixed


def test_no_resource_carries_more_than_its_bandwidth(amap):
    """A fast resource behind a slow one is held as long as the bytes flow through it.

    Held for bytes / its own bandwidth instead (a fluid approximation), PE 0's 102.4 GB/s
    slice would be free again after 640 ns while 64 KiB still flowed out of it over the
    64 GB/s NoC for 1024 ns, and a second reader could start then: 102.4 + 64 GB/s out of a
    102.4 GB/s slice for 384 ns.
    """
    system = System(amap)
    net = system.network
    slice0 = net.hbm(_pe(0))
    for dst in (1, 4, 5):
        system.pes[dst].dma.transfer(0, 64 * 1024, net.path(_pe(0), _pe(dst), hbm_at=_pe(0)))
    starts, ends = list(slice0.starts), list(slice0.ends)
    assert (starts, ends) == ([20_000], [20_000 + 3 * 1_024_000])  # back to back, one at a time
    assert slice0.overdrawn is None
    assert slice0.bytes * 10**12 <= slice0.bandwidth * slice0.busy_ps


def test_a_flow_outside_a_reservation_is_noted():
    """The check behind the invariant: bytes may flow only while a resource is reserved."""
    cal = Calendar("noc", "x", 64_000_000_000, 0)
    cal.book(0, 1_000)
    cal.carry(0, 1_000, 64)  # 64 GB/s for 1 ns: at the bandwidth, inside the reservation
    assert cal.overdrawn is None
    cal.carry(500, 1_000, 32)  # flows past the reservation's end
    assert cal.overdrawn == (500, 1_000, 32)
    fast = Calendar("noc", "y", 64_000_000_000, 0)
    fast.book(0, 100)
    fast.carry(0, 100, 64)  # 640 GB/s
    assert fast.overdrawn == (0, 100, 64)


def test_dma_busy_time_is_transfer_time_and_waiting_is_its_own_figure(amap):
    """Two PEs read PE 0's slice at once: the second DMA is held while the first streams,
    and that time is `wait_ps`, not busy."""
    topo = amap.topology
    nbytes = 64 * 1024
    noc = transfer_ps(nbytes, topo.noc.bandwidth)
    system = System(amap)
    net = system.network
    one, four = system.pes[1].dma, system.pes[4].dma
    one.transfer(0, nbytes, net.path(_pe(0), _pe(1), hbm_at=_pe(0)))
    four.transfer(0, nbytes, net.path(_pe(0), _pe(4), hbm_at=_pe(0)))
    setup = topo.pe.dma.setup
    assert (one.busy_ps, one.wait_ps) == (setup + noc, 0)
    assert (four.busy_ps, four.wait_ps) == (setup + noc, noc)
    assert four.free_at == setup + 2 * noc  # held, though not busy, while it waited


def test_transfers_on_disjoint_resources_do_not_interact(amap):
    first, second = _dma_pair(amap, _pe(0), _pe(0), _pe(5), _pe(5))
    assert first == second


def test_the_cube_sram_is_a_shared_resource(run):
    """The host places a table in cube 0's SRAM; its 8 PEs load 32 KiB of it each, at once,
    through the SRAM's port (PE 0's router). Six of them (PEs 1-3 and 5-7: X first on the
    4x2 mesh) leave the port over the NoC link pe0->pe1 and share its 64 GB/s: the port is
    busy until that link has carried 6 x 32 KiB (3,072 ns); PE 4's and PE 0's own loads end
    inside that time. Circuit-style, the port is held one load at a time: 7 x 512 ns at the
    NoC's rate and PE 0's at the port's 256 GB/s."""
    result = run("sram_share", "default")
    assert result.verified, result.checks
    sram = result.engines["sram"]
    assert (sram.instances, sram.ops) == (1, (8,))
    assert sram.busy_ps == (6 * 512_000,)
    circuit = run("sram_share", "default", sets=("network.sharing=circuit",))
    assert circuit.engines["sram"].busy_ps == (7 * 512_000 + 128_000,)
    assert result.latency_ps >= sram.busy_ps[0]
