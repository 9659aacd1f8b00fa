"""A reduction wired wrong: every PE but the last waits for a message from its successor,
which never sends."""

from _base import PARAMS, outputs, reference, setup  # noqa: F401


def kernel(tl, x, n):
    if tl.pid + 1 < tl.num_pes:
        tl.recv(frm=tl.pid + 1, shape=(n,), dtype="f32")  # line 9
