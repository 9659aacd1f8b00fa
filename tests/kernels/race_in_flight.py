"""PE 0 stores x, then tells PE 1, which then loads x: the message orders them, but the
store is still on its way to HBM (100 ns of latency) when PE 1's load starts."""

PARAMS = {"n": 256}


def setup(host, p):
    x = host.random("x", (p["n"],), "f32")
    return {"x": host.place("x", x, 0), "n": p["n"]}


def kernel(tl, x, n):
    if tl.pid == 0:
        t = tl.load(x, (n,), "f32")
        tl.store(x, t)  # line 15
        tl.send(t[:1], to="E")  # "done"
    elif tl.pid == 1:
        tl.recv(frm="W", shape=(1,), dtype="f32")
        tl.load(x, (n,), "f32")  # line 19


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
