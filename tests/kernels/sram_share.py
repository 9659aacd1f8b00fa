"""A table in cube 0's shared SRAM: every PE of cube 0 loads it and stores it to its own HBM."""

import numpy as np

PARAMS = {"n": 8192}


def setup(host, p):
    table = host.random("table", (p["n"],), "f32")  # 32 KiB
    return {"table": host.place_sram("table", table, cube=0), "out": host.empty(
        "out", (p["n"],), "f32"), "n": p["n"], "pes": host.topology.system.pes_per_cube}


def kernel(tl, table, out, n, pes):
    if tl.pid < pes:  # cube 0
        tl.store(tl.shard(out), tl.load(table, (n,), "f32"))


def reference(host, p):
    return {"out": np.stack([host.inputs["table"]] * host.topology.system.pes_per_cube)}


def outputs(host, args, p):
    pes = host.topology.system.pes_per_cube
    return {"out": np.stack([host.read_shard(args["out"], pid) for pid in range(pes)])}
