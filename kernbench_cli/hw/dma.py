"""PE_DMA: moves bytes between memories over the shared network."""

from __future__ import annotations

from kernbench_cli.config.schema import DmaConfig
from kernbench_cli.hw.engine import InOrderEngine
from kernbench_cli.hw.network import PS_PER_S, Path, book, transfer_ps


class DmaEngine(InOrderEngine):
    """In-order DMA: ``setup + bytes / path bandwidth + path latency`` per transfer.

    The engine is held from the start of a transfer until its last byte
    leaves (setup, then waiting for and streaming over the path); the path
    latency (HBM access, link hops) is added to the completion only, so the
    engine pipelines transfers as a real DMA with several outstanding
    requests does. The stream reserves every resource of the path (see
    `hw.network`); `local_bandwidth` is used for a copy that crosses none.
    """

    __slots__ = ("local_bandwidth", "setup_ps")

    def __init__(self, config: DmaConfig, local_bandwidth: int):
        super().__init__()
        self.setup_ps = config.setup
        self.local_bandwidth = local_bandwidth

    def transfer(self, ready: int, nbytes: int, path: Path) -> tuple[int, int]:
        """Move `nbytes` over `path` (its HBM slice, if any, and links).

        Returns (start, end): the engine takes it at `start`; the data is at
        the destination at `end`.
        """
        start = ready if ready > self.free_at else self.free_at
        resources, latency = path
        if len(resources) == 1:  # one's own HBM slice: the common case, kept lean
            cal = resources[0]
            duration = -(-nbytes * PS_PER_S // cal.bandwidth)
            stream_at = cal.book(start + self.setup_ps, duration)
            cal.bytes += nbytes
            stream_end = stream_at + duration
        elif resources:
            durations = tuple(transfer_ps(nbytes, c.bandwidth) for c in resources)
            stream_at = book(resources, durations, start + self.setup_ps)
            for cal in resources:
                cal.bytes += nbytes
            stream_end = stream_at + max(durations)
        else:
            stream_end = start + self.setup_ps + transfer_ps(nbytes, self.local_bandwidth)
        self.free_at = stream_end
        self.busy_ps += stream_end - start
        self.ops += 1
        return start, stream_end + latency
