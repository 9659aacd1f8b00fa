"""PE 1 loads x from PE 0's slice, tells PE 0 at once, and PE 0 overwrites x: the message
orders the load before the store, but a send does not wait for a load, so PE 1's read is
still on its way when PE 0's store lands."""

PARAMS = {"n": 4096}


def setup(host, p):
    x = host.random("x", (p["n"],), "f32")
    return {"x": host.place("x", x, 0), "n": p["n"]}


def kernel(tl, x, n):
    if tl.pid == 1:
        tl.load(x, (n,), "f32")  # line 15
        tl.send(tl.zeros((1,)), to="W")  # "done reading", not waiting for the load
    elif tl.pid == 0:
        t = tl.recv(frm="E", shape=(1,), dtype="f32")
        tl.store(x, t)  # line 19: the first element


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
