"""PE_DMA: moves bytes between memories over the shared network."""

from __future__ import annotations

from kernbench_cli.config.schema import DmaConfig
from kernbench_cli.hw.engine import InOrderEngine
from kernbench_cli.hw.network import Path, book, transfer_ps


class DmaEngine(InOrderEngine):
    """In-order DMA: ``setup + bytes / path bottleneck bandwidth + path latency`` per transfer.

    The engine is held from the start of a transfer until its last byte
    leaves: setup, then waiting until every resource of the path is free
    (see `hw.network`), then streaming. `busy_ps` counts setup and streaming;
    the wait is `wait_ps`, time the engine is held but moves nothing. The
    path latency (HBM access, link hops) is added to the completion only, so
    the engine pipelines transfers as a real DMA with several outstanding
    requests does. `local_bandwidth` is used for a copy that crosses no
    shared resource.
    """

    __slots__ = ("bytes", "local_bandwidth", "setup_ps", "stream_at", "wait_ps", "waited",
                 "waited_on")

    def __init__(self, config: DmaConfig, local_bandwidth: int):
        super().__init__()
        self.setup_ps = config.setup
        self.local_bandwidth = local_bandwidth
        self.wait_ps = 0
        self.bytes = 0  # bytes moved
        self.waited_on = None  # the resource the last transfer waited for (None: none)
        self.waited = 0  # and how long
        self.stream_at = 0  # when the last transfer's bytes began to stream (to `free_at`)

    def transfer(self, ready: int, nbytes: int, path: Path) -> tuple[int, int]:
        """Move `nbytes` over `path` (its HBM slice, if any, and links).

        Returns (start, end): the engine takes it at `start`; the data is at
        the destination at `end`.
        """
        start = ready if ready > self.free_at else self.free_at
        resources, latency = path
        streams_from = start + self.setup_ps
        self.waited_on = None
        if len(resources) == 1:  # one's own HBM slice: the common case, kept lean
            cal = resources[0]
            duration = transfer_ps(nbytes, cal.bandwidth)
            stream_at = cal.book(streams_from, duration)
            cal.carry(stream_at, duration, nbytes)
            if stream_at > streams_from:
                self.waited_on = cal
        elif resources:
            duration = transfer_ps(nbytes, min(c.bandwidth for c in resources))
            stream_at, self.waited_on = book(resources, duration, streams_from)
            for cal in resources:
                cal.carry(stream_at, duration, nbytes)
        else:
            duration = transfer_ps(nbytes, self.local_bandwidth)
            stream_at = streams_from
        stream_end = stream_at + duration
        self.stream_at = stream_at
        self.free_at = stream_end
        self.busy_ps += self.setup_ps + duration
        self.waited = stream_at - streams_from
        self.wait_ps += self.waited
        self.bytes += nbytes
        self.ops += 1
        return start, stream_end + latency
