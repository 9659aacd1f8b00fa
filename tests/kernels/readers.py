"""Contention patterns: each `dst<src` of `flows` is PE dst loading `n` f32 (64 KiB at the
default) from PE src's HBM slice, all at once (a PE with several loads does them in order);
`delays` ("pe:cycles,…") holds some PEs back by `tl.cycles` first."""

PARAMS = {"flows": "1<0,4<0", "n": 16384, "delays": ""}


def _flows(text):
    return [tuple(int(v) for v in flow.split("<")) for flow in text.split(",")]


def setup(host, p):
    sources = sorted({src for _, src in _flows(p["flows"])})
    xs = {src: host.place(f"x{src}", host.random(f"x{src}", (p["n"],), "f32"), src)
          for src in sources}
    delays = dict(tuple(int(v) for v in d.split(":")) for d in p["delays"].split(",") if d)
    return {"flows": _flows(p["flows"]), "xs": xs, "n": p["n"], "delays": delays}


def kernel(tl, flows, xs, n, delays):
    if tl.pid in delays:
        tl.cycles(delays[tl.pid])
    for dst, src in flows:
        if tl.pid == dst:
            tl.load(xs[src], (n,), "f32")


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
