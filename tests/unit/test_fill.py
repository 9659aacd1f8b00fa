"""The fair-share solver's progressive filling (`hw.flows._fill`) against the same rule
written plainly: every round scans every rising flow and resource."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from kernbench_cli.hw.flows import UNSOLVED, FairShare, Flow, _fill, _rate
from kernbench_cli.hw.network import PS_PER_S, Calendar
from kernbench_cli.hw.process import Clock
from kernbench_cli.hw.ratio import Ratio, approx, ratio


class Resource:
    """A calendar as the solver sees it: a bandwidth, hashed by identity."""

    def __init__(self, bandwidth: int):
        self.bandwidth = bandwidth


def plain_fill(flows) -> None:
    """Each round: the lowest cap or fair share is the level; the flows at that cap and
    those crossing a resource whose share it is stop there."""
    room = {cal: cal.bandwidth for flow in flows for cal in flow.links}
    count = {cal: sum(cal in flow.links for flow in flows) for cal in room}
    rising = list(flows)
    while rising:
        level = min([flow.cap for flow in rising]
                    + [ratio(room[c], count[c]) for c in room if count[c]])
        full = {c for c in room if count[c] and ratio(room[c], count[c]) == level}
        still = []
        for flow in rising:
            crossed = [cal for cal in flow.links if cal in full]
            if not crossed and flow.cap != level:
                still.append(flow)
                continue
            flow.rate, flow.speed = level, float(level)
            if crossed and level < flow.slowest:
                flow.slowest, flow.limit = level, crossed[0]
            for cal in flow.links:
                count[cal] -= 1
                room[cal] -= level
        rising = still


def _flows(spec, resources):
    flows = []
    for fid, (nbytes, solo, links) in enumerate(spec):
        flow = Flow(fid, 0, nbytes, tuple(resources[i] for i in links), solo, 0)
        flow.cap = flow.rate = flow.slowest = Ratio(nbytes * PS_PER_S, solo)
        flows.append(flow)
    return flows


def _on(flows) -> tuple[dict, dict]:
    """What `FairShare._component` gives `_fill` for `flows`, every one filled: the
    resources that can fill (their flows' caps' ceilings summed above their bandwidth),
    each with its bandwidth as room and its flows' count, and each flow's `fills`; and
    each resource's flows."""
    on: dict = {}
    for flow in flows:
        for cal in flow.links:
            on.setdefault(cal, []).append(flow)
    rooms = {cal: (cal.bandwidth, len(there)) for cal, there in on.items()
             if sum(flow.ceiling for flow in there) > cal.bandwidth}
    for flow in flows:
        flow.fills = [cal for cal in flow.links if cal in rooms]
    return rooms, on


def _as_plain(spec, resources) -> list[Flow]:
    """The flows of `spec` on `resources` filled (`_fill`), each checked to get the rate,
    slowest rate, holding resource and rate's float the plain rule gives them."""
    fast, plain = _flows(spec, resources), _flows(spec, resources)
    _fill(fast, *_on(fast))
    plain_fill(plain)
    for a, b in zip(fast, plain, strict=True):
        assert (a.rate, a.slowest, a.limit, a.speed) == (b.rate, b.slowest, b.limit, b.speed)
    return fast


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([10**9, 2 * 10**9, 3 * 10**9, 7 * 10**9, 64 * 10**9]),
                min_size=1, max_size=6),
       st.lists(st.tuples(st.sampled_from([64, 4096, 65536, 1000, 3 * 4096]),
                          st.sampled_from([1, 3, 7, 64, 1000, 4096, 65536]),
                          st.lists(st.integers(0, 5), min_size=1, max_size=3, unique=True)),
                min_size=1, max_size=25))
def test_fill_gives_the_rates_the_plain_rule_gives(bandwidths, spec):
    resources = [Resource(b) for b in bandwidths]
    spec = [(n, s, [i % len(resources) for i in links]) for n, s, links in spec]
    spec = [(n, s, sorted(set(links))) for n, s, links in spec]
    for a in _as_plain(spec, resources):
        assert a.speed == approx(a.rate.n, a.rate.d)


def test_a_resource_its_flows_overfill_shares_its_bandwidth_fairly():
    """Caps of 32 and 48 GB/s on one 64 GB/s link (their sum 1.25x its bandwidth): each
    gets 32 GB/s, the second held there by the link; the first stops at its cap."""
    link = Resource(64 * 10**9)
    low, high = _flows([(65536, 2_048_000, [0]), (65536, 1_365_333, [0])], [link])
    _fill([low, high], *_on([low, high]))
    assert (low.rate, low.limit, high.rate, high.limit, high.slowest) == (
        32 * 10**9, None, 32 * 10**9, link, 32 * 10**9)


def test_a_resource_its_flows_cannot_fill_holds_none():
    """Caps of 32 and 16 GB/s on a 64 GB/s link, the second also on a 16 GB/s link that
    it fills alone: both stream at their caps, neither held by the wide link."""
    wide, narrow = Resource(64 * 10**9), Resource(16 * 10**9)
    a, b = _flows([(65536, 2_048_000, [0]), (65536, 4_096_000, [0, 1])], [wide, narrow])
    _fill([a, b], *_on([a, b]))
    assert (a.rate, a.limit, b.rate, b.limit) == (32 * 10**9, None, 16 * 10**9, None)


@settings(max_examples=30, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(2, 300), st.integers(2, 64))
def test_fill_on_a_mesh_of_equal_links_gives_the_plain_rules_rates(rng, n, links):
    """The decode's NoC case: hundreds of flows, most at a cap of one link's bandwidth,
    crossing a few of many equal links (shares tie at every round) and some wider ones
    (some of which their flows cannot fill: left out of the filling)."""
    bandwidths = ([64 * 10**9] * 50 + [100 * 10**9] * 10 + [256 * 10**9] * 4)[-links:]
    spec = [(65536, rng.choice([1_024_000, 1_024_000, 1_365_333, 2_048_000]),
             sorted(rng.sample(range(links), rng.randint(1, min(6, links)))))
            for _ in range(n)]
    resources = [Resource(b) for b in bandwidths]
    _as_plain(spec, resources)


@st.composite
def _near_ties(draw):
    """Resources and flows whose caps lie within a float's rounding of a resource's
    bandwidth over a count (floats tie where the Ratios differ), beside plain ones."""
    bandwidths = [draw(st.sampled_from([12, 24, 48, 64, 96, 100])) * 10**9
                  for _ in range(draw(st.integers(1, 8)))]
    spec = []
    for _ in range(draw(st.integers(1, 30))):
        links = draw(st.lists(st.integers(0, len(bandwidths) - 1), min_size=1, max_size=4,
                              unique=True))
        kind = draw(st.integers(0, 2))
        if kind == 0:  # bandwidth / k of one of its links, a few parts in 10^18 off
            cap = bandwidths[draw(st.sampled_from(links))] // draw(st.integers(1, 12))
            solo = 3 * 10**18
            spec.append((cap * solo // PS_PER_S + draw(st.integers(-2, 2)), solo, links))
        elif kind == 1:  # a whole share of some bandwidth, exactly
            cap = draw(st.sampled_from(bandwidths)) // draw(st.integers(1, 12))
            spec.append((12_288_000, 12_288_000 * PS_PER_S // cap, links))
        else:
            spec.append((draw(st.sampled_from([64, 4096, 65536])),
                         draw(st.sampled_from([1, 7, 1000, 1_365_333, 2_048_000])), links))
    return bandwidths, spec


@settings(max_examples=300, deadline=None)
@given(_near_ties())
def test_fill_where_floats_tie_and_ratios_differ_gives_the_plain_rules_rates(case):
    """The filling compares floats first and Ratios only where the floats tie (a share
    against the lowest cap, a level against a flow's slowest rate yet): caps a few parts
    in 10^18 from a share make the floats tie and the Ratios differ."""
    bandwidths, spec = case
    resources = [Resource(b) for b in bandwidths]
    _as_plain(spec, resources)


class _EveryFlow(FairShare):
    """The solver solving again every flow a change reaches, none kept at its rate."""

    def _component(self, links, floor):
        return super()._component(links, -math.inf)


def _drive(share: FairShare, clock: Clock, groups, resources) -> list[Flow]:
    """Start and end flows in `groups` (one instant each, some with other events waiting
    at it, so their changes are solved once, after them); every flow, in order started."""
    made: list[Flow] = []
    active: list[Flow] = []
    for t, (lockstep, ops) in enumerate(groups, start=1):
        clock.now = t * 1000
        if lockstep:
            clock.wake(clock.now, 0, lambda _: None)
        for op, nbytes, solo, links in ops:
            ended = [f for f in active if f.end != UNSOLVED]  # (one waiting: no end yet)
            if op == "end" and ended:
                flow = ended[nbytes % len(ended)]
                active.remove(flow)
                share.finish(flow, clock.now)
            elif op == "start":  # its cap at most its path's bandwidth, as a transfer's
                path = tuple(resources[i] for i in links)
                least = -(-nbytes * PS_PER_S // min(cal.bandwidth for cal in path))
                flow = share.start(clock.now, nbytes, path, max(solo, least), 0)
                made.append(flow)
                active.append(flow)
        clock.run()
        live = [_copy(f) for f in active]
        plain_fill(live)
        for flow, alone in zip(active, live, strict=True):
            assert _rate(flow) == alone.rate  # the max-min rates of the flows active now
    return made


def _copy(flow: Flow) -> Flow:
    twin = Flow(flow.id, 0, flow.nbytes, flow.links, flow.solo_ps, 0)
    twin.cap = twin.rate = twin.slowest = Ratio(flow.nbytes * PS_PER_S, flow.solo_ps)
    return twin


_OPS = st.tuples(st.sampled_from(["start", "start", "end"]),
                 st.sampled_from([64, 4096, 65536, 3 * 4096]),
                 st.sampled_from([1_024_000, 1_365_333, 2_048_000, 64, 4096]),
                 st.lists(st.integers(0, 7), min_size=1, max_size=4, unique=True))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.lists(_OPS, min_size=1, max_size=5)),
                min_size=1, max_size=30))
def test_a_solve_that_keeps_the_flows_below_its_floor_gives_every_flow_what_all_would(
        groups):
    """Flows starting and ending, one at an instant or several at once: each solve re-fills
    only the flows at or above its floor (`FairShare.floor`), and every flow's rate, the
    resource that held it, its bytes left and its end come out as a solve of every flow
    gives, and the rates are the max-min ones of the flows active then."""
    bandwidths = [64 * 10**9] * 6 + [100 * 10**9, 16 * 10**9]
    got, want = [], []
    for solver, out in ((FairShare, got), (_EveryFlow, want)):
        clock = Clock()
        resources = [Calendar("noc", f"link {i}", b, 0) for i, b in enumerate(bandwidths)]
        for flow in _drive(solver(clock), clock, groups, resources):
            out.append((_rate(flow), flow.slowest or _rate(flow),  # None: at its cap
                        flow.limit and flow.limit.name, flow.left, flow.end, flow.since))
    assert got == want
