"""Trace format version 6: each distinct stream stored once, up to relocation."""

from __future__ import annotations

import gzip
import hashlib
import json
from array import array
from pathlib import Path

import pytest

from kernbench_cli.address import load_address_map
from kernbench_cli.hw.symmetry import stream_keys
from kernbench_cli.sim.trace_file import MAGIC, read_trace, write_trace
from kernbench_cli.sim.trace_streams import RELOCATED
from kernbench_cli.stream import COLUMNS, COMPOSITE, LOAD, Composite
from tests.conftest import test_topology

GQA = ("model=llama3-8b", "seq_len=2048")


def _parts(path: Path) -> tuple[dict, bytes]:
    data = gzip.decompress(path.read_bytes())
    size = int.from_bytes(data[len(MAGIC):len(MAGIC) + 8], "little")
    return json.loads(data[len(MAGIC) + 8:len(MAGIC) + 8 + size]), data[len(MAGIC) + 8 + size:]


def test_a_sip_trace_stores_each_relocated_stream_once_and_reads_back_exactly(run, tmp_path):
    """gqa_attention on a SIP (128 PEs): 8 stored streams, one per class of streams equal up
    to relocation (`hw.symmetry.stream_keys`), and 16 composite descriptors for the run's
    2048; the file is more than 3.5x smaller than every stream in full (version 5), and
    reads back to the recorded program, column for column."""
    recorded = run("gqa_attention", "sip", GQA, timing_only=True)
    program = recorded.trace.program
    full, once = tmp_path / "v5.trace", tmp_path / "v6.trace"
    write_trace(full, recorded.trace, version=5)
    write_trace(once, recorded.trace)
    header, _ = _parts(once)
    amap = load_address_map("sip")
    keys = stream_keys(program, recorded.trace.slice_base, amap.slice_bytes,
                       amap.topology.hbm.page_size)
    assert (header["version"], len(header["pe_stream"])) == (6, 128)
    assert len(header["lengths"]) == len(set(keys)) == 8
    assert (len(header["composites"]), len(header["composite_owner"])) == (16, 2048)
    assert full.stat().st_size > 3.5 * once.stat().st_size
    for path in (once, full):
        back = read_trace(path).program
        for got, want in zip(back.streams, program.streams, strict=True):
            assert got.columns() == want.columns()
        assert (back.composites, back.gemm_shapes, back.math_kinds, back.tcm_peak,
                back.regions, back.region_marks) == (
            program.composites, program.gemm_shapes, program.math_kinds, program.tcm_peak,
            program.regions, program.region_marks)


def test_a_v6_replay_is_byte_identical_to_the_run_and_to_a_v5_replay(cli, tmp_path):
    """A rack-shaped run recorded as version 6, and the same trace rewritten in full
    (version 5), replay to the same JSON and op log bytes as the run's."""
    once, full = tmp_path / "v6.trace", tmp_path / "v5.trace"
    logs = {name: tmp_path / f"{name}.jsonl" for name in ("run", "v6", "v5")}
    args = ["-t", test_topology("racks"), "-p", "seq_len=512"]  # 2 racks, 32 PEs, 6 streams
    code, ran, _ = cli("run", "gqa_attention", *args, "--timing-only",
                       "--record", str(once), "--json", "--oplog", str(logs["run"]))
    assert code == 0
    write_trace(full, read_trace(once), version=5)
    assert (_parts(full)[0]["version"], len(_parts(once)[0]["lengths"])) == (5, 6)
    out = {}
    for name, path in (("v6", once), ("v5", full)):
        code, out[name], _ = cli("replay", str(path), "--json", "--oplog", str(logs[name]))
        assert code == 0
    assert out["v6"] == out["v5"]
    run = json.loads(ran)
    assert json.loads(out["v6"]) == {**run, "kernel": "gqa_attention (replay)", "recorded_on": {
        "topology": "racks", "topology_digest": run["topology_digest"], "pes": 32}}
    assert logs["v6"].read_bytes() == logs["v5"].read_bytes() == logs["run"].read_bytes()


def _rewrite(path: Path, edit) -> None:
    """`path`'s trace with `edit(header, columns)` applied (columns: name -> list of values,
    every stored stream's in turn)."""
    header, body = _parts(path)
    total, at, columns = sum(header["lengths"]), 0, {}
    for name, code in COLUMNS:
        width = {"B": 1, "i": 4, "q": 8}[code]
        columns[name] = list(memoryview(body[at:at + total * width]).cast(code))
        at += total * width
    edit(header, columns)
    cols = b"".join(array(code, columns[name]).tobytes() for name, code in COLUMNS)
    if "body" in header:  # as a writer would: the checks past the body's digest are tried
        header["body"] = hashlib.sha256(cols).hexdigest()[:16]
    head = json.dumps(header).encode()
    path.write_bytes(gzip.compress(MAGIC + len(head).to_bytes(8, "little") + head + cols))


def test_a_trace_whose_streams_were_edited_is_damaged(cli, tmp_path):
    """One bit of the streams flipped and the file gzipped again (a hand edit, a writer's
    bug: gzip's own check passes) replayed to another latency, 4.5e18 ps for a run of
    0.35 us: the header keeps the streams' digest, and a body that differs is damage."""
    trace = tmp_path / "t.trace"
    assert cli("run", "softmax", "--timing-only", "--record", str(trace))[0] == 0
    header, body = _parts(trace)
    head = json.dumps(header).encode()
    flipped = bytearray(body)
    flipped[137] ^= 1
    trace.write_bytes(gzip.compress(MAGIC + len(head).to_bytes(8, "little") + head
                                    + bytes(flipped)))
    code, _, err = cli("replay", str(trace))
    assert (code, err) == (2, f"error: {trace}: damaged trace: its streams are not the ones "
                              "it was written with (their digest differs from the header's)\n")


def _first(columns: dict, kind: int) -> int:
    return columns["op"].index(kind)


SLICE, BASE = 2 << 30, 0x20_0000_0000  # the default topology's HBM slice, PE 0's base


def _set(key: str, value):
    def edit(header, _columns) -> None:
        header[key] = value(header)
    return edit


def _column(name: str, kind: int, value: int):
    def edit(_header, columns) -> None:
        columns[name][_first(columns, kind)] = value
    return edit


def _composite_addr(value: int):
    def edit(header, _columns) -> None:
        header["composites"][0][Composite._fields.index("b_addr")] = value
    return edit


@pytest.mark.parametrize(("edit", "message"), [
    (_set("pe_stream", lambda h: [5] * 16), "PE 0 runs stored stream 5; the trace stores 1"),
    (_set("slice_base", lambda h: [-1] * 16), "PE 0's slice base -1 is out of range"),
    (_set("slice_base", lambda h: h["slice_base"][:3]),
     "slice_base does not have one entry per PE"),
    (_set("slice_bytes", lambda h: RELOCATED), f"slice_bytes {RELOCATED} is out of range"),
    (_set("composite_owner", lambda h: [99] * 16),
     "composite_owner names a PE the trace does not have (16 PEs)"),
    (_set("composite_owner", lambda h: [0] * 16),
     "composite_owner gives PE 0 16 composites; its stream has 1"),
    (_set("pe_stream", lambda h: "all"), "pe_stream is not a list"),
    (_column("arg", COMPOSITE, 7), "PE 0 command 1 names stored composite 7; the trace "
     "stores 1"),
    (_column("src", LOAD, RELOCATED + SLICE),
     f"PE 0 command 0 has a relocated address past its HBM slice ({SLICE:,} B)"),
    (_composite_addr(RELOCATED + SLICE + 64),
     f"PE 0's composite 0 has a relocated address past its HBM slice ({SLICE:,} B)"),
    (_column("src", LOAD, RELOCATED + SLICE - 64),  # in the slice, but no allocation there
     f"PE 0 reaches {BASE + SLICE - 64:#x}, which no host allocation holds"),
    # a file's digest: 8 hex digits, of a parameter naming a file
    (_set("files", lambda h: {"mode": "x"}), "files is not an object of digests (8 hex "
                                             "digits each)"),
    (_set("files", lambda h: {"nosuch": "0123abcd"}), "files names 'nosuch', which is not a "
                                                      "parameter of the run that names a file"),
    (_set("digests", lambda h: {"other": "abcdef12"}), "digests names 'other', not topology, "
                                                       "costs or kernel"),
    (_set("digests", lambda h: {"kernel": "ABCDEF12"}), "digests is not an object of digests "
                                                        "(8 hex digits each)"),
])
def test_a_damaged_v6_trace_is_an_error_not_a_crash(cli, tmp_path, edit, message):
    trace = tmp_path / "t.trace"
    code, _, _ = cli("run", "sharded_gemm", "-p", "mode=composite", "--timing-only",
                     "--record", str(trace))
    assert code == 0
    _rewrite(trace, edit)
    code, _, err = cli("replay", str(trace))
    assert (code, err) == (2, f"error: {trace}: damaged trace: {message}\n")


def test_a_program_not_made_as_a_run_makes_it_is_written_in_full(run, tmp_path):
    """Two PEs' composites naming one table entry (a hand-edited program): no owner per
    entry, so the trace is written as version 5, and reads back as it was."""
    trace = run("sharded_gemm", "default", ("mode=composite",), timing_only=True).trace
    streams = trace.program.streams
    k = streams[1].op.index(COMPOSITE)
    streams[1].arg[k] = streams[0].arg[streams[0].op.index(COMPOSITE)]
    path = tmp_path / "t.trace"
    write_trace(path, trace)
    assert _parts(path)[0]["version"] == 5
    back = read_trace(path).program
    assert [s.columns() for s in back.streams] == [s.columns() for s in streams]
    assert back.composites == trace.program.composites


def test_a_file_of_gigabytes_is_no_trace_at_its_first_bytes(tmp_path, monkeypatch):
    """A junk file (sparse: gigabytes of zeros) was read whole, up to the 16 GiB limit, before
    its first two bytes said it was no gzip stream: the check reads 64 bytes."""
    from contextlib import contextmanager

    from kernbench_cli import fileio
    from kernbench_cli.sim.trace_file import TraceError

    junk = tmp_path / "junk.trace"
    with open(junk, "wb") as out:
        out.truncate(1 << 30)
    read, opened = [], fileio._opened

    class Counted:
        def __init__(self, handle):
            self.handle = handle

        def read(self, size: int = -1) -> bytes:
            data = self.handle.read(size) or b""
            read.append(len(data))
            return data

    @contextmanager
    def counted(path):
        with opened(path) as handle:
            yield Counted(handle)

    monkeypatch.setattr(fileio, "_opened", counted)
    with pytest.raises(TraceError) as info:
        read_trace(junk)
    assert str(info.value) == f"{junk}: not a kernbench trace (Not a gzipped file (b'\\x00\\x00'))"
    assert sum(read) == 64
