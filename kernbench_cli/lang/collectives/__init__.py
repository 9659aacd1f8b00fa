"""Collectives for kernels, written on `tl.send` and `tl.recv` (read them, copy them).

    from kernbench_cli.lang import collectives as coll

    coll.all_reduce(tl, ptr, count, "f32")                   # every PE of the grid, ring
    coll.all_reduce(tl, ptr, count, "f16", group=tp, algo="hier")
    mine = coll.reduce_scatter(tl, ptr, count, "f32")        # -> (offset, count) of mine

Every PE of the group calls the same collective with the same arguments (its
own `ptr`). A buffer is `count` elements of `dtype` at `ptr` in the calling
PE's memory (its HBM slice, usually), worked on in place as NCCL's in-place
calls are: the result is where the input was. Data moves through TCM in
pieces of half an IPCQ ring (`tl.ring_capacity()`: 8 KiB of 4 x 4 KiB slots;
one slot if the ring has only one), loaded, combined by PE_MATH
(`op`: "sum", "max" or "min"), sent, received and stored as the algorithm
says, so every cost is the model's own: the DMA's loads, stores, sends and
receive copies, the links, the credits. Values are combined in the buffer's
dtype (an f16 sum rounds at each step, as on the hardware).

Groups (`group=`): any PEs, as global indexes; the default is every PE. A
group's ranks follow the mesh: PEs of a cube in a cycle of its PE mesh
(neighbours one hop apart, the cycle closed where the mesh allows), cubes in
a cycle of the SIP's cube mesh, then SIPs. `ranks(tl, group)` shows it.

Algorithms (`algo=`):

``ring``
    Reduce-scatter then all-gather around the ring (Patarasuk & Yuan): each
    step moves 1/n of the buffer to the next rank. Bandwidth-optimal; 2(n-1)
    steps of latency. broadcast/reduce: a pipelined chain from the root.
``direct``
    One step: every rank sends each part straight to its owner (reduce-
    scatter), then each owner to every rank (all-gather). n-1 messages per
    part, latency of one (long) hop each.
``tree``
    A binomial tree (ceil(log2 n) levels) to the root and back, piece by
    piece: reduce, broadcast, and all_reduce as reduce + broadcast.
``rhd``
    Recursive halving then doubling (Rabenseifner): log2 n exchanges with
    partners 2^k apart; a group that is not a power of two folds its extra
    ranks into partners first (all_reduce only).
``hier``
    Hierarchical, one ring per level (the cube's NoC, the SIP's UCIe, the
    SIP links, the rack links), as ASTRA-sim composes dimensions:
    reduce-scatter up the levels, all-reduce at the top, all-gather back
    down. Needs a regular group: as many members in each cube, cubes in each
    SIP, SIPs in each rack.

No message size or ring depth deadlocks them. A message is at most half a
ring; in a ring a rank is never more messages ahead of what it has received
than the ring holds (`exchange.exchange`), so a rank waits only on one that is
further behind and no cycle of waits can form; pairs exchange half-duplex
(`exchange.pairwise`), so a sender's receiver is receiving on that ring; trees,
chains and stars wait only towards the root or away from it. A
reduce_scatter/all_gather result is a part of a balanced split of the buffer
in rank order (`part`); hierarchical ones nest the split per level.
"""

from __future__ import annotations

from collections.abc import Sequence

from kernbench_cli.lang.collectives.algorithms import (
    chain,
    direct,
    hier,
    rhd,
    rhd_all_reduce,
    ring_pass,
    star,
    tree_bcast,
    tree_reduce,
)
from kernbench_cli.lang.collectives.groups import (
    ALGOS,
    OPS,
    Grid,
    Group,
    layout,
    part,
    ring_order,
    start,
)

__all__ = ["ALGOS", "OPS", "Grid", "all_gather", "all_reduce", "broadcast", "layout", "part",
           "ranks", "reduce", "reduce_scatter"]


def all_reduce(tl, ptr: int, count: int, dtype: str, group: Sequence[int] | None = None,
               algo: str = "ring", op: str = "sum") -> None:
    """Every rank's buffer becomes the element-wise `op` of all of them."""
    _run(start(tl, "all_reduce", ptr, count, dtype, group, algo, op), "all_reduce")


def reduce_scatter(tl, ptr: int, count: int, dtype: str, group: Sequence[int] | None = None,
                   algo: str = "ring", op: str = "sum") -> tuple[int, int]:
    """Each rank's part of the buffer (`part`) becomes the `op` of that part over every rank;
    the rest of its buffer is left as scratch. Returns the part: (offset, count) in
    elements."""
    g = start(tl, "reduce_scatter", ptr, count, dtype, group, algo, op)
    _run(g, "reduce_scatter")
    return g.mine()


def all_gather(tl, ptr: int, count: int, dtype: str, group: Sequence[int] | None = None,
               algo: str = "ring") -> tuple[int, int]:
    """Each rank contributes its part of the buffer (`part`, already in place); afterwards
    every rank's buffer holds every part. Returns this rank's part."""
    g = start(tl, "all_gather", ptr, count, dtype, group, algo, "sum")
    _run(g, "all_gather")
    return g.mine()


def library_call(tl):
    """`lang.tl.core.library_call`, imported on first use: a kernel's `bounds()` may import
    this module without loading the `tl` language (and ml_dtypes)."""
    from kernbench_cli.lang.tl.core import library_call as pinned

    return pinned(tl)


def _run(g: Group, call: str) -> None:
    """all_reduce, reduce_scatter or all_gather with `g.algo`."""
    if g.n == 1:
        return
    with library_call(g.tl):
        _run_algo(g, call)


def _run_algo(g: Group, call: str) -> None:
    """`_run`'s choice of algorithm."""
    rs, ag = call != "all_gather", call != "reduce_scatter"
    if g.algo == "ring":
        ring_pass(g, g.ranks, g.whole, rs=rs, ag=ag)
    elif g.algo == "direct":
        direct(g, g.ranks, g.whole, rs=rs, ag=ag)
    elif g.algo == "tree":  # all_reduce only
        tree_reduce(g, g.ranks[0])
        tree_bcast(g, g.ranks[0])
    elif g.algo == "rhd":
        if rs and ag:
            rhd_all_reduce(g)
        else:
            rhd(g, g.whole, halving=rs)
    else:
        hier(g, top=call)


def broadcast(tl, ptr: int, count: int, dtype: str, root: int,
              group: Sequence[int] | None = None, algo: str = "tree") -> None:
    """Every rank's buffer becomes PE `root`'s (a global PE index in the group)."""
    _rooted(start(tl, "broadcast", ptr, count, dtype, group, algo, "sum", root), root,
            reduce=False)


def reduce(tl, ptr: int, count: int, dtype: str, root: int,
           group: Sequence[int] | None = None, algo: str = "tree", op: str = "sum") -> None:
    """PE `root`'s buffer becomes the `op` of every rank's; the others' are left as they
    were (tree and ring use them as scratch)."""
    _rooted(start(tl, "reduce", ptr, count, dtype, group, algo, op, root), root, reduce=True)


def _rooted(g: Group, root: int, reduce: bool) -> None:
    """broadcast (from `root`) or reduce (to it) with `g.algo`."""
    if g.n == 1:
        return
    with library_call(g.tl):
        if g.algo == "tree":
            (tree_reduce if reduce else tree_bcast)(g, root)
        elif g.algo == "ring":
            chain(g, root, reduce=reduce)
        else:
            star(g, root, reduce=reduce)


def ranks(tl, group: Sequence[int] | None = None) -> tuple[int, ...]:
    """The group's PEs in ring order (the order its ranks take): see the module's text."""
    return ring_order(tl, group)
