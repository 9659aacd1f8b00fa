"""A kernel that calls a collective with one bad argument (`-p case=...`)."""

from kernbench_cli.lang import collectives as coll

PARAMS = {"case": "algo"}


def setup(host, p):
    return {"buf": host.empty("buf", (64,), "f32"), "case": p["case"]}


def kernel(tl, buf, case):
    ptr = tl.shard(buf)
    if case == "algo":
        coll.all_reduce(tl, ptr, 64, "f32", algo="butterfly")
    elif case == "outside":
        coll.all_reduce(tl, ptr, 64, "f32", group=[0, 1])
    elif case == "irregular":
        coll.all_reduce(tl, ptr, 64, "f32", group=list(range(tl.num_pes - 1)), algo="hier")
    elif case == "rhd":
        coll.reduce_scatter(tl, ptr, 64, "f32", group=list(range(tl.num_pes - 1)), algo="rhd")
    elif case == "float":
        coll.all_reduce(tl, ptr, 64, "f32", group=[0.0, 1])
    elif case == "list":
        coll.all_reduce(tl, ptr, 64, "f32", group=[[0], 1])
    elif case == "twice":
        coll.all_reduce(tl, ptr, 64, "f32", group=[0, 0, 1])
    elif case == "range":
        coll.all_reduce(tl, ptr, 64, "f32", group=[0, 16])
    elif case == "count":  # far beyond the buffer: refused before it is cut into pieces
        coll.all_reduce(tl, ptr, 10**15, "f32")
    elif case == "count_broadcast":
        coll.broadcast(tl, ptr, 65, "f32", root=0)


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
