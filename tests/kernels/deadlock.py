from _base import PARAMS, outputs, reference, setup  # noqa: F401


def kernel(tl, x, n):
    if tl.pid == 0:
        tl.recv(frm="E", shape=(n,), dtype="f32")  # line 6: nobody sends
