"""Streams that differ only in a MATH command's size: every PE loads 256 f32 of its
shard and sums them, odd PEs only the first 64 (a view: no command, no TCM of its own),
and stores the sum. The two sums' results take the same TCM; only the element count
(the `size` column) tells the streams apart."""

PARAMS = {"n": 256}


def setup(host, p):
    x = host.random("x", (host.num_pes * p["n"],), "f32")
    return {"x": host.scatter("x", x, axis=0), "n": p["n"]}


def kernel(tl, x, n):
    t = tl.load(tl.shard(x), (n,), "f32")
    s = tl.sum(t[:n // 4] if tl.pid % 2 else t)
    tl.store(tl.shard(x), s.reshape(1))


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
