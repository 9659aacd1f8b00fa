from _base import PARAMS, outputs, reference, setup  # noqa: F401


def kernel(tl, x, n):
    while True:
        tl.cycles(1)  # line 6
