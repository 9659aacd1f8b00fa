from _base import PARAMS, outputs, reference, setup  # noqa: F401


def kernel(tl, x, n):
    if tl.pid == 0:
        tl.recv(frm=1, shape=(n,), dtype="f32")  # waits for PE 1, which fails first
    else:
        raise ValueError("PE 1 fails")
