"""Shared blocks: HBM slices and links, each a reservation calendar.

Arbitration model. A transfer reserves, on every resource of its path, the
earliest interval at or after its request time that is free on all of them
(earliest fit, gaps included). Reservations on a resource more than one PE
uses are made in simulated-time order of the requests' *issue* (the timing
pass synchronises a PE with global time before it books one; ties go to the
lower PE index); a resource only one PE uses is booked in that PE's program
order. So a result never depends on the order in which Python runs the PEs.
Two transfers over one link therefore take twice as long as one; transfers
on disjoint links do not interact.

A transfer holds every resource of its path for the same interval,
``bytes / the path's bottleneck bandwidth``: the bytes cross each link at
the rate the slowest one allows, so no resource ever carries more than its
bandwidth (each booking checks it: `Calendar.overdrawn`). A link faster than
the bottleneck is held whole for the transfer (circuit-style; no two
transfers share a link at once, even if their rates would fit).

Routes. PEs of a cube form a mesh joined by NoC links; cubes of a SIP form a
mesh joined by UCIe links; both route X first, then Y, over directed links
(each direction is its own resource). A cube meets each neighbour cube
through a UCIe port at the middle of the edge of its PE mesh that faces it
(`ucie_port`): a transfer between cubes crosses the NoC of the cube it
leaves (to the port), each UCIe link, the NoC of every cube it passes
through (port to port) and that of the cube it reaches (port to PE). A SIP
reaches the others of its rack through one link to a rack switch
(`sip_link`, up and down) attached at PE 0 of its cube 0, and racks through
`rack_link`; a transfer between SIPs goes from its PE to that port and from
the other SIP's port down to its PE the same way.

HBM. A slice streams at ``bandwidth x (1 - refresh_time / refresh_interval)``
(refresh takes it away that share of the time; its calendar holds that
rate, the invariants hold it to the configured peak), and a transfer that
opens P DRAM pages (rows) takes at least ``P x activate_window / (4 x
channels)`` (tFAW: four activates per window per channel), so short or
strided accesses cost more than a stream of the same bytes. Pages opened
are counted by `pages_opened`: every page a row of the access touches,
except the one the previous row ended in (still open).
"""

from __future__ import annotations

import bisect
import functools
from array import array
from dataclasses import dataclass

from kernbench_cli.address.physaddr import PeCoord
from kernbench_cli.config.schema import LinkConfig, Topology
from kernbench_cli.hw.ipcq import OPPOSITE
from kernbench_cli.hw.ratio import Ratio

PS_PER_S = 10**12


def transfer_ps(nbytes: int, bandwidth: int) -> int:
    """Picoseconds to move `nbytes` at `bandwidth` bytes/s, rounded up."""
    return -(-nbytes * PS_PER_S // bandwidth)


#: What a DMA transfer counts for energy, by region (`DmaEngine.ledger`): bytes PE_DMA
#: moved, DRAM pages opened, bytes over each kind of resource (a resource's `part`),
#: bytes through IPCQ ring slots.
LEDGER = ("dma", "pages", "hbm", "sram", "noc", "ucie", "sip_link", "rack_link", "ipcq")


class Calendar:
    """Busy intervals of one shared resource, sorted and non-overlapping.

    `level` is the engine-table row it counts towards ("hbm", "noc", "ucie",
    "sip_link", "rack_link"). `user` is the first PE known to book it and
    `shared` whether another PE does too (see `use`): only shared calendars
    need their bookings taken in global time order.
    """

    __slots__ = ("activates", "bandwidth", "busy_ps", "bytes", "ends", "faw_ps", "flow_peak",
                 "flow_peak_at", "flow_short", "latency_ps", "level", "name", "ops", "overdrawn",
                 "page_bytes", "pages", "part", "shared", "starts", "user")

    def __init__(self, level: str, name: str, bandwidth: int, latency_ps: int):
        self.level = level
        self.part = LEDGER.index(level)  # its bytes' column in a ledger row
        self.name = name
        self.bandwidth = bandwidth  # the rate transfers are timed at (an HBM slice: refresh off)
        self.latency_ps = latency_ps
        self.page_bytes = 0  # DRAM page of an HBM slice (0: not DRAM)
        self.faw_ps = 0  # tFAW, and the activates allowed in it (4 per channel)
        self.activates = 1
        self.starts = array("q")  # machine integers: 16 B an interval, not ~80 in lists
        self.ends = array("q")
        self.busy_ps = 0
        self.bytes = 0
        self.pages = 0  # DRAM pages opened (an HBM slice)
        self.ops = 0
        self.user = -1
        self.shared = False
        self.overdrawn: tuple[int, int, int] | None = None  # (start, ps, bytes) too fast
        # Fair-shared flows on it, as `hw.flows.FairShare` meters them: the highest their
        # rates summed to (B/s, exact; 0 if never within 10^-9 of its bandwidth) and when,
        # and the first flow whose rates did not carry its bytes by its end, (bytes, start,
        # end, bytes x ps/s carried), if any
        self.flow_peak: Ratio | int = 0
        self.flow_peak_at = 0
        self.flow_short: tuple[int, int, int, Ratio | int] | None = None

    def opening_ps(self, pages: int) -> int:
        """Least time to open `pages` DRAM pages: tFAW per `activates` pages (0 if not DRAM)."""
        return -(-pages * self.faw_ps // self.activates)

    def use(self, pid: int) -> None:
        """PE `pid` will book this calendar."""
        if self.user != pid:
            if self.user < 0:
                self.user = pid
            else:
                self.shared = True

    def fit(self, t: int, duration: int) -> int:
        """Earliest start >= t of a free interval of `duration`."""
        ends, starts = self.ends, self.starts
        if not ends or t >= ends[-1]:  # after everything booked: the common case
            return t
        i = bisect.bisect_right(ends, t)
        end = t + duration
        while i < len(starts) and starts[i] < end:
            t = ends[i]
            end = t + duration
            i += 1
        return t

    def reserve(self, t: int, duration: int) -> None:
        """Book [t, t + duration), which `fit` found free; touching intervals merge."""
        self.busy_ps += duration
        self.ops += 1
        if duration == 0:
            return
        starts, ends = self.starts, self.ends
        end = t + duration
        i = bisect.bisect_left(starts, t)
        joins_left = i > 0 and ends[i - 1] == t
        joins_right = i < len(starts) and starts[i] == end
        if joins_left and joins_right:
            ends[i - 1] = ends[i]
            del starts[i], ends[i]
        elif joins_left:
            ends[i - 1] = end
        elif joins_right:
            starts[i] = t
        else:
            starts.insert(i, t)
            ends.insert(i, end)

    def occupy(self, t: int, end: int) -> None:
        """Mark [t, end) busy, joined with what is there (fair-shared flows overlap); busy
        time grows by what was not busy before."""
        if end <= t:
            return
        starts, ends = self.starts, self.ends
        if not ends or t > ends[-1]:  # after everything: the common case, kept lean
            starts.append(t)
            ends.append(end)
            self.busy_ps += end - t
            return
        i = bisect.bisect_left(ends, t)  # the first interval that ends at or after t
        j = bisect.bisect_right(starts, end)  # past the last that starts at or before end
        if i == j:
            starts.insert(i, t)
            ends.insert(i, end)
            self.busy_ps += end - t
            return
        covered = sum(ends[k] - starts[k] for k in range(i, j))
        first, last = min(t, starts[i]), max(end, ends[j - 1])
        self.busy_ps += last - first - covered
        starts[i], ends[i] = first, last
        del starts[i + 1:j], ends[i + 1:j]

    def carry(self, t: int, duration: int, nbytes: int) -> None:
        """`nbytes` flow through this resource in [t, t + duration). Counts them, and notes
        (`overdrawn`) a flow faster than the bandwidth or not inside a reserved interval:
        either would put the resource above its bandwidth at some instant."""
        self.bytes += nbytes
        if self.overdrawn is not None:
            return
        starts = self.starts
        # the interval that starts at or before t: the last, mostly (the booking just made)
        i = len(starts) - 1 if starts and t >= starts[-1] else bisect.bisect_right(starts, t) - 1
        reserved = duration == 0 or (i >= 0 and self.ends[i] >= t + duration)
        if not reserved or nbytes * PS_PER_S > self.bandwidth * duration:
            self.overdrawn = (t, duration, nbytes)

    def book(self, t: int, duration: int) -> int:
        """Reserve the earliest free interval of `duration` at or after `t`; its start."""
        ends = self.ends
        if ends and t < ends[-1]:
            t = self.fit(t, duration)
            self.reserve(t, duration)
            return t
        # after everything booked so far: append (or extend the last interval)
        if ends and ends[-1] == t:
            ends[-1] = t + duration
        elif duration:
            self.starts.append(t)
            ends.append(t + duration)
        self.busy_ps += duration
        self.ops += 1
        return t


def book(resources: tuple[Calendar, ...], duration: int,
         t: int) -> tuple[int, Calendar | None]:
    """Reserve every resource for `duration` from one common start >= t; (that start, the
    resource that was busy last before it, or None if none delayed it)."""
    blocker = None
    while True:
        start = t
        for cal in resources:
            fit = cal.fit(t, duration)
            if fit > t:
                t, blocker = fit, cal
        if t == start:
            break
    for cal in resources:
        cal.reserve(t, duration)
    return t, blocker


@dataclass(frozen=True)
class Route:
    """The shared resources between two endpoints and the latency to cross them."""

    resources: tuple[Calendar, ...]
    latency_ps: int
    hops: dict[str, int]


#: What a DMA needs of a transfer's way: every resource on it (the HBM slice first, if
#: one end is HBM), the latency to cross them (with the memory's access), and the round
#: trip a request and its answer take (that latency plus the links' way back).
Path = tuple[tuple[Calendar, ...], int, int]


@functools.lru_cache(maxsize=4096)
def pages_opened(offset: int, rows: int, row_bytes: int, stride_bytes: int, page: int) -> int:
    """DRAM pages a block of `rows` rows of `row_bytes`, `stride_bytes` apart, opens when it
    starts `offset` bytes into a page: every page a row touches, except the page the row
    before ended in (still open)."""
    if row_bytes <= 0:
        return 0
    if rows <= 1 or stride_bytes == row_bytes:  # contiguous
        return (offset + rows * row_bytes - 1) // page + 1
    opened, last = 0, -1
    for r in range(rows):
        first = (offset + r * stride_bytes) // page
        end = (offset + r * stride_bytes + row_bytes - 1) // page
        opened += end - first + (0 if first == last else 1)
        last = end
    return opened


class Network:
    """Every shared resource of a system, made on first use, and the routes over them."""

    def __init__(self, topology: Topology):
        self.topology = topology
        s = topology.system
        self._pe_cols = s.pe_mesh[0]
        self._cube_cols = s.cube_mesh[0]
        self._calendars: dict[tuple, Calendar] = {}
        self._routes: dict[tuple, Route] = {}

    def calendars(self) -> list[Calendar]:
        """Every resource used so far, in a fixed order."""
        return [self._calendars[k] for k in sorted(self._calendars)]

    def _calendar(self, key: tuple, level: str, cfg: LinkConfig) -> Calendar:
        """The link `key`: (level, rack[, sip[, cube]], what), named as reports show it."""
        cal = self._calendars.get(key)
        if cal is None:
            where = " ".join(f"{field}={value}" for field, value in zip(
                ("rack", "sip", "cube"), key[1:-1], strict=False))
            name = f"{where} {key[-1]}"
            cal = self._calendars[key] = Calendar(level, name, cfg.bandwidth, cfg.latency)
        return cal

    def hbm(self, coord: PeCoord) -> Calendar:
        """The HBM slice owned by PE `coord`."""
        key = ("hbm", *coord)
        cal = self._calendars.get(key)
        if cal is None:
            hbm = self.topology.hbm
            name = f"rack={coord.rack} sip={coord.sip} cube={coord.cube} pe={coord.pe}"
            cal = self._calendars[key] = Calendar("hbm", name, hbm_stream_bandwidth(hbm),
                                                  hbm.latency)
            cal.page_bytes, cal.faw_ps = hbm.page_size, hbm.activate_window
            cal.activates = 4 * hbm.channels
        return cal

    def sram(self, coord: PeCoord) -> Calendar:
        """The port of the SRAM of PE `coord`'s cube."""
        key = ("sram", *coord[:3])
        cal = self._calendars.get(key)
        if cal is None:
            sram = self.topology.sram
            name = f"rack={coord.rack} sip={coord.sip} cube={coord.cube}"
            cal = self._calendars[key] = Calendar("sram", name, sram.bandwidth, sram.latency)
        return cal

    def path(self, src: PeCoord, dst: PeCoord, hbm_at: PeCoord | None = None,
             sram_at: PeCoord | None = None) -> Path:
        """The route from `src` to `dst`, with `hbm_at`'s HBM slice or the SRAM of `sram_at`'s
        cube first if given (the memory at the far end)."""
        route = self.route(src, dst)
        memory = (self.hbm(hbm_at) if hbm_at is not None else
                  self.sram(sram_at) if sram_at is not None else None)
        if memory is None:
            return route.resources, route.latency_ps, 2 * route.latency_ps
        latency = route.latency_ps + memory.latency_ps
        # X-Y routes cross the same links per level both ways: the way back takes as long
        return (memory, *route.resources), latency, latency + route.latency_ps

    def route(self, src: PeCoord, dst: PeCoord) -> Route:
        """Links from PE `src` to PE `dst` (cached)."""
        key = (src, dst)
        route = self._routes.get(key)
        if route is None:
            route = self._routes[key] = self._make_route(src, dst)
        return route

    def _make_route(self, src: PeCoord, dst: PeCoord) -> Route:
        t = self.topology
        links: list[Calendar] = []
        if src[:2] == dst[:2]:
            self._within_sip(links, src[:2], src.cube, src.pe, dst.cube, dst.pe)
        else:
            self._within_sip(links, src[:2], src.cube, src.pe, *SIP_PORT)
            links.append(self._calendar(("sip_link", *src[:2], "up"), "sip_link", t.sip_link))
            if src.rack != dst.rack:
                links.append(self._calendar(("rack_link", src.rack, "up"), "rack_link",
                                            t.rack_link))
                links.append(self._calendar(("rack_link", dst.rack, "down"), "rack_link",
                                            t.rack_link))
            links.append(self._calendar(("sip_link", *dst[:2], "down"), "sip_link", t.sip_link))
            self._within_sip(links, dst[:2], *SIP_PORT, dst.cube, dst.pe)
        hops = {level: sum(1 for c in links if c.level == level)
                for level in ("noc", "ucie", "sip_link", "rack_link")}
        return Route(tuple(links), sum(c.latency_ps for c in links), hops)

    def _within_sip(self, links: list[Calendar], sip: tuple[int, int], cube_a: int, pe_a: int,
                    cube_b: int, pe_b: int) -> None:
        """Links from PE `pe_a` of cube `cube_a` to PE `pe_b` of cube `cube_b` of one SIP."""
        t, at = self.topology, pe_a
        for a, b in _xy_path(cube_a, cube_b, self._cube_cols):
            side = _side(a, b, self._cube_cols)
            self._noc(links, (*sip, a), at, self.ucie_port(side))
            links.append(self._calendar(("ucie", *sip, f"cube{a}->cube{b}"), "ucie", t.ucie))
            at = self.ucie_port(OPPOSITE[side])
        self._noc(links, (*sip, cube_b), at, pe_b)

    def _noc(self, links: list[Calendar], cube: tuple[int, int, int], a: int, b: int) -> None:
        for x, y in _xy_path(a, b, self._pe_cols):
            links.append(self._calendar(("noc", *cube, f"pe{x}->pe{y}"), "noc",
                                        self.topology.noc))

    def ucie_port(self, side: str) -> int:
        """The PE whose router holds a cube's UCIe port on `side` (E, W, N, S): the middle
        of that edge of the PE mesh."""
        cols, rows = self.topology.system.pe_mesh
        x, y = {"E": (cols - 1, rows // 2), "W": (0, rows // 2), "N": (cols // 2, 0),
                "S": (cols // 2, rows - 1)}[side]
        return y * cols + x


def hbm_stream_bandwidth(hbm) -> int:
    """B/s an HBM slice streams at: its peak less the share of time refresh takes."""
    return hbm.bandwidth * (hbm.refresh_interval - hbm.refresh_time) // hbm.refresh_interval


#: (cube, PE) of a SIP where its link to the rack switch attaches.
SIP_PORT = (0, 0)


def _side(a: int, b: int, cols: int) -> str:
    """The side of mesh node `a` that faces its neighbour `b`."""
    (ax, ay), (bx, by) = mesh_xy(a, cols), mesh_xy(b, cols)
    if bx != ax:
        return "E" if bx > ax else "W"
    return "S" if by > ay else "N"


def mesh_xy(index: int, cols: int) -> tuple[int, int]:
    return index % cols, index // cols


def _xy_path(a: int, b: int, cols: int) -> list[tuple[int, int]]:
    """Directed hops from node a to node b of a mesh with `cols` columns, X first."""
    (x, y), (bx, by) = mesh_xy(a, cols), mesh_xy(b, cols)
    path = []
    while x != bx:
        nx = x + (1 if bx > x else -1)
        path.append((y * cols + x, y * cols + nx))
        x = nx
    while y != by:
        ny = y + (1 if by > y else -1)
        path.append((y * cols + x, ny * cols + x))
        y = ny
    return path
