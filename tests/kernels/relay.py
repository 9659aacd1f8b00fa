"""PE 0 loads a vector and sends it east; PEs 1 and 2 pass it on; PE 3 takes it."""

PARAMS = {"n": 1024}


def setup(host, p):
    x = host.random("x", (p["n"],), "f32")
    return {"x": host.place("x", x, 0), "n": p["n"]}


def kernel(tl, x, n):
    if tl.pid == 0:
        tl.send(tl.load(x, (n,), "f32"), to="E")
    elif tl.pid in (1, 2):
        tl.send(tl.recv(frm="W", shape=(n,), dtype="f32"), to="E")  # line 15
    elif tl.pid == 3:
        tl.recv(frm="W", shape=(n,), dtype="f32")


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
