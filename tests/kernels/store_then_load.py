"""docs/kernels.md's in-order PE_DMA example, on PE 0: a 64 x 512 by 512 x 64 f16 `tl.dot`,
its result stored, and an independent 64 x 64 load issued after the store (`load_first=0`)
or before it (`load_first=1`). PE_DMA runs its transfers in the order they were issued, so
the later load waits for the store, which waits for the dot."""

import numpy as np

PARAMS = {"load_first": 0}


def setup(host, p):
    a = host.random("a", (64, 512), "f16")
    b = host.random("b", (512, 64), "f16")
    c = host.random("c", (64, 64), "f16")
    out = np.zeros((64, 64), np.float32)
    return {"a": host.place("a", a, 0), "b": host.place("b", b, 0), "c": host.place("c", c, 0),
            "out": host.place("out", out, 0), "load_first": p["load_first"]}


def kernel(tl, a, b, c, out, load_first):
    if tl.pid != 0:
        return
    x = tl.load(a, (64, 512), "f16")
    y = tl.load(b, (512, 64), "f16")
    z = tl.dot(x, y)  # about 8.7 us on a 16 x 16 array
    if load_first:
        w = tl.load(c, (64, 64), "f16")
        tl.store(out, z)
    else:
        tl.store(out, z)  # starts when z exists
        w = tl.load(c, (64, 64), "f16")  # queues behind the store
    tl.sum(w)


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
