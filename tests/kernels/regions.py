"""Named regions, nested: a load and a sum in "outer/a", a chain of MATH in "outer/b",
a store in "tail", and a first command outside any region."""

import numpy as np

PARAMS = {"n": 4096}


def setup(host, p):
    x = host.random("x", (host.num_pes * p["n"],), "f32")
    return {"x": host.scatter("x", x, axis=0), "y": host.empty("y", (p["n"],), "f32"),
            "n": p["n"]}


def kernel(tl, x, y, n):
    t = tl.load(tl.shard(x), shape=(n,), dtype="f32")
    with tl.region("outer"):
        with tl.region("a"):
            u = tl.load(tl.shard(x), shape=(n,), dtype="f32") + t
        with tl.region("b"):
            for _ in range(3):
                u = u * 2.0
    with tl.region("tail"):
        tl.store(tl.shard(y), u)


def reference(host, p):
    x = host.inputs["x"].reshape(-1, p["n"]).astype(np.float64)
    return {"y": (16 * x).astype(np.float32).reshape(-1)}


def outputs(host, args, p):
    return {"y": host.gather(args["y"], axis=0)}
