"""load_dot's one load and one dot on PE 0, stating a bound of its own: `floor_ps` (as
given: an overstated one shows the check every run makes), and with `fail_setup` a setup
that raises (a bounds-only run makes the setup too, and refuses what it refuses)."""

PARAMS = {"floor_ps": 1000, "fail_setup": 0}


def setup(host, p):
    if p["fail_setup"]:
        raise RuntimeError("setup ran")
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


def bounds(topology, p):
    if p["floor_ps"] < 0:
        raise ValueError(f"floor_ps must not be negative, got {p['floor_ps']}")
    return {"floor": (p["floor_ps"], "as given"), "zero": (0, "nothing")}
