"""Max-min fair sharing of memories and links among concurrent transfers, exactly.

A *flow* is one transfer while its bytes stream: `nbytes` over `links` (the
calendars of its path: an HBM slice or the SRAM port, NoC, UCIe, SIP and
rack links) from `start`, with a top rate `cap`, the rate at which it would
stream alone (its bytes over its solo time, `DmaEngine.stream_ps`: the
path's bottleneck, the DMA window, DRAM page openings).

While flows are active, their rates are the max-min fair allocation, found
by progressive filling: every flow's rate rises together; a flow stops
rising at its cap, or when a resource it crosses is full (the flows on it
share its bandwidth); the others go on rising. The allocation is re-solved
whenever a flow starts or ends, over the flows on its resources and those that
share a resource that can fill with them (directly or through others; one whose
flows' caps sum to at most its bandwidth holds none of them): a flow elsewhere
keeps its rate. Arithmetic is exact (rational rates, no float drift), so results
are deterministic and do not depend on the order the flows were solved in.

A solve re-fills only the flows a change can move. Progressive filling is the
same below the lowest rate a changed flow had or gets (`FairShare.floor`: a flow
that ends, its rate; one that starts, at least the least of its cap and its
resources' bandwidths over their flows), as every resource a changed flow crosses
is still short of full there; so a flow whose rate is below it keeps that rate,
and the others are filled over the room it leaves (`_fill`). The max-min
allocation is unique, so they get the rates a filling of all would give them, and
fill in the same rounds, from the same full resources.

Flows that start or end at one instant are solved once: where other events
wait at that instant (PEs in lockstep start their transfers together), the
solve waits for them, in an event after every PE's at that time
(`SETTLE`), over the union of what changed. The allocation at an instant is
the max-min allocation of the flows active then, which is unique, so every
rate that lasts any time, and every end, is the one solving flow by flow
gives; a state that lasted no time is never solved.

Time stays in whole picoseconds: a flow ends at the first picosecond at or
after its last byte has crossed, and keeps its share until then. A flow
alone on its path ends exactly at ``start + solo time``, as it would in the
circuit model.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from heapq import heapify, heappop, heappush, heapreplace
from itertools import chain

from kernbench_cli.hw.network import PS_PER_S, Calendar
from kernbench_cli.hw.process import Clock
from kernbench_cli.hw.ratio import Ratio, approx, ceil_div, ratio, summed


class Flow:
    """One transfer's bytes streaming; `end` is when it ends at the rates known so far."""

    __slots__ = ("approx", "armed", "cap", "carried", "ceiling", "end", "fills", "id", "left",
                 "limit", "links", "metered", "metered_at", "metered_f", "nbytes", "owner",
                 "rate", "since", "slowest", "solo_ps", "speed", "start", "version")

    def __init__(self, fid: int, start: int, nbytes: int, links: tuple[Calendar, ...],
                 solo_ps: int, owner: int):
        self.id = fid
        self.start = self.since = start
        self.nbytes = nbytes
        self.links = links
        self.solo_ps = solo_ps
        self.owner = owner  # the PE whose DMA moves it (event priority: PE order)
        # B/s: alone it streams at its cap (made when first shared: most flows never are)
        self.cap: Ratio | None = None
        # float(cap), correctly rounded, to compare caps cheaply (`_fill`)
        self.approx = nbytes * PS_PER_S / solo_ps if solo_ps > 0 else math.inf
        # the least int at or above its cap (B/s), to sum caps exactly (`FairShare.demand`)
        self.ceiling = -(-nbytes * PS_PER_S // solo_ps) if solo_ps > 0 else UNBOUNDED
        self.rate: Ratio | None = None  # None: its cap
        self.speed = self.approx  # float(rate), to sum rates cheaply (`FairShare._fits`)
        self.left: Ratio | int = nbytes * PS_PER_S  # bytes x ps/s still to cross at `since`
        self.end = start + solo_ps
        self.limit: Calendar | None = None  # the resource that held it slowest, if any
        self.slowest: Ratio | None = None  # ... and that rate
        #: in a solve, its resources that can fill (`FairShare._component`), in path order
        self.fills: list[Calendar] | tuple[()] = ()
        self.armed: Callable[[Flow], None] | None = None  # called when it ends
        self.version = 0
        # The meter's (`FairShare._meter`): its rate since `metered_at` (None: not yet) and
        # that rate's float, and bytes x ps/s its rates carried before then (None: none
        # counted apart, its rate never changed)
        self.metered: Ratio | None = None
        self.metered_at = start
        self.metered_f = 0.0
        self.carried: Ratio | int | None = None


#: A flow's `ceiling` with no time to stream in: above any resource's bandwidth.
UNBOUNDED = 1 << 200
#: A flow's `end` while the solve that sets it waits for the other events at its instant.
UNSOLVED = (1 << 63) - 1
#: The priority of that solve's event: after every PE's at the same time (theirs are PE
#: indexes).
SETTLE = 1 << 62


class FairShare:
    """The active flows of one timing pass, by resource, and their rates.

    It also meters them, apart from the solver, for the bandwidth invariant
    (`sim.invariants`): after every start, end and re-solve, each resource where a
    flow's rate rose sums the rates of the flows on it, and the highest sum is kept
    (`Calendar.flow_peak`, `flow_peak_at`); as each flow ends, whether its rates carried
    its bytes by its end (the first that did not: `Calendar.flow_short`). A sum is made
    of floats first, each within 2^-53 of its rate: one more than 10^-9 below the
    resource's bandwidth cannot be above it, and only the others are summed exactly
    (those of the flows sharing a resource the solver filled). The cost is the
    solver's order: a float per flow on a resource where a rate rose.
    """

    def __init__(self, env: Clock):
        self.env = env
        self.on: dict[Calendar, list[Flow]] = {}  # resource -> flows crossing it now
        # resource -> its flows' caps summed, each rounded up to an int B/s: at most its
        # bandwidth, it cannot fill (`_fill`)
        self.demand: dict[Calendar, int] = {}
        self.now = 0  # the time of the last start or end solved
        self.flows = 0
        #: the resources whose flows' rates wait for the solve at `now` (None: none wait)
        self.dirty: set[Calendar] | None = None
        self.arrived: list[Flow] = []  # the flows started since, waiting for it too
        #: a flow whose rate's float is below this keeps its rate in the next solve (none
        #: of the changes it solves can move it: the module's docstring)
        self.floor = math.inf

    def start(self, t: int, nbytes: int, links: tuple[Calendar, ...], solo_ps: int,
              owner: int) -> Flow:
        """A flow starting at `t` (never before a start or end already solved)."""
        self._at(t)
        flow = Flow(self.flows, t, nbytes, links, solo_ps, owner)
        self.flows += 1
        on, demand, ceiling = self.on, self.demand, flow.ceiling
        alone = True
        for cal in links:
            there = on.get(cal)
            if there:
                alone = False
                there.append(flow)
                demand[cal] += ceiling
            else:
                on[cal] = [flow]
                demand[cal] = ceiling
        if alone or (self.dirty is None and self._fits(flow)):
            self._meter((flow,), t)
        elif self._later(links, t):
            flow.end = UNSOLVED
            self.arrived.append(flow)
        else:
            self.floor = self._least(flow)
            self._resolve(links, t)
        return flow

    def arm(self, flow: Flow, ended: Callable[[Flow], None]) -> None:
        """Call `ended(flow)` when it ends (an event at its end, moved when rates change;
        made by the solve, for a flow that waits for one)."""
        flow.armed = ended
        if flow.end != UNSOLVED:
            self._schedule(flow)

    def finish(self, flow: Flow, t: int) -> None:
        """`flow` ends at `t` (its `end`): it leaves its resources, the rest re-solve."""
        self._at(t)
        on, demand = self.on, self.demand
        shared = False
        for cal in flow.links:
            there = on[cal]
            if len(there) == 1:
                del on[cal], demand[cal]
            else:
                there.remove(flow)
                demand[cal] -= flow.ceiling
                shared = True
            cal.occupy(flow.start, t)
            cal.bytes += flow.nbytes
            cal.ops += 1
        self._leave(flow, t)
        if shared and (self.dirty is not None or not self._capped(flow.links)):
            self.floor = min(self.floor, flow.speed)  # its rate until now
            if not self._later(flow.links, t):
                self._resolve(flow.links, t)

    def _later(self, links: tuple[Calendar, ...], t: int) -> bool:
        """Leave the flows on `links` to the solve after the other events at `t`, if any
        wait (then True): one solve for every start and end at the instant."""
        if self.dirty is not None:
            self.dirty.update(links)
            return True
        if self.env.peek() != t:
            return False
        self.dirty = set(links)
        self.env.wake(t, SETTLE, self._settle)
        return True

    def _settle(self, _arg) -> None:
        """The solve that waited for every event at its instant: over what changed then."""
        links, self.dirty = self.dirty, None
        for flow in self.arrived:  # each one's least share, of the flows there at last
            self.floor = min(self.floor, self._least(flow))
        self.arrived = []
        self._resolve(tuple(links), self.now)

    def _resolve(self, links: tuple[Calendar, ...], t: int) -> None:
        """Solve again the flows a change on `links` can move (those at or above `floor`
        on `links` or sharing a resource that can fill with them, directly or through
        others: `_component`), then meter them."""
        flows, rooms = self._component(links, self.floor)
        self.floor = math.inf
        self._solve(flows, rooms, t)
        self._meter(flows, t)

    def _least(self, flow: Flow) -> float:
        """A float at or below the rate `flow`, just started, gets: its cap, or a resource's
        bandwidth over its flows if less (a flow is held by a resource only once it is
        full, and then none of its flows has more than it). Each term is correctly rounded,
        so the least of them is the float of the least."""
        on = self.on
        return min(flow.approx, min(cal.bandwidth / len(on[cal]) for cal in flow.links))

    # ------------------------------------------------------------------ the meter

    def _meter(self, flows, t: int) -> None:
        """Note the rate each of `flows` streams at from `t` (its cap if never solved), and
        what its rate before carried since then; then, on each resource where a rate rose,
        the flows' summed rate, if higher than its highest (once every rate is in: one
        flow's rise may come before another's fall)."""
        risen: list[Calendar] = []
        for flow in flows:
            rate, was = flow.rate, flow.metered
            if was is None:  # just started
                if rate is None:
                    if flow.solo_ps <= 0:
                        continue  # no time to stream in: no rate
                    rate = Ratio(flow.nbytes * PS_PER_S, flow.solo_ps)
            elif rate is None or rate is was or rate == was:
                continue
            else:
                flow.carried = (flow.carried or 0) + was * (t - flow.metered_at)
            speed = rate.n / rate.d
            if speed >= flow.metered_f:  # it rose (floats order rates weakly: or stayed)
                risen += flow.links
            flow.metered, flow.metered_at, flow.metered_f = rate, t, speed
        on = self.on
        for cal in set(risen) if len(flows) > 1 else risen:  # one flow: its links differ
            there = on[cal]
            total = 0.0
            for flow in there:
                total += flow.metered_f
            if total > cal.bandwidth * (1 - 1e-9):  # near or above its bandwidth: exactly
                exact = summed([flow.metered for flow in there if flow.metered is not None])
                if exact > cal.flow_peak:
                    cal.flow_peak, cal.flow_peak_at = exact, t

    def _leave(self, flow: Flow, t: int) -> None:
        """Note `flow`, ending at `t`, on its resources if its rates did not carry its
        bytes. A flow whose rate never changed from its cap carries them iff it lasted its
        solo time."""
        rate = flow.metered
        if rate is None or (flow.carried is None and flow.rate is None
                            and t - flow.start >= flow.solo_ps):
            return
        carried = (flow.carried or 0) + rate * (t - flow.metered_at)
        if carried < flow.nbytes * PS_PER_S:
            short = (flow.nbytes, flow.start, t, carried)
            for cal in flow.links:
                if cal.flow_short is None:
                    cal.flow_short = short

    # ------------------------------------------------------------------ inside

    def _at(self, t: int) -> None:
        if t < self.now:
            raise AssertionError(f"fair share: a flow event at {t} ps after one at {self.now} ps")
        self.now = t

    def _fits(self, flow: Flow) -> bool:
        """Whether a flow just started fits at its cap beside the others' rates on each of
        its resources, with room to spare: then the others' rates stand (a flow held by a
        full resource is held still, as the new one crosses none; the new one is at its
        cap) and solving again would give them back. The sums are of floats, each within
        2^-53 of its rate, so a margin of 1e-9 leaves no doubt for fewer than 10^6 flows."""
        on = self.on
        for cal in flow.links:
            if sum(f.speed for f in on[cal]) > cal.bandwidth * (1 - 1e-9):
                return False
        return True

    def _capped(self, links: tuple[Calendar, ...]) -> bool:
        """Whether every flow left on `links` (a flow's, after it ended) is at its cap: none
        can rise into the room the flow left, so solving again would give every rate back."""
        on = self.on
        return all(f.rate is None or f.rate == f.cap
                   for cal in links for f in on.get(cal, ()))

    def _component(self, links: tuple[Calendar, ...], floor: float,
                   ) -> tuple[list[Flow], dict[Calendar, tuple[Ratio | int, int]]]:
        """The active flows on `links` and those that share a resource that can fill with
        them, directly or through others (other than flows whose rate's float is below
        `floor`, which are left out and not gone through), in the order they started; and
        the resources they cross that can fill, each with its room (its bandwidth less the
        rates of the flows left out) and how many of the flows cross it. Each flow's
        `fills` are its resources that can fill, in its path's order.

        A resource can fill where its flows' caps sum to more than its bandwidth (`demand`,
        an upper bound on the sum: `_fill`); one that cannot holds no flow below its cap, so
        flows that share only such resources do not move one another's rates."""
        on, demand = self.on, self.demand
        flows: dict[int, Flow] = {}
        rooms: dict[Calendar, tuple[Ratio | int, int]] = {}
        seen = set(links)
        todo = list(seen)
        while todo:
            cal = todo.pop()
            there = on.get(cal)
            if not there:
                continue
            room = bandwidth = cal.bandwidth
            fills, n = demand[cal] > bandwidth, 0
            for flow in there:
                if flow.speed >= floor or flow.end == UNSOLVED:
                    n += 1
                    if flow.id not in flows:
                        flows[flow.id] = flow
                        flow.fills = mine = []
                        for link in flow.links:
                            if demand[link] > link.bandwidth:
                                mine.append(link)
                                if link not in seen:
                                    seen.add(link)
                                    todo.append(link)
                elif fills:  # kept at its rate, not filled: its rate is taken
                    room = room - _rate(flow)
            if fills and n:
                rooms[cal] = (room, n)
        return [flows[k] for k in sorted(flows)], rooms

    def _solve(self, flows: list[Flow], rooms: dict[Calendar, tuple[Ratio | int, int]],
               t: int) -> None:
        """Progressive filling over `flows` (`rooms`: `_component`'s) at time `t`; moves the
        end events of those whose rate it changed. A flow's bytes left are counted at its
        last change of rate (`since`): at an unchanged rate its end stays where it was."""
        rates = []
        for flow in flows:
            if flow.cap is None:
                flow.cap = flow.rate = flow.slowest = Ratio(flow.nbytes * PS_PER_S,
                                                            flow.solo_ps)
            rates.append(flow.rate)
        _fill(flows, rooms, self.on)
        for flow, was in zip(flows, rates, strict=True):
            rate = flow.rate
            if (rate is was or rate == was) and flow.end != UNSOLVED:
                continue
            if t > flow.since:  # bytes crossed since its last change, at the old rate
                flow.left -= was * (t - flow.since)
                flow.since = t
            left = flow.left
            end = t if left <= 0 else t + ceil_div(left, rate)
            if end != flow.end:
                flow.end = end
                if flow.armed is not None:
                    self._schedule(flow)

    def _schedule(self, flow: Flow) -> None:
        flow.version += 1
        if flow.end < self.env.now:  # `wake` would run it now: time cannot go back
            raise RuntimeError(f"flow {flow!r} ends at {flow.end} ps, before now "
                               f"({self.env.now} ps)")
        self.env.wake(flow.end, flow.owner, self._ended, (flow, flow.version))

    def _ended(self, moved: tuple[Flow, int]) -> None:
        flow, version = moved
        if flow.version == version:  # not moved since
            self.finish(flow, flow.end)
            flow.armed(flow)


def _fill(flows: list[Flow], rooms: dict[Calendar, tuple[Ratio | int, int]],
          on: dict[Calendar, list[Flow]]) -> None:
    """Progressive filling: each round finds the level at which the next flows stop
    rising (the lowest cap, or the lowest fair share of what a resource has left) and
    fixes those flows at it. `on` holds each resource's flows; `rooms` the resources
    `flows` cross that can fill, each with its room and how many of `flows` cross it (a
    flow on it but not among them keeps its rate, which leaves the room:
    `FairShare.floor`), and each flow's `fills` those of its resources
    (`FairShare._component`).

    Exact, and in the order of the flows it fixes, not of rounds times flows: the caps
    are grouped by value and sorted once; the resources' shares (room over rising
    flows, as floats, correctly rounded) sit in a heap (`_Shares`), made again only for
    a resource that reaches its head after a round fixed flows on it (shares only rise).
    As floats order rationals weakly (`hw.ratio`), only the shares whose float ties the
    smallest are made and compared as Ratios. A resource's room drops by the level
    times the flows fixed on it, each round's; a full resource's flows are all fixed,
    so it leaves the heap.

    A resource whose flows' caps sum to at most its bandwidth (`FairShare.demand`, an
    upper bound on the sum, exact where the caps are whole B/s, as a cap at a link's
    bandwidth is) is left out: it is never full below their caps (room over rising flows
    is then at least the level, as fixed flows take at most their caps and rising ones
    have caps at or above the level), so its flows stop at their caps or elsewhere, as
    with it.
    """
    groups = _by_cap(flows)
    rising = {flow: k for k, same in enumerate(groups) for flow in same}  # -> its group
    unfixed = [len(same) for same in groups]
    shares = _Shares(rooms)
    g = 0
    while rising:
        while not unfixed[g]:
            g += 1
        level, full = shares.lowest(groups[g][0])
        low = float(level)
        fixing = [flow for cal in full for flow in on[cal]]
        if level == groups[g][0].cap:
            fixing += groups[g]
        crossed = []  # the resources that can fill of the flows fixed
        for flow in fixing:
            k = rising.pop(flow, None)
            if k is None:  # fixed already (this round, through another resource)
                continue
            unfixed[k] -= 1
            flow.rate, flow.speed = level, low
            if full:  # held by a full resource: the slowest yet? (floats first: `hw.ratio`)
                slowest = flow.slowest
                was = slowest.n / slowest.d
                if low < was or (low == was and level < slowest):
                    for cal in flow.fills:
                        if cal in full:
                            flow.slowest, flow.limit = level, cal
                            break
            crossed.append(flow.fills)
        shares.fixed(level, Counter(chain.from_iterable(crossed)))


def _rate(flow: Flow) -> Ratio:
    """`flow`'s rate (B/s): its cap until a solve sets another."""
    if flow.rate is not None:
        return flow.rate
    return flow.cap or Ratio(flow.nbytes * PS_PER_S, flow.solo_ps)


def _by_cap(flows: list[Flow]) -> list[list[Flow]]:
    """`flows` grouped by cap (equal values, one group), the groups lowest cap first."""
    by_cap: dict[tuple[int, int], list[Flow]] = {}
    for flow in flows:
        cap = flow.cap
        same = by_cap.get((cap.n, cap.d))
        if same is None:
            by_cap[cap.n, cap.d] = [flow]
        else:
            same.append(flow)
    return sorted(by_cap.values(), key=lambda same: (same[0].approx, same[0].cap))


class _Shares:
    """The resources a filling can fill: each one's room, its rising flows' count, and
    its fair share as a float in a heap, one entry a resource.

    Lazily: a share only rises during a filling (a round's level is at most every
    share, so a resource that gives `k` flows the level keeps at least its share for
    the rest), so an entry's key is at most its resource's share. A round's changes
    are noted (`debits`: the level and the flows it fixed there) and applied only when
    the entry reaches the heap's head, where its key is made the share again and it
    sinks to its place; a resource whose flows are all fixed leaves `count` (and its
    entry is dropped when it surfaces)."""

    __slots__ = ("count", "debits", "heap", "room")

    def __init__(self, rooms: dict[Calendar, tuple[Ratio | int, int]]):
        self.room: dict[Calendar, Ratio | int] = {}
        self.count: dict[Calendar, int] = {}
        self.debits: dict[Calendar, list[tuple[Ratio, int]]] = {}
        self.heap: list[tuple[float, int, Calendar]] = []
        for cal, (room, n) in rooms.items():
            self.room[cal], self.count[cal] = room, n
            self.heap.append((approx(room, n), len(self.heap), cal))
        heapify(self.heap)

    def lowest(self, first: Flow) -> tuple[Ratio, list[Calendar]]:
        """The round's level: the lowest share, or `first`'s cap (the lowest rising) if
        lower; and the resources whose share it is (full at it), out of the heap."""
        heap, count, debits, room = self.heap, self.count, self.debits, self.room
        level, full, tied, tight = first.cap, [], [], None
        while heap:
            key, _, cal = entry = heap[0]
            if cal not in count:  # its flows all fixed
                heappop(heap)
                continue
            if key > (first.approx if tight is None else tight):
                break  # its share is at least its key: above the cap, or not tied
            if cal in debits:  # its share rose since the key was made: make it again
                left = room[cal]
                for at, k in debits.pop(cal):
                    left -= at * k
                room[cal] = left
                heapreplace(heap, (approx(left, count[cal]), entry[1], cal))
                continue
            heappop(heap)
            share = ratio(room[cal], count[cal])
            tied.append((entry, share))
            if tight is None and key < first.approx:
                level = share  # its float below the cap's: below it (`hw.ratio`)
            elif share < level:
                level = share
            tight = key
        for entry, share in tied:
            if share is level or share == level:
                full.append(entry[2])
            else:
                heappush(heap, entry)
        return level, full

    def fixed(self, level: Ratio, crossed: Counter) -> None:
        """A round fixed `crossed[cal]` flows crossing `cal` at `level`: their rates are to
        leave its room (`debits`); a resource with none rising leaves."""
        count, debits = self.count, self.debits
        for cal, k in crossed.items():
            left = count.get(cal)
            if left is None:  # none rising on it
                continue
            if left > k:
                count[cal] = left - k
                owed = debits.get(cal)
                if owed is None:
                    debits[cal] = [(level, k)]
                else:
                    owed.append((level, k))
            else:
                del count[cal]
                debits.pop(cal, None)
