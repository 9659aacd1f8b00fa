"""Every PE loads the same block of PE 0's slice at once, then stores it to its own.

The streams of PEs with equal routes to PE 0 are equal (the block's address is not in
their own slices), but their loads meet on PE 0's HBM slice: a representative timed
alone would stream at the full rate. The dedup check must see the meeting and split.
"""

PARAMS = {"n": 1}


def setup(host, p):
    x = host.random("x", (64, 64), "f16")  # 8 KiB, on PE 0
    y = host.random("y", (host.num_pes * 64, 64), "f16")
    return {"x": host.place("x", x, 0), "y": host.scatter("y", y, axis=0)}


def kernel(tl, x, y):
    t = tl.load(x, (64, 64), "f16")
    tl.store(tl.shard(y), t)


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
