"""The one primitive the collectives are built of: `exchange`, a list of messages to send
and one to receive, interleaved so that no wait can close a cycle; `pairwise`, its
half-duplex form; buffer pieces loaded ahead (`Loads`) and cut into segments."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kernbench_cli.lang.collectives.groups import Group


@dataclass(slots=True)
class Out:
    """A message this rank sends: a piece `load`ed from the buffer, or a tensor it keeps
    (`needs`, forgotten after if `drop`), or the two combined; `keep` keeps what it sent.
    Not frozen, read-only by use: a schedule makes thousands, and a frozen dataclass
    takes three times as long to make."""

    peer: int
    load: tuple[int, int] | None = None
    needs: object = None
    drop: bool = True
    keep: object = None


@dataclass(slots=True)
class In:
    """A message this rank receives (`count` elements), combined with a kept tensor
    (`needs`) and/or a piece `load`ed from the buffer, then `store`d at a buffer offset
    and/or kept under `keep` for a later message."""

    peer: int
    count: int
    load: tuple[int, int] | None = None
    needs: object = None
    store: int | None = None
    keep: object = None


def exchange(g: Group, outs: list[Out], ins: list[In], window: int | None = None) -> None:
    """Send `outs` and receive `ins`, each in order, interleaved so that no wait can close
    a cycle: a message goes out once what it carries is here and this rank has sent at
    most `g.window` messages beyond those it has received (a ring's slots); otherwise the
    next message is received. The buffer pieces the messages need are loaded ahead, as
    many as the window, so that their HBM latency hides under the exchange."""
    tl, kept = g.tl, g.kept
    window = g.window if window is None else window
    loads = Loads(g, [o.load for o in outs]), Loads(g, [i.load for i in ins])
    for each in loads:  # the first window's pieces, before any wait
        each.ahead_of(0)
    sent = taken = 0
    while sent < len(outs) or taken < len(ins):
        out = outs[sent] if sent < len(outs) else None
        if out is not None and (sent - taken < window or taken == len(ins)) and (
                out.needs is None or out.needs in kept):
            parts = [kept[out.needs] if out.needs is not None else None, loads[0].take(sent)]
            if out.needs is not None and out.drop:
                del kept[out.needs]
            x = fold(g, parts)
            tl.send(x, to=out.peer)
            if out.keep is not None:
                kept[out.keep] = x
            sent += 1
            continue
        if taken == len(ins):
            raise AssertionError(f"collective schedule: message {sent} waits for "
                                 f"{out.needs!r}, which no message brings")
        into = ins[taken]
        x = tl.recv(frm=into.peer, shape=(into.count,), dtype=g.dtype)
        x = fold(g, [x, kept.pop(into.needs) if into.needs is not None else None,
                      loads[1].take(taken)])
        if into.store is not None:
            g.store(into.store, x)
        if into.keep is not None:
            kept[into.keep] = x
        taken += 1


def fold(g: Group, parts: list) -> Any:
    """The `op` of the tensors in `parts` (None entries left out)."""
    parts = [p for p in parts if p is not None]
    out = parts[0]
    for p in parts[1:]:
        out = g.combine(out, p)
    return out


class Loads:
    """Loads of buffer pieces for a list of messages, issued `g.window` messages ahead."""

    def __init__(self, g: Group, pieces: list[tuple[int, int] | None]):
        self.g, self.pieces, self.issued, self.ahead = g, pieces, 0, {}

    def take(self, k: int) -> Any:
        """The loaded piece of message `k` (None if it loads none); loads up to
        `k + window`."""
        self.ahead_of(k)
        return self.ahead.pop(k, None)

    def ahead_of(self, k: int) -> None:
        """Load the pieces of messages up to `k + window` not loaded yet."""
        end = min(len(self.pieces), k + 1 + self.g.window)
        while self.issued < end:
            piece = self.pieces[self.issued]
            if piece is not None:
                self.ahead[self.issued] = self.g.load(*piece)
            self.issued += 1


def segments(g: Group, parts: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """`parts` (one span per rank) cut into segments of at most `window` messages per part:
    segment k holds the k-th such slice of every part (empty where a part is shorter), so
    that a part's received pieces wait in TCM for at most a window's worth of messages."""
    size = g.window * g.piece
    count = max(-(-n // size) for _, n in parts)
    return [[(at + k * size, max(0, min(size, n - k * size))) for at, n in parts]
            for k in range(count)]


def pairwise(g: Group, first: bool, outs: list[Out], ins: list[In]) -> None:
    """One exchange with a partner, half-duplex: the rank that goes `first` sends all its
    messages, then receives the partner's; the partner the other way round. Whatever
    else is in flight, the rank a sender waits on is then receiving on that very ring,
    which takes (or sets aside) every chunk in it, so no wait can last."""
    if first:
        exchange(g, outs, [])
        exchange(g, [], ins)
    else:
        exchange(g, [], ins)
        exchange(g, outs, [])
