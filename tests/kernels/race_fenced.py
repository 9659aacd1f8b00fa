"""As race_in_flight, with `tl.fence()` between the store and the message: PE 0's send waits
until its store has landed, so PE 1's load after the receive reads the stored bytes."""

PARAMS = {"n": 256}


def setup(host, p):
    x = host.random("x", (p["n"],), "f32")
    return {"x": host.place("x", x, 0), "n": p["n"]}


def kernel(tl, x, n):
    if tl.pid == 0:
        t = tl.load(x, (n,), "f32")
        tl.store(x, t)  # line 15
        tl.fence()
        tl.send(t[:1], to="E")  # "done", once the store is in HBM
    elif tl.pid == 1:
        tl.recv(frm="W", shape=(1,), dtype="f32")
        tl.load(x, (n,), "f32")  # line 20


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
