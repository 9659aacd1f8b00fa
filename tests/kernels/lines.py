"""Commands from a loop, a helper in this file, one in another file and a lambda."""

from _base import PARAMS, outputs, reference, setup  # noqa: F401
from _lines_helper import double


def twice(tl, t):
    return t + t  # line 8


def kernel(tl, x, n):
    t = tl.load(tl.shard(x), (n,), "f32")  # line 12
    for _ in range(3):
        t = t * 2.0  # line 14
        tl.cycles(1)  # line 15
    t = twice(tl, t)  # line 16
    t = double(tl, t)  # line 17: two commands, in the other file
    t = (lambda u: tl.exp(u))(t)  # line 18
    tl.store(tl.shard(x), t)  # line 19
