"""Two PEs fail: PE 1 late in simulated time, PE 3 early (the one to report)."""

from _base import PARAMS, outputs, reference, setup  # noqa: F401


def kernel(tl, x, n):
    if tl.pid == 1:
        tl.cycles(1000)
        raise ValueError("late")  # line 9
    if tl.pid == 3:
        tl.load(tl.shard(x), (n,), "f32")
        raise ValueError("early")  # line 12
