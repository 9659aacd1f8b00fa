"""Many tiny independent PE_MATH commands in a row: each costs PE_CPU 4 ns to issue (the
shipped cost) and PE_MATH 1 ns to run (its 4 cycles of latency overlap the next ones), so
the CPU sets the pace (ADR-0064 requirement 3)."""

from _base import PARAMS, outputs, reference, setup  # noqa: F401


def kernel(tl, x, n):
    t = tl.load(tl.shard(x), (32,), "f32")
    for _ in range(500):
        u = t + 1.0
    tl.store(tl.shard(x), u)
