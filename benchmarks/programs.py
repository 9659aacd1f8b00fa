"""The programs a functional pass makes, for the shortcuts' oracle in the benchmarks: a
digest of everything the timing pass reads, and a run stopped where its timing pass would
begin (`Stopped`, `functional_only`).

Equal programs time alike (the timing pass reads nothing else of the kernel), so a run
with shortcuts and one without (`--no-shortcuts`) agree byte for byte when their digests
do."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager

from kernbench_cli.hw.timing import Timing


def program_digest(program) -> str:
    """A digest of every stream column, the tables they index, the composites, the TCM
    peaks and the regions of `program`."""
    digest = hashlib.sha256()
    for stream in program.streams:
        for column in stream.columns():
            digest.update(column.tobytes())
            digest.update(b"|")
    digest.update(repr((program.gemm_shapes, program.math_kinds, program.composites,
                        program.tcm_peak, program.regions, program.region_marks)).encode())
    return digest.hexdigest()


class Stopped(Exception):
    """A run stopped where its timing pass would begin, at `cpu` (`time.process_time`);
    `digest` is its program's."""

    def __init__(self, cpu: float, digest: str):
        super().__init__(digest)
        self.cpu, self.digest = cpu, digest


@contextmanager
def functional_only() -> Iterator[None]:
    """Runs inside stop where their timing pass would begin, raising `Stopped`."""
    run = Timing.run

    def stop(timing: Timing) -> None:
        raise Stopped(time.process_time(), program_digest(timing.program))

    Timing.run = stop
    try:
        yield
    finally:
        Timing.run = run
