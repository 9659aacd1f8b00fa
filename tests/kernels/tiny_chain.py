"""A chain of tiny PE_MATH commands, each consuming the one before: each waits for the
previous result to leave the adder's pipeline (1 cycle of issue + 4 of latency), so the
chain, not PE_CPU's 4 ns per command, sets the pace."""

from _base import PARAMS, outputs, reference, setup  # noqa: F401


def kernel(tl, x, n):
    t = tl.load(tl.shard(x), (32,), "f32")
    for _ in range(500):
        t = t + 1.0
    tl.store(tl.shard(x), t)
