"""The kernel line of every command (op log `line`, TCM high water, races): the cached
lookup gives the line the frames say, through loops, helpers and files."""

from __future__ import annotations

import contextlib

import pytest

from kernbench_cli.address import load_address_map
from kernbench_cli.lang import collectives
from kernbench_cli.lang.tl import core as tl_core
from kernbench_cli.sim.kernels import load_kernel, parse_params
from kernbench_cli.sim.run import run_kernel
from tests.conftest import TESTS


def _frames_say(frame, kernel_file, lines):
    """The line without the cache: the innermost frame of the kernel's file, read now."""
    while frame is not None and frame.f_code.co_filename != kernel_file:
        frame = frame.f_back
    return 0 if frame is None else frame.f_lineno


def _lines(kernel, topology="default", params=(), timing_only=True) -> list[list[int]]:
    module = load_kernel(kernel)
    amap = load_address_map(topology)
    result = run_kernel(module, amap, parse_params(module, list(params), amap.topology.num_pes),
                        timing_only=timing_only)
    return [list(stream.line) for stream in result.trace.program.streams]


def test_loops_helpers_other_files_and_lambdas_get_their_lines():
    lines = _lines(str(TESTS / "kernels" / "lines.py"), timing_only=False)
    assert lines[0] == [12, 14, 15, 14, 15, 14, 15, 8, 17, 17, 18, 19]
    assert lines[1:] == lines[:1] * 15


@pytest.mark.parametrize(("kernel", "topology", "params"), [
    ("gqa_attention", "sip", ("model=llama3-8b",)),
    ("sharded_gemm", "default", ("mode=primitive",)),
    ("sharded_gemm", "default", ("mode=composite",)),
    ("softmax", "default", ()),
    ("rmsnorm", "default", ()),
])
def test_the_cache_gives_the_lines_the_frames_say(monkeypatch, kernel, topology, params):
    cached = _lines(kernel, topology, params)
    monkeypatch.setattr(tl_core, "_line", _frames_say)
    assert cached == _lines(kernel, topology, params)
    assert any(any(stream) for stream in cached)


@pytest.mark.parametrize(("kernel", "topology", "params"), [
    ("all_reduce", "sip", ("algo=hier", "bytes=4100")),  # both levels, few pieces
    ("all_reduce", "default", ("algo=tree",)),
    ("all_reduce", "default", ("algo=direct",)),
    ("llama_decode", "default", ()),
])
def test_a_collective_s_commands_get_the_line_of_its_call(monkeypatch, kernel, topology,
                                                         params):
    """`library_call` gives a collective's commands the line each would find for itself."""
    pinned = _lines(kernel, topology, params)
    monkeypatch.setattr(collectives, "library_call", lambda tl: contextlib.nullcontext())
    assert pinned == _lines(kernel, topology, params)
    assert all(line > 0 for stream in pinned for line in stream)  # the kernel's lines


def test_kernels_from_two_files_keep_their_own_lines(tmp_path):
    """The same code in two files, the second two lines lower, run one after the other:
    what the first run cached (its code objects gone, their ids free for others) must not
    answer for the second."""
    text = (TESTS / "kernels" / "lines.py").read_text()
    (tmp_path / "a.py").write_text(text)
    (tmp_path / "b.py").write_text("\n\n" + text)
    for helper in ("_base.py", "_lines_helper.py"):
        (tmp_path / helper).write_text((TESTS / "kernels" / helper).read_text())
    a, b = _lines(str(tmp_path / "a.py")), _lines(str(tmp_path / "b.py"))
    assert a[0] == [12, 14, 15, 14, 15, 14, 15, 8, 17, 17, 18, 19]
    assert b[0] == [line + 2 for line in a[0]]
