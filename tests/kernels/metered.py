"""load_dot's one load and one dot, stating metrics of its own as a decode step states its
time per token: a time per item (``_ps``), items per second, an energy per item (``_uj``)
and, with ``extra`` non-zero, one more (so the points of one sweep state different ones)."""

PARAMS = {"items": 4, "extra": 0}


def setup(host, p):
    x = host.random("x", (32, 64), "f16")  # 4 KiB
    return {"x": host.place("x", x, 0)}


def kernel(tl, x):
    if tl.pid == 0:
        t = tl.load(x, (32, 64), "f16")
        tl.dot(t, t, trans_b=True)


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}


def metrics(topology, p, run):
    out = {"time_per_item_ps": (run.latency_ps / p["items"], "(latency / items)"),
           "items_per_s": (p["items"] * 1e12 / run.latency_ps, "(items / latency)"),
           "energy_per_item_uj": (run.energy_aj / 1e12 / p["items"], "(energy / items)")}
    if p["extra"]:
        out["extra"] = (float(p["extra"]), "(as given)")
    return out
