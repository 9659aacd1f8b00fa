"""PE 3 (SIP 0, cube 1, PE 1) loads what the host placed in PE 7's slice (SIP 1, cube 1,
PE 1), then stores it back there: both ends are away from their SIP's port."""

PARAMS = {"n": 256}


def setup(host, p):
    x = host.random("x", (p["n"],), "f32")
    return {"x": host.place("x", x, 7), "n": p["n"]}


def kernel(tl, x, n):
    if tl.pid == 3:
        y = tl.load(x, (n,), "f32")
        tl.store(x, y)


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
