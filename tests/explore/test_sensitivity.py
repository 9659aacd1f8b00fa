"""Sensitivity by replay: each key made 2x better, re-timed from the
run's recording, must give exactly what a full run under that `--set` gives."""

from __future__ import annotations

import json

import pytest

import kernbench_cli as kb
from kernbench_cli.api.sensitivity import KEYS, sensitivity
from tests.conftest import test_topology


@pytest.mark.parametrize(("kernel", "topology"), [
    ("gqa_attention", None), ("sharded_gemm", None), ("softmax", test_topology("one")),
    ("gqa_attention", test_topology("two_sips"))])
def test_each_key_equals_a_full_run_under_its_set(kernel, topology):
    result = kb.run(kernel, topology=topology, timing_only=True)
    found = sensitivity(result)
    assert found.latency_ps == result.latency_ps and len(found.changes) >= 7
    for change in found.changes:
        full = kb.run(kernel, topology=topology, set=list(change.items), timing_only=True,
                      check=False)
        assert (change.key, change.latency_ps) == (change.key, full.latency_ps)
        assert change.saved_ps == result.latency_ps - full.latency_ps
    assert [c.latency_ps for c in found.changes] == sorted(c.latency_ps for c in found.changes)


def test_keys_of_unused_resources_are_left_out():
    result = kb.run("softmax", topology=test_topology("one"), timing_only=True)
    keys = {c.key for c in sensitivity(result).changes}
    assert not keys & {"noc.bandwidth", "ucie.latency", "pe.gemm.rows", "pe.ipcq.slots"}
    assert {"hbm.bandwidth", "pe.math.lanes", "costs.issue.*", "pe.clock"} <= keys


def test_the_issue_costs_are_halved_as_a_group():
    result = kb.run("softmax", topology=test_topology("one"), timing_only=True)
    (group,) = sensitivity(result, keys=("costs.issue.*",)).changes
    assert group.items == ("costs.issue.composite=20ns", "costs.issue.load=2ns",
                           "costs.issue.store=2ns", "costs.issue.dot=2ns",
                           "costs.issue.math=2ns", "costs.issue.send=2ns",
                           "costs.issue.recv=2ns", "costs.issue.wait=2ns")


def test_an_unknown_key_and_a_result_without_recording_are_errors():
    result = kb.run("softmax", topology=test_topology("one"), timing_only=True)
    with pytest.raises(kb.KernbenchError, match=r"^sensitivity: no such key 'hbm\.speed'"):
        sensitivity(result, keys=("hbm.speed",))
    rebuilt = kb.Result.from_dict(result.to_dict())
    with pytest.raises(kb.KernbenchError, match="holds no recording"):
        sensitivity(rebuilt)
    assert len(KEYS) >= 10


def test_run_sensitivity_in_json_and_text(cli):
    code, out, _ = cli("run", "softmax", "-t", test_topology("one"), "--timing-only",
                       "--sensitivity", "--json")
    assert code == 0
    data = json.loads(out)
    changes = data["sensitivity"]["changes"]
    assert data["sensitivity"]["latency_ps"] == data["latency_ps"]
    assert changes[0]["saved_ps"] == data["latency_ps"] - changes[0]["latency_ps"] > 0
    code, out, _ = cli("run", "softmax", "-t", test_topology("one"), "--timing-only",
                       "--sensitivity")
    assert "Sensitivity: each key 2x better, the run re-timed by replay" in out
