from _base import PARAMS, outputs, reference, setup  # noqa: F401


def kernel(tl, x, n):
    a = tl.load(tl.shard(x), (8, 8), "f32")
    b = tl.load(tl.shard(x), (4, 16), "f32")
    tl.dot(a, b)  # line 7
