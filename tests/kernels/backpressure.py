"""PE 0 sends `count` one-slot messages east; PE 1 takes one every `gap` cycles."""

PARAMS = {"count": 4, "gap": 1000}


def setup(host, p):
    x = host.random("x", (256,), "f32")  # 1 KiB: one slot
    return {"x": host.place("x", x, 0), "count": p["count"], "gap": p["gap"]}


def kernel(tl, x, count, gap):
    if tl.pid == 0:
        t = tl.load(x, (256,), "f32")
        for _ in range(count):
            tl.send(t, to="E")
    elif tl.pid == 1:
        for _ in range(count):
            tl.cycles(gap)
            tl.recv(frm="W", shape=(256,), dtype="f32")


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
