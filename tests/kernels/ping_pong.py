"""PE 0 sends x east; PE 1 adds 1 and sends it back; PE 0 stores the answer."""

import numpy as np

PARAMS = {"n": 3000, "dtype": "f32"}


def setup(host, p):
    x = host.random("x", (p["n"],), p["dtype"])
    return {"x": host.place("x", x, 0), "out": host.place("out", np.zeros_like(x), 0),
            "n": p["n"], "dt": p["dtype"]}


def kernel(tl, x, out, n, dt):
    if tl.pid == 0:
        tl.send(tl.load(x, (n,), dt), to="E")
        tl.store(out, tl.recv(frm="E", shape=(n,), dtype=dt))
    elif tl.pid == 1:
        got = tl.recv(frm="W", shape=(n,), dtype=dt)
        tl.send(got + 1.0, to="W")


def reference(host, p):
    return {"out": (host.inputs["x"].astype(np.float32) + 1).astype(host.inputs["x"].dtype)}


def outputs(host, args, p):
    return {"out": host.read(args["out"], (p["n"],), p["dtype"])}
