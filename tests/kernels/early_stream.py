"""PE 0 loads A (64 x 512 f16, 64 KiB) into TCM, then hands a composite A @ B with B
(512 x 256 f16) in its slice: B's tiles need not wait for A's load."""

PARAMS = {"n": 1}


def setup(host, p):
    a = host.random("a", (64, 512), "f16")
    b = host.random("b", (512, 256), "f16")
    return {"a": host.place("a", a, 0), "b": host.place("b", b, 0)}


def kernel(tl, a, b):
    if tl.pid == 0:
        x = tl.load(a, (64, 512), "f16")
        tl.wait(tl.composite(op="gemm", a=x, b=tl.ref(b, shape=(512, 256), dtype="f16")))


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
