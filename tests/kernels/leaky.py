"""A kernel that leaves state behind: its setup counts its runs on the `tl` class, and each
run waits 1000 cycles more than the one before. In a fresh process, every run is the first."""

PARAMS = {"n": 1}


def setup(host, p):
    return {}


def kernel(tl):
    cls = type(tl)
    cls.kernbench_test_runs = getattr(cls, "kernbench_test_runs", 0) + 1
    if tl.pid == 0:
        tl.cycles(1000 * cls.kernbench_test_runs)


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
