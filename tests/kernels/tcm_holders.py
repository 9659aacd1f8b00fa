"""Tensors that fill the TCM, then one more: the error says who holds it."""

from _base import outputs, reference  # noqa: F401

PARAMS = {"n": 1}


def setup(host, p):
    x = host.random("x", (256 * 1024,), "f32")  # 1 MiB
    return {"x": host.place("x", x, 0)}


def kernel(tl, x):
    if tl.pid != 0:
        return
    big = tl.load(x, (256 * 1024,), "f32")  # line 16: 1 MiB
    half = tl.load(x, (128 * 1024,), "f32")  # line 17: 512 KiB
    doubled = half * 2.0  # line 18: 512 KiB
    more = tl.load(x, (64 * 1024,), "f32")  # line 19: 256 KiB more than fits
    del big, doubled, more
