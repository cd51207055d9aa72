from __future__ import annotations

from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.parse_sinfo import (
    parse_gpu_count,
    parse_sinfo_nodes,
)

# `sinfo --Node --noheader --format=%N|%T|%G|%E` from the lab's Slurm 22.05, one node per
# partition line, with a DOWN node whose reason holds a '|'.
CAPTURED = """\
gpu-a-001|idle|gpu:8|none
gpu-a-002|mixed|gpu:8|none
gpu-a-003|down*|gpu:8|Not responding
gpu-a-004|drained|gpu:8|gpufleet: XID 79 on GPU 3 | fenced
gpu-a-004|drained|gpu:8|gpufleet: XID 79 on GPU 3 | fenced
gpu-b-001|idle|gpu:h100:4(S:0-1),gpu:a100:2|none
garbage line
"""


def test_parse_sinfo_nodes():
    nodes = parse_sinfo_nodes(CAPTURED.splitlines())
    assert sorted(nodes) == ["gpu-a-001", "gpu-a-002", "gpu-a-003", "gpu-a-004", "gpu-b-001"]
    assert nodes["gpu-a-001"].state == "idle" and nodes["gpu-a-001"].reason is None
    assert nodes["gpu-a-003"].state == "down*" and nodes["gpu-a-003"].base_state == "down"
    assert nodes["gpu-a-003"].reason == "Not responding"
    assert nodes["gpu-a-004"].reason == "gpufleet: XID 79 on GPU 3 | fenced"
    assert nodes["gpu-a-001"].gpus == 8


def test_parse_gpu_count():
    assert parse_gpu_count("gpu:8") == 8
    assert parse_gpu_count("gpu:h100:4(S:0-1)") == 4
    assert parse_gpu_count("(null)") is None
    assert parse_gpu_count("") is None
