"""PE 1 loads 1 MiB from PE 0's slice over the NoC link pe0->pe1 while PE 0 sends it a
64 B message over the same link."""

PARAMS = {"n": 1}


def setup(host, p):
    bulk = host.random("bulk", (262144,), "f32")  # 1 MiB
    small = host.random("small", (16,), "f32")  # 64 B
    return {"bulk": host.place("bulk", bulk, 0), "small": host.place("small", small, 0)}


def kernel(tl, bulk, small):
    if tl.pid == 0:
        tl.send(tl.load(small, (16,), "f32"), to="E")
    elif tl.pid == 1:
        tl.load(bulk, (262144,), "f32")
        tl.recv(frm="W", shape=(16,), dtype="f32")


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
