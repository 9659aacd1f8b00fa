"""The collectives' algorithms, each a schedule of messages for `exchange`: ring,
direct (pairwise), binomial trees, chains and stars from a root, recursive halving and
doubling, and a ring per level (`hier`)."""

from __future__ import annotations

from collections.abc import Sequence

from kernbench_cli.lang.collectives.exchange import In, Out, exchange, pairwise, segments
from kernbench_cli.lang.collectives.groups import Group, levels, sub

#: the window of an exchange whose waits cannot close a cycle (trees, chains, stars:
#: every wait is towards the root, or every one away from it): a message goes out as soon
#: as what it carries is here, so that pieces received wait in TCM for no others
ACYCLIC = 1 << 62


def ring_pass(g: Group, ring: Sequence[int], span: tuple[int, int], rs: bool, ag: bool) -> None:
    """Ring reduce-scatter (`rs`) and/or all-gather (`ag`) of `span` over `ring`: rank i
    ends holding part i (reduced), or every part. Step s of the reduce-scatter sends part
    i-s-1 (what came in at step s-1, plus this rank's own) and takes part i-s-2; step s of
    the all-gather passes part i-s on."""
    n, me = len(ring), ring.index(g.tl.pid)
    right, left = ring[(me + 1) % n], ring[(me - 1) % n]
    outs: list[Out] = []
    ins: list[In] = []
    parts = [sub(span, n, r) for r in range(n)]
    for k, seg in enumerate(segments(g, parts)):
        if rs:
            for s in range(n - 1):
                last = s == n - 2
                for j, piece in enumerate(g.pieces(seg[(me - s - 1) % n])):
                    outs.append(Out(right, load=piece, needs=("rs", k, s - 1, j) if s else None))
                for j, piece in enumerate(g.pieces(seg[(me - s - 2) % n])):
                    ins.append(In(left, piece[1], load=piece if last else None,
                                   store=piece[0] if last else None,
                                   keep=("rs", k, s, j) if not last or ag else None))
        if ag:
            for s in range(n - 1):
                for j, piece in enumerate(g.pieces(seg[(me - s) % n])):
                    if s:
                        outs.append(Out(right, needs=("ag", k, s - 1, j)))
                    else:
                        outs.append(Out(right, needs=("rs", k, n - 2, j)) if rs
                                    else Out(right, load=piece))
                for j, piece in enumerate(g.pieces(seg[(me - s - 1) % n])):
                    ins.append(In(left, piece[1], store=piece[0],
                                   keep=("ag", k, s, j) if s < n - 2 else None))
    exchange(g, outs, ins)


def direct(g: Group, ring: Sequence[int], span: tuple[int, int], rs: bool,
            ag: bool) -> None:
    """One-shot reduce-scatter (each part straight to its owner, who combines the n-1 that
    come) and/or all-gather (each owner's part straight to every rank), as pairwise
    exchanges: at step s rank i pairs with rank s - i (mod n), so that each pair meets
    once in n steps (a rank paired with itself sits the step out), half-duplex
    (`pairwise`). An owner's partial sum waits in its buffer between steps."""
    n, me = len(ring), ring.index(g.tl.pid)
    parts = [sub(span, n, r) for r in range(n)]
    segs = segments(g, parts)
    for phase in ("rs",) * rs + ("ag",) * ag:
        for s in range(n):
            peer = (s - me) % n
            if peer == me:
                continue
            outs: list[Out] = []
            ins: list[In] = []
            for seg in segs:
                if phase == "rs":  # the partial sum of my part goes through the buffer
                    outs += [Out(ring[peer], load=piece) for piece in g.pieces(seg[peer])]
                    ins += [In(ring[peer], c, load=(at, c), store=at)
                            for at, c in g.pieces(seg[me])]
                else:
                    outs += [Out(ring[peer], load=piece) for piece in g.pieces(seg[me])]
                    ins += [In(ring[peer], c, store=at) for at, c in g.pieces(seg[peer])]
            pairwise(g, me < peer, outs, ins)


def binomial(n: int, v: int) -> tuple[int | None, list[int]]:
    """(parent, children) of relative rank `v` in a binomial tree of `n` rooted at 0."""
    low = v & -v if v else 1 << n.bit_length()
    children = [v + (1 << k) for k in range(n.bit_length())
                if (1 << k) < low and v + (1 << k) < n]
    return (v - low if v else None), children


def tree_reduce(g: Group, root: int) -> None:
    """Binomial-tree reduce to `root`, piece by piece: each rank combines its children's
    pieces with its own and passes the result to its parent."""
    n, ring = g.n, g.ranks
    base = ring.index(root)
    v = (g.me - base) % n
    parent, children = binomial(n, v)
    outs: list[Out] = []
    ins: list[In] = []
    for j, piece in enumerate(g.pieces(g.whole)):
        for c, child in enumerate(children):
            last = c == len(children) - 1
            ins.append(In(ring[(child + base) % n], piece[1], load=piece if c == 0 else None,
                           needs=("acc", j, c - 1) if c else None,
                           store=piece[0] if last and parent is None else None,
                           keep=None if last and parent is None else ("acc", j, c)))
        if parent is not None:  # what it sends is ready once the last child's piece is in
            outs.append(Out(ring[(parent + base) % n], load=None if children else piece,
                             needs=("acc", j, len(children) - 1) if children else None))
    exchange(g, outs, ins, window=ACYCLIC)


def tree_bcast(g: Group, root: int) -> None:
    """Binomial-tree broadcast from `root`, piece by piece: each rank stores what its parent
    sends and passes it to its children."""
    n, ring = g.n, g.ranks
    base = ring.index(root)
    parent, children = binomial(n, (g.me - base) % n)
    outs: list[Out] = []
    ins: list[In] = []
    for j, piece in enumerate(g.pieces(g.whole)):
        if parent is not None:
            ins.append(In(ring[(parent + base) % n], piece[1], store=piece[0],
                           keep=("b", j) if children else None))
        outs += fanout([ring[(c + base) % n] for c in children], piece, ("b", j),
                        loaded=parent is None)
    exchange(g, outs, ins, window=ACYCLIC)


def fanout(peers: list[int], piece: tuple[int, int], key: object,
            loaded: bool) -> list[Out]:
    """Messages carrying one piece to each of `peers`: loaded by the first if `loaded`
    (else a tensor kept under `key`), kept under `key` until the last has gone."""
    outs = []
    for c, peer in enumerate(peers):
        first, last = c == 0, c == len(peers) - 1
        if first and loaded:
            outs.append(Out(peer, load=piece, keep=None if last else key))
        else:
            outs.append(Out(peer, needs=key, drop=last))
    return outs


def chain(g: Group, root: int, reduce: bool) -> None:
    """Pipelined chain through the ring from `root`: broadcast passes each piece on down
    the chain (stored on the way); reduce combines up it, the far end first."""
    n = g.n
    chain = [g.ranks[(g.ranks.index(root) + i) % n] for i in range(n)]
    at = chain.index(g.tl.pid)
    up, down = (chain[at - 1] if at else None), (chain[at + 1] if at < n - 1 else None)
    outs: list[Out] = []
    ins: list[In] = []
    for j, piece in enumerate(g.pieces(g.whole)):
        if reduce:  # pieces flow from the far end (no `down`) towards the root (no `up`)
            if down is not None:
                ins.append(In(down, piece[1], load=piece,
                               store=piece[0] if up is None else None,
                               keep=("r", j) if up is not None else None))
            if up is not None:
                outs.append(Out(up, needs=("r", j)) if down is not None
                            else Out(up, load=piece))
        else:
            if up is not None:
                ins.append(In(up, piece[1], store=piece[0],
                               keep=("b", j) if down is not None else None))
            if down is not None:
                outs.append(Out(down, needs=("b", j)) if up is not None
                            else Out(down, load=piece))
    exchange(g, outs, ins, window=ACYCLIC)


def star(g: Group, root: int, reduce: bool) -> None:
    """Direct broadcast (the root sends each piece to every rank) or reduce (every rank
    sends its pieces to the root, which combines them in rank order)."""
    others = [p for p in g.ranks if p != root]
    outs: list[Out] = []
    ins: list[In] = []
    for j, piece in enumerate(g.pieces(g.whole)):
        if g.tl.pid != root:
            if reduce:
                outs.append(Out(root, load=piece))
            else:
                ins.append(In(root, piece[1], store=piece[0]))
        elif reduce:
            for c, peer in enumerate(others):
                last = c == len(others) - 1
                ins.append(In(peer, piece[1], load=piece if c == 0 else None,
                               needs=("acc", j) if c else None,
                               store=piece[0] if last else None,
                               keep=None if last else ("acc", j)))
        else:
            outs += fanout(others, piece, ("b", j), loaded=True)
    exchange(g, outs, ins, window=ACYCLIC)


def rhd(g: Group, span: tuple[int, int], halving: bool,
         ranks: Sequence[int] | None = None) -> None:
    """Recursive halving (a reduce-scatter: log2 n exchanges, each of half the range still
    held, with the partner whose rank differs in one bit, highest first) or doubling (an
    all-gather: the same partners, lowest bit first, each exchange doubling the range held).
    `ranks` (a power of two of them) defaults to the group's."""
    ranks = g.ranks if ranks is None else ranks
    n, me = len(ranks), ranks.index(g.tl.pid)
    parts = [sub(span, n, r) for r in range(n)]

    def spans(lo: int, hi: int) -> tuple[int, int]:
        return parts[lo][0], sum(c for _, c in parts[lo:hi])

    bits = [1 << b for b in range(n.bit_length() - 1)]
    lo, hi = (0, n) if halving else (me, me + 1)
    for d in (reversed(bits) if halving else bits):
        peer = ranks[me ^ d]
        if halving:
            mid = (lo + hi) // 2
            (keep, give) = ((mid, hi), (lo, mid)) if me & d else ((lo, mid), (mid, hi))
            outs = [Out(peer, load=p) for p in g.pieces(spans(*give))]
            ins = [In(peer, p[1], load=p, store=p[0]) for p in g.pieces(spans(*keep))]
            lo, hi = keep
        else:
            other = (lo ^ d, (lo ^ d) + hi - lo)  # the partner's block: ranges are aligned
            outs = [Out(peer, load=p) for p in g.pieces(spans(lo, hi))]
            ins = [In(peer, p[1], store=p[0]) for p in g.pieces(spans(*other))]
            lo, hi = min(lo, other[0]), max(hi, other[1])
        pairwise(g, me < (me ^ d), outs, ins)


def rhd_all_reduce(g: Group) -> None:
    """Rabenseifner's all-reduce: recursive halving, then doubling. A group of n that is
    not a power of two first folds ranks 0, 2, .., 2e-2 (e = n - 2^k) into their right
    neighbours and, at the end, gets the result back from them."""
    n, me = g.n, g.me
    e = n - (1 << (n.bit_length() - 1))
    pieces = g.pieces(g.whole)
    if me < 2 * e:
        peer = g.ranks[me ^ 1]
        if me % 2 == 0:  # folded: hands its buffer over, waits for the result
            exchange(g, [Out(peer, load=p) for p in pieces], [])
            exchange(g, [], [In(peer, p[1], store=p[0]) for p in pieces])
            return
        exchange(g, [], [In(peer, p[1], load=p, store=p[0]) for p in pieces])
    active = [p for r, p in enumerate(g.ranks) if r >= 2 * e or r % 2]
    rhd(g, g.whole, halving=True, ranks=active)
    rhd(g, g.whole, halving=False, ranks=active)
    if me < 2 * e:
        exchange(g, [Out(g.ranks[me ^ 1], load=p) for p in pieces], [])


def hier(g: Group, top: str) -> None:
    """Rings per level (innermost first): a reduce-scatter on each level but the top's,
    the top level's all-reduce (or reduce-scatter, or nothing for all_gather), then
    all-gathers back down. For all_gather, the reduce-scatters only find the spans."""
    rings = levels(g.tl, g.ranks, g.tl.pid)
    span, spans = g.whole, []
    for level, ring in enumerate(rings):
        spans.append(span)
        at_top = level == len(rings) - 1
        if top == "all_reduce" and at_top:
            ring_pass(g, ring, span, rs=True, ag=True)
            break
        if top != "all_gather":
            ring_pass(g, ring, span, rs=True, ag=False)
        span = sub(span, len(ring), ring.index(g.tl.pid))
    if top == "reduce_scatter":
        return
    downs = list(zip(rings, spans, strict=True))
    if top == "all_reduce":
        downs = downs[:-1]
    for ring, outer in reversed(downs):
        ring_pass(g, ring, outer, rs=False, ag=True)
