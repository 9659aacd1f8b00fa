"""PE 0 marks a region; PE 1 (no region marks) runs a composite."""
PARAMS = {"M": 64, "K": 64, "N": 128}

def setup(host, p):
    a = host.random("a", (p["M"], p["K"]), "bf16")
    b = host.random("b", (p["K"], p["N"]), "bf16")
    return {"a": host.place("a", a, 1), "b": host.place("b", b, 1),
            "x": host.place("x", a, 0), **p}

def kernel(tl, a, b, x, M, K, N):
    if tl.pid == 0:
        with tl.region("r"):
            tl.load(x, (M, K), "bf16")
        return
    if tl.pid != 1:
        return
    h = tl.composite(op="gemm", a=tl.ref(a, (M, K), "bf16"), b=tl.ref(b, (K, N), "bf16"),
                     out_dtype="f32")
    tl.wait(h)

def reference(host, p):
    return {}

def outputs(host, args, p):
    return {}
