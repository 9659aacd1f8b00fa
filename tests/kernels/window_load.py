"""PE 4 (SIP 1) loads 256 KiB from PE 0's slice (SIP 0): over both SIP links, a round trip
of about 2.1 us, so PE_DMA's 64 KiB window, not a link, sets the rate."""

PARAMS = {"n": 1}


def setup(host, p):
    x = host.random("x", (256, 512), "f16")  # 256 KiB
    return {"x": host.place("x", x, 0)}


def kernel(tl, x):
    if tl.pid == 4:
        tl.load(x, (256, 512), "f16")


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
