"""Collectives benchmark: one collective over groups of PEs, with nccl-tests' bandwidths.

Every PE holds a buffer of `bytes` (count = bytes / element size) in its HBM
slice and calls `collective` on it with `algo` (kernbench_cli.lang.collectives,
which docs/kernels.md describes). `group` is `all` (one group of every PE),
`sip` or `cube` (one group per SIP or cube, all running at once).

Reported as nccl-tests reports them (its PERFORMANCE.md), with t the run's latency:
  algbw = bytes / t
  busbw = algbw * 2(n-1)/n (all_reduce), * (n-1)/n (reduce_scatter, all_gather),
          * 1 (broadcast, reduce)
beside the closed-form alpha-beta time of the same algorithm on the same
machine (`alpha_beta`): its bus bandwidth and the ratio.

Inputs are small integers, so that every order of summation gives the same
exact sum: the check against numpy is exact for every algorithm and dtype.
"""

import numpy as np

from kernbench_cli.config.units import describe_size
from kernbench_cli.lang import alpha_beta
from kernbench_cli.lang import collectives as coll

PARAMS = {
    "collective": "all_reduce",
    "bytes": 1 << 18,
    "algo": "ring",
    "op": "sum",
    "dtype": "f32",
    "group": "all",
    "root": 0,
}
CHOICES = {
    "collective": tuple(coll.ALGOS),
    "algo": ("ring", "direct", "tree", "rhd", "hier"),
    "op": coll.OPS,
    "dtype": ("f16", "bf16", "f32"),
    "group": ("all", "sip", "cube"),
}
PARAM_INFO = {
    "collective": "all_reduce, reduce_scatter, all_gather, broadcast or reduce",
    "bytes": ("the buffer each PE holds (nccl-tests' size: all_gather's output, "
              "reduce_scatter's input)", "B"),
    "algo": "ring, direct, tree, rhd or hier (which each collective offers: docs/kernels.md)",
    "op": "the reduction: sum, max or min",
    "dtype": "element type of the buffers",
    "group": "all: one group of every PE; sip, cube: one group per SIP or cube, at once",
    "root": "broadcast and reduce: the root's rank in its group",
}
#: the largest integer each dtype holds exactly with every integer below it
_EXACT = {"f16": 2048, "bf16": 256, "f32": 1 << 24}


def _groups(host, p):
    """The groups, as lists of global PE indexes (every PE is in one)."""
    s = host.topology.system
    size = {"all": host.num_pes, "sip": s.cubes_per_sip * s.pes_per_cube,
            "cube": s.pes_per_cube}[p["group"]]
    return [list(range(first, first + size)) for first in range(0, host.num_pes, size)]


def _check(host, p):
    item = np.dtype("float32").itemsize if p["dtype"] == "f32" else 2
    if p["bytes"] <= 0 or p["bytes"] % item:
        raise ValueError(f"bytes = {p['bytes']} must be a positive multiple of the "
                         f"{item} B of a {p['dtype']} element")
    room = host.topology.hbm.slice_size
    if p["bytes"] > room:  # before any input is drawn: the host need not hold what cannot fit
        raise ValueError(f"bytes = {describe_size(p['bytes'])} is more than a PE's HBM "
                         f"slice holds ({describe_size(room)}, hbm.slice_size)")
    if p["algo"] not in coll.ALGOS[p["collective"]]:
        raise ValueError(f"{p['collective']} has no algo {p['algo']!r} (it has: "
                         f"{', '.join(coll.ALGOS[p['collective']])})")
    n = len(_groups(host, p)[0])
    if not 0 <= p["root"] < n:
        raise ValueError(f"root = {p['root']} is not a rank of a group of {n} PEs")
    if p["algo"] == "rhd" and p["collective"] != "all_reduce" and n & (n - 1):
        raise ValueError(f"rhd {p['collective']} needs a power-of-two group; groups here "
                         f"have {n} PEs")
    return p["bytes"] // item


def setup(host, p):
    from kernbench_cli.lang.dtypes import dtype  # here: bounds() need not load ml_dtypes
    count = _check(host, p)
    groups = _groups(host, p)
    shape = (host.num_pes, count)
    if host.timing_only:
        x = np.broadcast_to(np.zeros((), dtype(p["dtype"])), shape)
    else:  # |x| <= k with n * k exact in the dtype: sums in any order are exact
        k = max(1, min(8, _EXACT[p["dtype"]] // len(groups[0])))
        x = host.rng.integers(-k, k + 1, size=shape).astype(dtype(p["dtype"]))
    host.inputs["x"] = x
    return {"buf": host.scatter("x", x.reshape(-1), axis=0), "count": count,
            "groups": groups, "p": {k: p[k] for k in ("collective", "algo", "op", "dtype",
                                                      "root")}}


def kernel(tl, buf, count, groups, p):
    group = groups[tl.pid // len(groups[0])]
    ptr, call = tl.shard(buf), p["collective"]
    if call in ("broadcast", "reduce"):
        root = coll.ranks(tl, group)[p["root"]]
        if call == "broadcast":
            coll.broadcast(tl, ptr, count, p["dtype"], root, group, p["algo"])
        else:
            coll.reduce(tl, ptr, count, p["dtype"], root, group, p["algo"], p["op"])
    elif call == "all_gather":
        coll.all_gather(tl, ptr, count, p["dtype"], group, p["algo"])
    else:
        getattr(coll, call)(tl, ptr, count, p["dtype"], group, p["algo"], p["op"])


def reference(host, p):
    x = host.inputs["x"].astype(np.float64)
    fold = {"sum": np.sum, "max": np.max, "min": np.min}[p["op"]]
    out = x.copy()
    count = x.shape[1]
    grid = coll.Grid(host.topology)
    for group in _groups(host, p):
        folded = fold(x[group], axis=0)
        ranks = coll.ranks(grid, group)
        call = p["collective"]
        if call == "all_reduce":
            out[group] = folded
        elif call == "broadcast":
            out[group] = x[ranks[p["root"]]]
        elif call == "reduce":
            out[ranks[p["root"]]] = folded
        else:
            parts = coll.layout(grid, count, group, p["algo"])
            for pid in group:
                for owner, (at, n) in parts.items():
                    if call == "all_gather":
                        out[pid, at:at + n] = x[owner, at:at + n]
                    elif owner == pid:
                        out[pid, at:at + n] = folded[at:at + n]
    if p["collective"] == "reduce_scatter":  # the rest of a buffer is scratch
        out = _parts_only(host, p, out)
    return {"buf": out.astype(host.inputs["x"].dtype)}


def _parts_only(host, p, full):
    """Each PE's own part, concatenated in PE order (reduce_scatter's result)."""
    grid, count = coll.Grid(host.topology), full.shape[1]
    pieces = []
    for group in _groups(host, p):
        parts = coll.layout(grid, count, group, p["algo"])
        pieces += [full[pid, at:at + n] for pid in group for at, n in [parts[pid]]]
    return np.concatenate(pieces)


def outputs(host, args, p):
    full = np.stack([host.read_shard(args["buf"], pid) for pid in range(host.num_pes)])
    if p["collective"] == "reduce_scatter":
        full = _parts_only(host, p, full.astype(np.float64)).astype(full.dtype)
    return {"buf": full}


def metrics(topology, p, run):
    """algbw and busbw as nccl-tests defines them, and the alpha-beta model's busbw
    (kernbench_cli/lang/alpha_beta.py) for the same algorithm on the same links; none for
    a group of one, which moves nothing (its latency is 0: no bandwidth to state)."""
    class _Host:  # what _groups reads
        num_pes = topology.num_pes

    _Host.topology = topology
    group = _groups(_Host, p)[0]
    n, nbytes = len(group), p["bytes"]
    if n == 1:
        return {}
    seconds = run.latency_ps / 1e12
    model = alpha_beta.seconds(topology, p["collective"], p["algo"], group, nbytes, p["root"])
    busbw = alpha_beta.busbw_gbps(p["collective"], n, nbytes, seconds)
    model_busbw = alpha_beta.busbw_gbps(p["collective"], n, nbytes, model)
    return {
        "algbw_gbps": (nbytes / seconds / 1e9 if seconds else 0.0, f"({nbytes} B / latency)"),
        "busbw_gbps": (busbw, f"(algbw x {alpha_beta.BUS_FACTOR[p['collective']](n)}, "
                              f"nccl-tests' factor for n = {n})"),
        "alpha_beta_busbw_gbps": (model_busbw, f"(the alpha-beta time of {p['algo']}: "
                                               f"{model * 1e6:.3f} us)"),
        "busbw_over_alpha_beta": (busbw / model_busbw if model_busbw else 0.0, ""),
    }


def bounds(topology, p):
    """Lower bounds on the latency, in ps, from what each PE must move whatever the
    algorithm (every element of its input that another PE needs leaves it at least once;
    every element of its result that holds another PE's data comes in at least once), or
    for `ring`, what the ring moves (reduce-scatter: every part but its own out, every part
    but its left neighbour's in; all-gather: every part but its right neighbour's out,
    every part but its own in):

    - `memory`: the PE's buffer bytes read and written through its HBM slice at the slice's
      stream rate;
    - `collective`, alpha-beta on the PE's one in-order DMA engine: its first transfer's
      setup (every transfer's, if setup does not overlap), then the HBM bytes at the stream
      rate, the bytes it sends at the fastest link level it can send over (its ring hop's
      slowest level for `ring`: noc within a cube, ucie between cubes, sip_link between
      SIPs, rack_link between racks), and the bytes it receives copied out of its IPCQ ring
      at the NoC rate.

    The PE with the largest of each is named."""
    from kernbench_cli.config.units import format_bandwidth, format_time_ps
    from kernbench_cli.lang import bounds as lb

    class _Host:  # what _check and _groups read
        num_pes = topology.num_pes

    _Host.topology = topology
    count = _check(_Host, p)
    groups = _groups(_Host, p)
    if len(groups[0]) < 2:
        return {}  # a group of one moves nothing
    copy, dma = lb.copy_bandwidth(topology), topology.pe.dma
    memory, collective = _busiest(topology, p, groups, count)
    _, pid, hbm, sent, got, rate, transfers = collective
    each = "transfer" if transfers == 1 else "transfers"
    setup = f"{format_time_ps(dma.setup)} setup + " if dma.setup_overlap else \
        f"{transfers:,} {each} x {format_time_ps(dma.setup)} setup + "
    how = f"{p['algo']} {p['collective']}" if p["algo"] == "ring" else \
        f"{p['collective']} by any algorithm"
    return {
        "memory": (memory[0], f"PE {-memory[1]}'s buffer read and written, {memory[2]:,} B, "
                              f"at {lb.stream_how(topology)}"),
        "collective": (collective[0], f"alpha-beta on PE {-pid}'s DMA ({how}): {setup}"
                                      f"{hbm:,} B at the HBM stream rate + {sent:,} B sent "
                                      f"at {format_bandwidth(rate)} + {got:,} B received at "
                                      f"{format_bandwidth(copy)}"),
    }


def _moved(p, ranks, r, own, nbytes):
    """(HBM bytes, bytes sent, bytes received) rank `r` of `ranks` moves at least."""
    n, call, pid = len(ranks), p["collective"], ranks[r]
    mine, left, right = own[pid], own[ranks[r - 1]], own[ranks[(r + 1) % n]]
    root = ranks[p["root"]] == pid
    ring = p["algo"] == "ring"
    if call == "all_reduce":
        return 2 * nbytes, *((2 * nbytes - mine - right, 2 * nbytes - left - mine) if ring
                             else (nbytes, nbytes))
    if call == "reduce_scatter":
        return nbytes + mine, nbytes - mine, (nbytes - left if ring else mine)
    if call == "all_gather":
        return nbytes, (nbytes - right if ring else mine), nbytes - mine
    if call == "broadcast":
        return nbytes, (nbytes if root else 0), (0 if root else nbytes)
    return (2 * nbytes, 0, nbytes) if root else (nbytes, nbytes, 0)  # reduce


def _level_bandwidth(topology, a, b):
    """The bandwidth of the slowest link level a route from PE `a` to PE `b` must cross:
    noc within a cube, ucie between cubes of a SIP, sip_link between SIPs of a rack,
    rack_link between racks (a route may cross slower ones too)."""
    s = topology.system
    per_sip = s.cubes_per_sip * s.pes_per_cube
    per_rack = s.sips_per_rack * per_sip
    for size, link in ((s.pes_per_cube, topology.noc), (per_sip, topology.ucie),
                       (per_rack, topology.sip_link)):
        if a // size == b // size:
            return link.bandwidth
    return topology.rack_link.bandwidth


def _busiest(topology, p, groups, count: int) -> tuple[tuple, tuple]:
    """The PEs of `groups` with the largest `memory` and `collective` bounds (see
    `bounds`): (ps, -pid, bytes) and (ps, -pid, HBM bytes, sent, received, send rate,
    transfers)."""
    from kernbench_cli.lang import bounds as lb

    item, grid, dma = p["bytes"] // count, coll.Grid(topology), topology.pe.dma
    copy, stream = lb.copy_bandwidth(topology), lb.stream_bandwidth(topology)
    memory, collective = (0, 1, 0), (0, 1, 0, 0, 0, 0, 1)
    for group in groups:
        ranks = coll.ranks(grid, group)
        own = {pid: n * item for pid, (_, n) in coll.layout(grid, count, group,
                                                              p["algo"]).items()}
        fastest = _fastest(topology, ranks)
        for r, pid in enumerate(ranks):
            hbm, sent, got = _moved(p, ranks, r, own, p["bytes"])
            rate = fastest
            if p["algo"] == "ring":  # each send to the next rank (a reduce's: the one before)
                rate = _level_bandwidth(topology, pid, ranks[(r + (
                    -1 if p["collective"] == "reduce" else 1)) % len(ranks)])
            slot = topology.pe.ipcq.slot_size  # a message goes in chunks of a slot at most
            transfers = 1 if dma.setup_overlap else max(1, -(-sent // slot) + -(-got // slot))
            ps = (transfers * dma.setup + lb.link_ps(hbm, stream) + lb.link_ps(sent, rate)
                  + lb.link_ps(got, copy))
            memory = max(memory, (lb.link_ps(hbm, stream), -pid, hbm))
            collective = max(collective, (ps, -pid, hbm, sent, got, rate, transfers))
    return memory, collective


def _fastest(topology, ranks):
    """The bandwidth of the fastest link level any two of `ranks` must cross between them
    (`_level_bandwidth`): an upper bound on the rate of any message within the group."""
    s = topology.system
    per_sip = s.cubes_per_sip * s.pes_per_cube
    cubes, sips = {r // s.pes_per_cube for r in ranks}, {r // per_sip for r in ranks}
    racks = {r // (s.sips_per_rack * per_sip) for r in ranks}
    levels = [(len(cubes) < len(ranks), topology.noc), (len(sips) < len(cubes), topology.ucie),
              (len(racks) < len(sips), topology.sip_link), (len(racks) > 1, topology.rack_link)]
    return max(link.bandwidth for present, link in levels if present)
