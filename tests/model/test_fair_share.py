"""Fair sharing of memories and links (`network.sharing = "fair"`), against an independent
max-min calculation written from the statement of the model in docs/model.md:

- a transfer streams from the end of its setup (a PE's next transfer from the end of the
  one before), over the HBM slice it reads and the X-then-Y route of NoC links, with each
  cube's UCIe port at the middle of the mesh edge that faces the other cube;
- its top rate is its bytes over its solo time (in whole ps, at the slowest resource of its
  path); concurrent transfers get max-min fair rates (progressive filling), re-solved when
  one starts or ends; a transfer ends at the first whole picosecond at or after its last
  byte, keeping its share until then; its data lands a path latency later.

Nothing here calls the model's routing or sharing code.
"""

from __future__ import annotations

import json
from collections import Counter
from fractions import Fraction

import pytest

from kernbench_cli.address import load_address_map
from tests.conftest import test_topology

PS = 10**12
N = 16384  # f32: 64 KiB a load, within PE_DMA's 64 KiB window (no window rounds)


def _xy(a: int, b: int, cols: int = 4) -> list[tuple[int, int]]:
    (x, y), (bx, by) = (a % cols, a // cols), (b % cols, b // cols)
    hops = []
    while x != bx:
        nx = x + (1 if bx > x else -1)
        hops.append((y * cols + x, y * cols + nx))
        x = nx
    while y != by:
        ny = y + (1 if by > y else -1)
        hops.append((y * cols + x, ny * cols + x))
        y = ny
    return hops


def _route(src: int, dst: int) -> list[str]:
    """Resources of a load by PE `dst` from PE `src`'s slice on the 2 cubes x 4x2 PEs of
    the default test system (cube 0's east port is its PE 7, cube 1's west port its PE 4)."""
    (cube_s, pe_s), (cube_d, pe_d) = divmod(src, 8), divmod(dst, 8)
    links = [f"hbm {src}"]
    if cube_s == cube_d:
        return links + [f"noc {cube_s} {a}->{b}" for a, b in _xy(pe_s, pe_d)]
    out_port, in_port = (7, 4) if cube_s == 0 else (4, 7)
    return (links + [f"noc {cube_s} {a}->{b}" for a, b in _xy(pe_s, out_port)]
            + [f"ucie {cube_s}->{cube_d}"]
            + [f"noc {cube_d} {a}->{b}" for a, b in _xy(in_port, pe_d)])


def _fill(active: dict[int, dict], capacity: dict[str, int]) -> dict[int, Fraction]:
    """Max-min fair rates (B/s) of the active flows: raise all together; a flow stops at
    its top rate or when a resource it crosses is full."""
    rates: dict[int, Fraction] = {}
    room = {link: Fraction(capacity[link]) for f in active.values() for link in f["links"]}
    while len(rates) < len(active):
        rising = [i for i in active if i not in rates]
        crossing = {link: [i for i in rising if link in active[i]["links"]] for link in room}
        shares = {link: room[link] / len(ids) for link, ids in crossing.items() if ids}
        level = min([active[i]["cap"] for i in rising] + list(shares.values()))
        full = {link for link, share in shares.items() if share == level}
        for i in rising:
            if active[i]["cap"] == level or full & set(active[i]["links"]):
                rates[i] = level
        for i, rate in rates.items():
            if i in rising:
                for link in active[i]["links"]:
                    room[link] -= rate
    return rates


def fair_ends(flows: list[tuple[int, int]], capacity: dict[str, int], t0: int,
              later: dict[int, int] | None = None) -> list[int]:
    """Stream end (ps) of each load `(dst, src)` of `flows`, every PE's first starting at
    `t0` (`later`: so many ps later for some PEs), its next ones as the one before ends."""
    later = later or {}
    queues: dict[int, list[int]] = {}
    for i, (dst, _) in enumerate(flows):
        queues.setdefault(dst, []).append(i)
    ends = [0] * len(flows)
    active: dict[int, dict] = {}

    def begin(i: int, t: int) -> None:
        dst, src = flows[i]
        links = _route(src, dst)
        solo = -(-N * 4 * PS // min(capacity[link] for link in links))
        active[i] = {"links": links, "left": Fraction(N * 4 * PS), "cap": Fraction(N * 4 * PS,
                                                                                   solo)}

    waiting = {dst: t0 + later.get(dst, 0) for dst in queues}  # PE -> its first start
    t = t0
    while active or waiting:
        for dst in sorted(d for d, at in waiting.items() if at == t):
            begin(queues[dst].pop(0), t)
            del waiting[dst]
        rates = _fill(active, capacity)
        finish = {i: t + -(-f["left"] // rates[i]) for i, f in active.items()}
        t_next = min(list(finish.values()) + list(waiting.values()))
        for i, f in active.items():
            f["left"] -= rates[i] * (t_next - t)
        t = t_next
        for i in sorted(i for i, end in finish.items() if end == t):
            ends[i] = t
            del active[i]
            queue = queues[flows[i][0]]
            if queue:
                begin(queue.pop(0), t)
    return ends


PATTERNS = {
    "two readers of one slice over different links": [(1, 0), (4, 0)],
    "eight readers of one slice": [(pe, 0) for pe in range(1, 9)],
    "3x3 all-to-all": [(a, b) for a in range(3) for b in range(3) if a != b],
    "cube-to-cube twins over one UCIe link": [(8, 0), (9, 1)],
    "a SIP-wide shift": [(pe, (pe + 1) % 16) for pe in range(16)],
    "sixteen twins": [(pe, pe ^ 8) for pe in range(16)],
    "fifteen readers of one slice": [(pe, 0) for pe in range(1, 16)],
}


def _capacity(topo) -> dict[str, int]:
    hbm = topo.hbm
    stream = hbm.bandwidth * (hbm.refresh_interval - hbm.refresh_time) // hbm.refresh_interval
    capacity = {f"hbm {pe}": stream for pe in range(16)}
    for cube in (0, 1):
        for a in range(8):
            for b in range(8):
                capacity[f"noc {cube} {a}->{b}"] = topo.noc.bandwidth
        capacity[f"ucie {cube}->{1 - cube}"] = topo.ucie.bandwidth
    return capacity


def _latency(topo, src: int, dst: int) -> int:
    per = {"hbm": topo.hbm.latency, "noc": topo.noc.latency, "ucie": topo.ucie.latency}
    return sum(per[link.split()[0]] for link in _route(src, dst))


@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_contention_equals_an_independent_max_min_calculation(run, pattern):
    flows = PATTERNS[pattern]
    topo = load_address_map(test_topology("default")).topology
    capacity = _capacity(topo)
    text = ",".join(f"{dst}<{src}" for dst, src in flows)
    result = run("readers", "default", (f"flows={text}", f"n={N}"), timing_only=True)
    loads = sorted((r for r in result.oplog if r[3] == "load"), key=lambda r: (r[1], r[0]))
    # each PE in program order, as `flows` lists them per PE
    order = sorted(range(len(flows)), key=lambda i: (flows[i][0], i))
    t0 = topo.cost_table.issue.load + topo.pe.dma.setup
    expected = fair_ends(flows, capacity, t0)
    got = [r[6] for r in loads]
    want = [expected[i] + _latency(topo, flows[i][1], flows[i][0]) for i in order]
    assert got == want
    assert result.latency_ps == max(want)


def test_a_flow_alone_takes_its_solo_time_and_circuit_mode_serialises(run):
    """Two readers of PE 0's slice: fair, they share the slice and end together; circuit,
    the second waits for the first to release it."""
    fair = run("readers", "default", ("flows=1<0,4<0",), timing_only=True)
    circuit = run("readers", "default", ("flows=1<0,4<0",), timing_only=True,
                  sets=("network.sharing=circuit",))
    topo = load_address_map(test_topology("default")).topology
    hbm = topo.hbm
    stream = hbm.bandwidth * (hbm.refresh_interval - hbm.refresh_time) // hbm.refresh_interval
    t0 = topo.cost_table.issue.load + topo.pe.dma.setup
    solo = -(-65536 * PS // min(stream, topo.noc.bandwidth))
    lat = hbm.latency + topo.noc.latency
    fair_ends_ = sorted(r[6] for r in fair.oplog if r[3] == "load")
    circuit_ends = sorted(r[6] for r in circuit.oplog if r[3] == "load")
    both = -(-2 * 65536 * PS // stream)  # the slice at its stream rate carries both
    assert fair_ends_ == [t0 + both + lat] * 2
    assert circuit_ends == [t0 + solo + lat, t0 + 2 * solo + lat]
    alone = run("readers", "default", ("flows=1<0",), timing_only=True)
    assert [r[6] for r in alone.oplog if r[3] == "load"] == [t0 + solo + lat]


# ---------------------------------------------------------------- the invariants see bugs

def _mutated_error(run, monkeypatch, target, name, mutant) -> str:
    """The bandwidth invariant's verdict on a run with `target.name` replaced by `mutant`
    (the other invariants may object too; they are not the point here)."""
    from kernbench_cli.sim import invariants

    monkeypatch.setattr(target, name, mutant)
    monkeypatch.setattr(invariants, "enforce", lambda checks: None)
    result = run("readers", "default", ("flows=1<0,4<0",), timing_only=True)
    bandwidth = next(inv for inv in result.invariants if inv.name == "bandwidth")
    assert not bandwidth.passed
    return bandwidth.detail


def test_flows_above_a_resources_bandwidth_are_caught(run, monkeypatch):
    """A sharing bug: every flow keeps its solo rate. The two loads then draw 2 x 64 GB/s
    from a slice that streams 95.6 GB/s (102.4 GB/s less refresh)."""
    from kernbench_cli.hw.flows import FairShare

    def unshared(self, flows, rooms, t):
        for flow in flows:
            flow.end = flow.start + flow.solo_ps

    assert _mutated_error(run, monkeypatch, FairShare, "_solve", unshared) == (
        "hbm rack=0 sip=0 cube=0 pe=0 carried 128,000,000,000 B/s at t=24,000 ps over its "
        "flows, above its 95,573,333,333 B/s")


def test_a_flow_ending_before_its_rates_carry_its_bytes_is_caught(run, monkeypatch):
    """A timing bug: shares are solved, but each flow ends at its solo time anyway."""
    from kernbench_cli.hw.flows import FairShare

    solve = FairShare._solve

    def early(self, flows, rooms, t):
        solve(self, flows, rooms, t)
        for flow in flows:
            flow.end = flow.start + flow.solo_ps

    assert _mutated_error(run, monkeypatch, FairShare, "_solve", early) == (
        "hbm rack=0 sip=0 cube=0 pe=0 carried 65,536 B from t=24,000 ps to 1,048,000 ps at "
        "rates that move only 48,934 B")  # half the slice for 1,024 ns


def test_a_resource_timed_off_its_configuration_is_caught(run, monkeypatch):
    """A configuration bug: slices timed at the pin rate, refresh forgotten."""
    from kernbench_cli.hw import network

    assert _mutated_error(run, monkeypatch, network, "hbm_stream_bandwidth",
                          lambda hbm: hbm.bandwidth) == (
        "hbm rack=0 sip=0 cube=0 pe=0 is timed at 102,400,000,000 B/s; the configuration "
        "gives 95,573,333,333 B/s")


def test_the_meter_follows_each_resources_summed_rate():
    """What the bandwidth invariant reads (`FairShare`'s meter, kept as the pass runs): two
    flows sharing a link sum to its bandwidth, not to their caps, and so do the flows there
    as one ends and another starts at one instant; a flow ended before its rates carried
    its bytes is noted on its link, with what they carried."""
    from kernbench_cli.hw.flows import FairShare
    from kernbench_cli.hw.network import Calendar
    from kernbench_cli.hw.process import Clock

    ns = 1000  # ps
    link = Calendar("noc", "test", 1000, 0)  # 1,000 B/s: 1 B alone in 10^9 ps
    flows = FairShare(Clock())
    a = flows.start(0, 1, (link,), 10**9, 0)
    b = flows.start(0, 1, (link,), 10**9, 1)
    assert (a.end, b.end) == (2 * 10**9, 2 * 10**9)  # 500 B/s each
    flows.finish(a, a.end)
    c = flows.start(a.end, 1, (link,), 10**9, 2)
    flows.finish(b, b.end)
    flows.finish(c, c.end)
    assert (link.flow_peak, link.flow_peak_at) == (1000, 0)
    assert link.flow_short is None
    d = flows.start(c.end, 1, (link,), 10**9, 3)
    flows.finish(d, c.end + ns)  # ended early: its 1,000 B/s carried 10^-9 B
    assert link.flow_short == (1, c.end, c.end + ns, 1000 * ns)


def test_each_resources_demand_sums_its_flows_caps_rounded_up():
    """What lets the filling leave out a resource that cannot fill (`FairShare.demand`):
    each resource's flows' caps, each rounded up to a whole B/s, summed as they start and
    end. Here a wide link's 1,000 + 3,334 B/s overfill its 3,000, so the second flow gets
    the 2,000 B/s the first leaves it; when it ends, the first keeps its rate and end."""
    from kernbench_cli.hw.flows import FairShare
    from kernbench_cli.hw.network import Calendar
    from kernbench_cli.hw.process import Clock

    link, wide = Calendar("noc", "narrow", 1000, 0), Calendar("noc", "wide", 3000, 0)
    flows = FairShare(Clock())
    a = flows.start(0, 1, (link, wide), 10**9, 0)  # 1,000 B/s alone
    b = flows.start(0, 1, (wide,), 3 * 10**8, 1)  # 3,333.3 B/s alone
    assert flows.demand == {link: 1000, wide: 1000 + 3334}
    assert (a.end, b.end) == (10**9, 5 * 10**8)  # 1,000 and 2,000 B/s
    flows.finish(b, b.end)
    assert flows.demand == {link: 1000, wide: 1000}
    assert a.end == 10**9
    flows.finish(a, a.end)
    assert flows.demand == {}


# ------------------------------------------------- what the checks catch, and odd orders

def test_a_shared_slice_is_taken_in_order_of_issue_time_not_of_pe_index(run):
    """PE 3 loads from PE 0's slice at once; PE 1 (walked first, lower index) 10 cycles
    later. Circuit-style, PE 3 holds the slice first and PE 1 waits for it; fair, PE 3
    streams alone for 10 ns, then they share. Booking in PE order would swap them."""
    topo = load_address_map(test_topology("default")).topology
    t0 = topo.cost_table.issue.load + topo.pe.dma.setup
    params = ("flows=1<0,3<0", f"n={N}", "delays=1:10")
    solo = -(-N * 4 * PS // topo.noc.bandwidth)  # the NoC is each path's slowest link
    circuit = run("readers", "default", params, timing_only=True,
                  sets=("network.sharing=circuit",))
    ends = {r[1]: r[6] for r in circuit.oplog if r[3] == "load"}
    assert ends == {3: t0 + solo + _latency(topo, 0, 3),
                    1: t0 + solo + solo + _latency(topo, 0, 1)}
    fair = run("readers", "default", params, timing_only=True)
    expected = fair_ends([(1, 0), (3, 0)], _capacity(topo), t0, {1: 10_000})
    assert {r[1]: r[6] for r in fair.oplog if r[3] == "load"} == {
        1: expected[0] + _latency(topo, 0, 1), 3: expected[1] + _latency(topo, 0, 3)}


def test_a_cross_sip_load_crosses_both_sip_links_and_the_far_sips_noc(run):
    """PE 7 of two_sips (SIP 1, cube 1, PE 1) loads 4 KiB from PE 0's slice (SIP 0, the
    port): up SIP 0's link to the switch, down SIP 1's, then SIP 1's NoC and UCIe from its
    port (cube 0, PE 0) to PE 7: pe0->pe1 in cube 0, cube0->cube1, pe0->pe1 in cube 1. At
    8 GB/s the SIP links are the bottleneck."""
    from kernbench_cli.address.physaddr import PeCoord
    from kernbench_cli.hw.network import Network

    amap = load_address_map(test_topology("two_sips"), None, ("sip_link.bandwidth=8GB/s",))
    topo = amap.topology
    route = Network(topo).route(PeCoord(0, 0, 0, 0), PeCoord(0, 1, 1, 1))
    assert [f"{c.level} {c.name}" for c in route.resources] == [
        "sip_link rack=0 sip=0 up", "sip_link rack=0 sip=1 down",
        "noc rack=0 sip=1 cube=0 pe0->pe1", "ucie rack=0 sip=1 cube0->cube1",
        "noc rack=0 sip=1 cube=1 pe0->pe1"]
    result = run("readers", "two_sips", ("flows=7<0", "n=1024"), timing_only=True,
                 sets=("sip_link.bandwidth=8GB/s",))
    latency = (topo.hbm.latency + 2 * topo.sip_link.latency + 2 * topo.noc.latency
               + topo.ucie.latency)
    stream = -(-4096 * PS // 8_000_000_000)  # 512 ns at the SIP links' 8 GB/s
    end = topo.cost_table.issue.load + topo.pe.dma.setup + stream + latency
    assert [r[6] for r in result.oplog if r[3] == "load"] == [end]
    assert result.latency_ps == end == 1_650_000


def test_a_short_message_beside_a_bulk_transfer_gets_its_share_at_once(run):
    """PE 1's 1 MiB load and PE 0's 64 B message share the NoC link pe0->pe1.

    PE 0 first loads the 64 B from its own slice, which PE 1's load streams from too: from
    24 ns its top rate is 64 B per its page opening (1 page x 15 ns / 8 = 1,875 ps), below
    half the slice, so it ends at 25.875 ns and lands 100 ns later. Its send then takes
    PE_DMA at 125.875 ns, streams after the 20 ns setup, at 145.875 ns, over pe0->pe1 at
    half its 64 GB/s (the bulk load has the other half): 2 ns, then 2 ns of hop latency.
    Circuit-style, it waits for the whole 1 MiB (16.4 us at 64 GB/s) to release the link.
    """
    fair = run("bulk_and_message", "default", timing_only=True)
    sends = [r for r in fair.oplog if r[3] == "send"]
    assert [(r[5], r[6]) for r in sends] == [(125_875, 149_875)]
    circuit = run("bulk_and_message", "default", timing_only=True,
                  sets=("network.sharing=circuit",))
    late = next(r[6] for r in circuit.oplog if r[3] == "send")
    assert late > 16_384_000 > 100 * 149_875


def test_flows_starting_at_one_instant_are_solved_once_as_if_one_by_one(cli, monkeypatch):
    """A hierarchical all-reduce's PEs start their transfers in lockstep: the flows that
    start or end at one instant are solved once, after every PE's events then. The run
    (`--json`: times, energy, checks) is the one solving at each start and end as it
    comes gives, but for which resource the critical path says a transfer waited for:
    the one that held it slowest over some time, where solving flow by flow could name
    one that held it for no time (a state between two starts at one instant)."""
    from kernbench_cli.hw import flows as flows_module

    solves = []
    solve = flows_module.FairShare._solve
    monkeypatch.setattr(flows_module.FairShare, "_solve",
                        lambda self, flows, rooms, t: (solves.append(t),
                                                       solve(self, flows, rooms, t)))
    args = ("run", "all_reduce", "-t", "sip", "-p", "algo=hier", "-p", "bytes=65536",
            "--timing-only", "--json")
    code, batched, _ = cli(*args)
    once = list(solves)
    solves.clear()
    monkeypatch.setattr(flows_module.FairShare, "_later", lambda self, links, t: False)
    code_each, each, _ = cli(*args)
    assert (code, code_each) == (0, 0)
    batched, each = json.loads(batched), json.loads(each)
    waits = [run["critical_path"].pop("resource_waits") for run in (batched, each)]
    assert batched == each
    assert sum(waits[0].values()) == sum(waits[1].values()) > 0
    assert set(once) == set(solves)  # the same instants solved: at most twice each (an
    # end at the instant a solve made), where flow by flow solved up to once a flow
    assert max(Counter(once).values()) <= 2 < 16 < max(Counter(solves).values())


def test_the_clock_takes_wake_ups_only():
    """The timing pass's clock runs (time, priority, id, callback, argument) entries: a SimPy
    event scheduled the SimPy way would reach its loop as an entry it cannot run, so it is
    refused where it is scheduled, saying what to use."""
    import simpy

    from kernbench_cli.hw.process import Clock

    clock = Clock()
    with pytest.raises(TypeError, match=r"takes wake-ups only \(Clock.wake\)"):
        clock.schedule(simpy.Event(clock))
    ran = []
    clock.wake(5, 0, ran.append, "b")
    clock.wake(5, -1, ran.append, "a")  # a lower priority first at one time
    clock.wake(3, 0, ran.append, "first")
    clock.run()
    assert (ran, clock.now) == (["first", "a", "b"], 5)
