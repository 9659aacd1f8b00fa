"""The terms of a kernel's analytic lower bounds (its ``bounds(topology, p)``): the least time
a piece of work takes on the model, worked out from the configuration alone.

A kernel's `bounds()` returns ``{name: (picoseconds, how)}``; each must be a true lower
bound of the latency the model gives that run (every run checks latency >= each one, and
`kernbench run --bounds-only` prints them without simulating). The terms here are ones
the model cannot beat, each rounded as the model rounds it (up, per transfer or GEMM, so
a sum of them is at most what the engines were busy):

- `hbm_ps`: bytes through one PE's HBM slice at its stream rate (peak less refresh:
  `hw.network.hbm_stream_bandwidth`); DRAM page openings and other PEs only add to it;
- `gemm_ps`: a GEMM on one PE's array at the array shape the model uses (its folds:
  `hw.gemm.gemm_cycles`), times the passes its operand width takes. A composite's tiles
  or a hand-tiled loop only add folds and fills (the fold counts of the parts of a split
  dimension add up to at least the whole's), so the untiled GEMM is a lower bound of the
  tiled one; a GEMV (M = 1) uses one row of the array per fold;
- `link_ps`: bytes at a link's bandwidth (a DMA transfer streams at its path's slowest
  link: a message at most that fast; a receive copy, out of an IPCQ slot, at
  `copy_bandwidth`).

A PE's DMA engine is one in-order engine: its loads, stores, sends and receive copies
stream one after another, so their times add (the alpha-beta form: the first transfer's
setup, alpha, then each byte at its path's rate, beta).
"""

from __future__ import annotations

from kernbench_cli.config.units import format_bandwidth, format_frequency
from kernbench_cli.formats import F16, F32
from kernbench_cli.hw.engine import cycles_to_ps
from kernbench_cli.hw.gemm import array_rate, gemm_cycles
from kernbench_cli.hw.network import PS_PER_S, hbm_stream_bandwidth

#: How a `how` text states each dataflow's fold formula (`hw.gemm.gemm_cycles`).
FOLDS = {
    "os": "ceil(M/R)*ceil(N/C)*(K+R+C-2)",
    "ws": "ceil(K/R)*ceil(N/C)*(M+2R+C-2)",
    "is": "ceil(K/R)*ceil(M/C)*(N+2R+C-2)",
}


def stream_bandwidth(topology) -> int:
    """B/s one PE's HBM slice streams at (its peak less the share refresh takes)."""
    return hbm_stream_bandwidth(topology.hbm)


def hbm_ps(topology, nbytes: int) -> int:
    """Least ps for `nbytes` through one HBM slice, rounded up."""
    return link_ps(nbytes, stream_bandwidth(topology))


def link_ps(nbytes: int, bandwidth: int) -> int:
    """Least ps for `nbytes` at `bandwidth` B/s, rounded up (as `hw.network.transfer_ps`)."""
    return -(-nbytes * PS_PER_S // bandwidth)


def copy_bandwidth(topology) -> int:
    """B/s a PE's DMA copies a received message out of its IPCQ slot at (the NoC link
    rate: the copy crosses no shared resource)."""
    return topology.noc.bandwidth


def gemm_passes(topology, width: int) -> int:
    """The array passes a GEMM of `width`-byte float operands takes (`hw.gemm.array_rate`:
    `pe.gemm.passes.f32` for 4, `.f16` for 2)."""
    return array_rate(topology.pe.gemm, F32 if width == 4 else F16)[0]


def gemm_cycles_of(topology, m: int, k: int, n: int, width: int) -> int:
    """Array cycles of C[m,n] = A[m,k] @ B[k,n] untiled, with operands `width` bytes wide:
    the folds of the array's dataflow times the passes that width takes."""
    g = topology.pe.gemm
    return gemm_cycles(m, k, n, g.rows, g.cols, g.dataflow) * gemm_passes(topology, width)


def gemm_ps(topology, cycles: int) -> int:
    """`cycles` of the array at the PE clock, rounded up."""
    return cycles_to_ps(cycles, topology.pe.clock)


def gemm_how(topology, width: int) -> str:
    """The array, its fold formula and the passes of `width`-byte operands, for a `how`."""
    g = topology.pe.gemm
    passes = gemm_passes(topology, width)
    return (f"{g.rows}x{g.cols} {g.dataflow} array, {FOLDS[g.dataflow]} cycles a GEMM"
            f"{f' x {passes} passes' if passes != 1 else ''} at "
            f"{format_frequency(topology.pe.clock)}")


def stream_how(topology) -> str:
    """The HBM stream rate, for a `how`."""
    return f"{format_bandwidth(stream_bandwidth(topology))} (HBM stream rate)"
