"""Closed-form alpha-beta times of the collectives (Thakur, Rabenseifner & Gropp 2005), on a
topology's own links: what `kernels/all_reduce.py` sets its measured bus bandwidth beside.

A step that moves m bytes between two PEs costs ``alpha + m * beta``:

- ``alpha`` = the route's latency (every link's, hop by hop) + the DMA's setup;
- ``beta`` = the seconds per byte of the PE's one DMA engine, which moves every byte of a
  step three times: out of HBM (the slice's stream rate) or into it, over the route (its
  slowest link, or the IPCQ ring's credits: slots x slot size per round trip, whichever
  is less), and out of the receiver's slot into TCM (the NoC link rate), each of the three
  transfers of a piece (a message: half an IPCQ ring) with the DMA's setup. A message
  shorter than a piece still takes its three setups: m beta counts them per byte, so
  such a step adds the setups' share its bytes left out, 3 setup (1 - m / piece).

Per algorithm, with n ranks, a buffer of N bytes, m = N / n, p = a piece or N if less:

    ring       reduce_scatter, all_gather: (n-1)(alpha + m beta); all_reduce: twice that
    direct     (n-1) half-duplex exchanges of m each way: 2(n-1)(alpha + m beta) a phase
    rhd        sum over log2 n steps of 2(alpha + m_k beta), m_k = N / 2^(k+1), a phase;
               all_reduce on n not a power of two adds the fold, 2(alpha + N beta)
    hier       the ring terms per level, each on its own links and a buffer n_inner
               times smaller; the top level all-reduces
    tree       reduce or broadcast: depth (alpha + p beta) + N c beta (c: the root's
               children, ceil(log2 n)); all_reduce: both
    ring (broadcast, reduce)   (n-1)(alpha + p beta) + N beta
    direct (broadcast, reduce) alpha + (n-1) N beta (each of the n-1 messages its setups)

alpha and beta are the worst over the pairs of PEs the algorithm uses. This is a model
of the algorithm's steps, not of the contention between them: a real run can do better
(PE_MATH, loads and sends overlap) or worse (shared links, credits returning late).
"""

from __future__ import annotations

from fractions import Fraction

from kernbench_cli.address.physaddr import pe_coords
from kernbench_cli.hw.network import Network, hbm_stream_bandwidth
from kernbench_cli.lang import collectives as coll
from kernbench_cli.lang.collectives.algorithms import binomial
from kernbench_cli.lang.collectives.groups import levels

#: nccl-tests' bus bandwidth factor of each collective, by group size n
BUS_FACTOR = {
    "all_reduce": lambda n: Fraction(2 * (n - 1), n),
    "reduce_scatter": lambda n: Fraction(n - 1, n),
    "all_gather": lambda n: Fraction(n - 1, n),
    "broadcast": lambda n: Fraction(1),
    "reduce": lambda n: Fraction(1),
}


def seconds(topology, call: str, algo: str, group: list[int], nbytes: int,
            root_rank: int = 0) -> float:
    """The alpha-beta time of `call` with `algo` over `group` on a buffer of `nbytes`."""
    grid, network = coll.Grid(topology), Network(topology)
    ranks = coll.ranks(grid, group)
    n = len(ranks)
    if n == 1:
        return 0.0
    coords = pe_coords(topology)
    # the message the pipelined broadcast and reduce send: a piece, or the whole buffer
    # when it is smaller (`Group.pieces` never sends more than there is)
    piece = min(nbytes, _piece(topology))

    def ab(pairs) -> tuple[float, float]:
        costs = [_pair(topology, network, coords[a], coords[b]) for a, b in pairs]
        return max(c[0] for c in costs), max(c[1] for c in costs)

    step = _step(topology)

    ring_pairs = [(ranks[i], ranks[(i + 1) % n]) for i in range(n)]
    if algo == "hier":
        return _hier(topology, network, coords, call, grid, ranks, nbytes, step)
    if call in ("broadcast", "reduce"):
        root = ranks[root_rank]
        if algo == "ring":
            a, b = ab(ring_pairs)
            return (n - 1) * step(a, b, piece) + nbytes * b
        if algo == "direct":
            a, b = ab([(root, p) for p in ranks if p != root])
            return a + (n - 1) * step(0.0, b, nbytes)
        return _tree(ab, step, ranks, root_rank, nbytes, piece, 1)
    phases = 2 if call == "all_reduce" else 1
    m = nbytes / n
    if algo == "ring":
        a, b = ab(ring_pairs)
        return phases * (n - 1) * step(a, b, m)
    if algo == "direct":
        a, b = ab([(p, q) for p in ranks for q in ranks if p != q])
        return phases * 2 * (n - 1) * step(a, b, m)
    if algo == "rhd":
        return _rhd(ab, step, ranks, nbytes, phases)
    return _tree(ab, step, ranks, 0, nbytes, piece, 2)


def busbw_gbps(call: str, n: int, nbytes: int, seconds_: float) -> float:
    """nccl-tests' bus bandwidth, in GB/s: bytes / time x the collective's factor."""
    if seconds_ <= 0:
        return 0.0
    return float(BUS_FACTOR[call](n)) * nbytes / seconds_ / 1e9


def _pair(topology, network: Network, src, dst) -> tuple[float, float]:
    """(alpha in s, beta in s/B) of a message from PE `src` to PE `dst`."""
    route = network.route(src, dst)
    latency = route.latency_ps / 1e12
    ring = topology.pe.ipcq
    copy = topology.noc.bandwidth
    credit_rtt = 2 * latency + ring.slot_size / copy
    link = min(min(c.bandwidth for c in route.resources),
               ring.slots * ring.slot_size / credit_rtt)
    setup = topology.pe.dma.setup / 1e12
    alpha = latency + setup
    beta = (1 / hbm_stream_bandwidth(topology.hbm) + 1 / link + 1 / copy
            + 3 * setup / _piece(topology))
    return alpha, beta


def _piece(topology) -> int:
    """The bytes of the collectives' message: half an IPCQ ring."""
    return max(1, topology.pe.ipcq.slots // 2) * topology.pe.ipcq.slot_size


def _step(topology):
    """A step's time, ``step(alpha, beta, m)``: alpha + m beta, and for a message shorter
    than a piece the share of its three setups that m beta left out."""
    full, setups = _piece(topology), 3 * topology.pe.dma.setup / 1e12

    def step(alpha: float, beta: float, m: float) -> float:
        return alpha + m * beta + setups * max(0.0, 1 - m / full)
    return step


def _rhd(ab, step, ranks: list[int], nbytes: int, phases: int) -> float:
    n = len(ranks)
    k = n.bit_length() - 1
    active, fold = ranks, 0.0
    if n != 1 << k:
        e = n - (1 << k)
        a, b = ab([(ranks[2 * i], ranks[2 * i + 1]) for i in range(e)])
        fold = 2 * step(a, b, nbytes)
        active = [p for r, p in enumerate(ranks) if r >= 2 * e or r % 2]
    n2 = len(active)
    total = fold
    for j in range(k):
        d = n2 >> (j + 1)
        a, b = ab([(active[i], active[i ^ d]) for i in range(n2)])
        total += phases * 2 * step(a, b, nbytes / 2 ** (j + 1))
    return total


def _tree(ab, step, ranks: list[int], root_rank: int, nbytes: int, piece: int,
          passes: int) -> float:
    n = len(ranks)
    pairs, depth = [], 0
    for v in range(1, n):
        parent, _ = binomial(n, v)
        pairs.append((ranks[(parent + root_rank) % n], ranks[(v + root_rank) % n]))
        depth = max(depth, bin(v).count("1"))
    a, b = ab(pairs)
    children = len(binomial(n, 0)[1])
    return passes * (depth * step(a, b, piece) + nbytes * children * b)


def _hier(topology, network: Network, coords, call: str, grid, ranks: list[int],
          nbytes: int, step) -> float:
    """Ring terms per level of the first rank's rings (every rank's are alike)."""
    rings = levels(grid, tuple(ranks), ranks[0])
    total, size = 0.0, float(nbytes)
    for ring in rings:
        n = len(ring)
        costs = [_pair(topology, network, coords[ring[i]], coords[ring[(i + 1) % n]])
                 for i in range(n)]
        a, b = max(c[0] for c in costs), max(c[1] for c in costs)
        steps = 2 if call == "all_reduce" else 1  # up and back down; the top all-reduces
        total += steps * (n - 1) * step(a, b, size / n)
        size /= n
    return total
