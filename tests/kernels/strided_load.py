"""Loads of one PE from its own slice: 64 rows of 64 B, 8 KiB apart (a page each), then
two 4 KiB blocks back to back (the second's setup under the first's streaming)."""

PARAMS = {"mode": "strided"}


def setup(host, p):
    x = host.random("x", (64, 4096), "f16")  # 512 KiB: rows of 8 KiB
    return {"x": host.place("x", x, 0), "mode": p["mode"]}


def kernel(tl, x, mode):
    if mode == "strided":
        tl.load(x, (64, 32), "f16", stride=4096)
    else:
        tl.load(x, (2048,), "f16")
        tl.load(x + 4096, (2048,), "f16")


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
