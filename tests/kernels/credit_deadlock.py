"""Each of two PEs sends two messages before it receives: with one slot per ring, each
second send waits for a credit the other PE never returns (its own second send waits too).
The functional pass sees nothing wrong (messages are not limited by slots); the timing
pass finds the cycle of credits."""

from _base import PARAMS, outputs, reference, setup  # noqa: F401


def kernel(tl, x, n):
    if tl.pid > 1:
        return
    peer = "E" if tl.pid == 0 else "W"
    t = tl.load(tl.shard(x), (n,), "f32")
    tl.send(t, to=peer)
    tl.send(t, to=peer)  # line 15
    tl.recv(frm=peer, shape=(n,), dtype="f32")
    tl.recv(frm=peer, shape=(n,), dtype="f32")
