"""Pairs whose messages take equally long links of different widths.

On `cube_line` (cubes of PEs 0 and 1 in a line), PE 8k sends a tile to PE 8k+1 (one NoC
hop inside a cube) and PE 8k+5 to PE 8k+6 (PE 1 of a cube to PE 0 of the next: one
UCIe link, as long to cross as the NoC hop, a quarter as wide). The other PEs idle. The
two kinds of sender have equal streams (relocated) and routes of equal latency and
round trip: only the resources on the way tell them apart.
"""

PARAMS = {"n": 1024}


def setup(host, p):
    x = host.random("x", (host.num_pes * p["n"],), "f32")
    return {"x": host.scatter("x", x, axis=0), "n": p["n"]}


def kernel(tl, x, n):
    if tl.pid % 8 in (0, 5):
        tl.send(tl.load(tl.shard(x), (n,), "f32"), tl.pid + 1)
    elif tl.pid % 8 in (1, 6):
        tl.store(tl.shard(x), tl.recv(tl.pid - 1, (n,), "f32"))


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
