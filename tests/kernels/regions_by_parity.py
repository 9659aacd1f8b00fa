"""Every PE runs the same composite; even PEs in region "a", odd in "b"."""
PARAMS = {"M": 32, "K": 128, "N": 128}

def setup(host, p):
    a = host.random("a", (p["M"], p["K"]), "bf16")
    b = host.random("b", (p["K"], p["N"]), "bf16")
    return {"a": host.replicate("a", a), "b": host.replicate("b", b),
            "o": host.empty("o", (p["M"], p["N"]), "f32"), **p}

def kernel(tl, a, b, o, M, K, N):
    x = tl.load(tl.shard(a), (M, K), "bf16")
    with tl.region("a" if tl.pid % 2 == 0 else "b"):
        tl.wait(tl.composite(op="gemm", a=x, b=tl.ref(tl.shard(b), (K, N), "bf16"),
                             out_ptr=tl.shard(o), out_dtype="f32"))

def reference(host, p):
    return {}

def outputs(host, args, p):
    return {}
