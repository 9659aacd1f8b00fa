"""One load feeding a dot: the critical path is CPU issue, the transfer, the GEMM."""

PARAMS = {"n": 1}


def setup(host, p):
    x = host.random("x", (32, 64), "f16")  # 4 KiB
    return {"x": host.place("x", x, 0)}


def kernel(tl, x):
    if tl.pid == 0:
        t = tl.load(x, (32, 64), "f16")
        tl.dot(t, t, trans_b=True)  # line 14: 32 x 64 @ 64 x 32


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
