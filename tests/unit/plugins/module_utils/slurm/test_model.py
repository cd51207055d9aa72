"""Node states, host lists and GPU counts."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.model import (
    SlurmNode,
    expand_hostlist,
    gpu_count,
    long_state,
    split_state,
)


@pytest.mark.parametrize("text, expected", [
    ("idle", ("IDLE", ())),
    ("mix", ("MIXED", ())),
    ("alloc", ("ALLOCATED", ())),
    ("drain", ("IDLE", ("DRAIN",))),
    ("drained*", ("IDLE", ("DRAIN", "NOT_RESPONDING"))),
    ("drng", ("MIXED", ("DRAIN",))),
    ("futr", ("FUTURE", ())),
    ("down*", ("DOWN", ("NOT_RESPONDING",))),
    ("idle~", ("IDLE", ("POWERED_DOWN",))),
    ("IDLE+DRAIN", ("IDLE", ("DRAIN",))),
    ("DOWN+DRAIN+NOT_RESPONDING", ("DOWN", ("DRAIN", "NOT_RESPONDING"))),
    ("", ("UNKNOWN", ())),
])
def test_split_state(text, expected):
    assert split_state(text) == expected


@pytest.mark.parametrize("state, flags, expected", [
    ("IDLE", (), "idle"),
    ("IDLE", ("DRAIN",), "drained"),
    ("MIXED", ("DRAIN",), "draining"),
    ("DOWN", ("DRAIN",), "drained"),
    ("DOWN", ("NOT_RESPONDING",), "down*"),
    ("IDLE", ("COMPLETING",), "completing"),
    ("ALLOCATED", ("FAIL",), "failing"),
])
def test_long_state(state, flags, expected):
    assert long_state(state, flags) == expected


@pytest.mark.parametrize("expression, names", [
    ("gpu-a-001", ["gpu-a-001"]),
    ("gpu-a-[001-003,005],gpu-b-001", ["gpu-a-001", "gpu-a-002", "gpu-a-003", "gpu-a-005", "gpu-b-001"]),
    ("r[1-2]-n[08-09]", ["r1-n08", "r1-n09", "r2-n08", "r2-n09"]),
    ("", []),
    ("(null)", []),
])
def test_expand_hostlist(expression, names):
    assert expand_hostlist(expression) == names


def test_gpu_count():
    assert gpu_count("gpu:8") == 8
    assert gpu_count("gpu:h100:4(S:0-1),gpu:a100:2") == 6
    assert gpu_count("gpu:h100:4(S:0-1),shard:8") == 4
    assert gpu_count("(null)") is None and gpu_count("") is None


def test_node_as_dict_is_plain_data():
    node = SlurmNode("n1", "IDLE", ("DRAIN",), reason="r", gres="gpu:8", partitions=("gpu",))
    assert node.as_dict() == dict(
        name="n1", state="IDLE", flags=["DRAIN"], long_state="drained", reason="r", reason_user=None,
        reason_time=None, gres="gpu:8", gpus=8, features=[], active_features=[], weight=None, cpus=None,
        memory_mb=None, partitions=["gpu"], jobs=[])
    assert node.responding
