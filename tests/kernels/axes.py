"""Every PE writes its program ids and program counts on the three axes (ADR-0022)."""

import numpy as np

PARAMS = {"n": 1}


def setup(host, p):
    return {"out": host.empty("out", (6,), "f32")}


def kernel(tl, out):
    ids = [float(tl.program_id(axis)) for axis in (0, 1, 2)]
    counts = [float(tl.num_programs(axis)) for axis in (0, 1, 2)]
    row = tl.zeros((1,), "f32")
    values = [row + v for v in ids + counts]
    for i, value in enumerate(values):
        tl.store(tl.shard(out) + 4 * i, value)


def reference(host, p):
    s = host.topology.system
    rows = [[c.pe, c.cube, c.rack * s.sips_per_rack + c.sip, s.pes_per_cube, s.cubes_per_sip,
             s.racks * s.sips_per_rack] for c in host.grid]
    return {"out": np.array(rows, np.float32)}


def outputs(host, args, p):
    return {"out": host.gather(args["out"], axis=0).reshape(-1, 6)}
