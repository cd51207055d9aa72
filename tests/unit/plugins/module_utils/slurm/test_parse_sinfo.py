"""parse_sinfo on the captures: --json of 22.05 (v0.0.38) and 24.11 (v0.0.40+), and the tables."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.errors import SlurmParseError
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.parse_scontrol import parse_nodes_text
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.parse_sinfo import (
    parse_sinfo_json,
    parse_sinfo_table,
)

VERSIONS = ("22.05", "24.11", "26.05")


@pytest.mark.parametrize("version", VERSIONS)
def test_json_equals_scontrol_text(captures, utc, version):
    """Both JSON layouts give what scontrol's one-liner says about the same cluster."""
    from_json = parse_sinfo_json(captures.text(version + "/sinfo.json"))
    from_text = parse_nodes_text(captures.text(version + "/scontrol_show_node_oneliner.txt"))
    assert sorted(from_json) == sorted(from_text)
    for name, node in from_text.items():
        assert from_json[name] == node, name


def test_json_22_05_has_every_node_once(captures):
    nodes = parse_sinfo_json(captures.text("22.05/sinfo.json"))
    assert list(nodes) == ["gpu-a-%03d" % index for index in range(1, 9)]
    assert nodes["gpu-a-002"].flags == ("DRAIN",) and nodes["gpu-a-002"].reason_user == "root"
    # 22.05 keeps reason_set_by_user after a reason is cleared; no reason, no user.
    assert nodes["gpu-a-003"].reason is None and nodes["gpu-a-003"].reason_user is None


def test_json_24_11_groups(captures):
    nodes = parse_sinfo_json(captures.text("24.11/sinfo.json"))
    assert nodes["gpu-a-002"].weight == 20 and nodes["gpu-a-002"].partitions == ("gpu",)


def test_json_group_in_two_partitions():
    group = {"node": {"state": ["IDLE"]}, "nodes": {"nodes": ["n1"]}, "weight": {"minimum": 1, "maximum": 1},
             "cpus": {"minimum": 4, "maximum": 8}, "gres": {"total": "gpu:4"}, "reason": {"description": ""}}
    doc = {"sinfo": [dict(group, partition={"name": "a"}), dict(group, partition={"name": "b"})], "errors": []}
    node = parse_sinfo_json(doc)["n1"]
    assert node.partitions == ("a", "b") and node.weight == 1 and node.gpus == 4
    # A group of nodes that differ has no one value for them.
    assert node.cpus is None


def test_json_errors_are_raised():
    with pytest.raises(SlurmParseError, match="Slurm reported errors"):
        parse_sinfo_json({"errors": [{"error": "Unable to contact slurm controller"}], "nodes": []})
    with pytest.raises(SlurmParseError, match="neither"):
        parse_sinfo_json("{}")


def test_json_26_05_keeps_the_reasons_user_beside_the_reason(captures):
    """v0.0.45 moved the user out of ``reason`` into the group's ``reason_set_by_user``."""
    nodes = parse_sinfo_json(captures.text("26.05/sinfo.json"))
    assert nodes["gpu-a-002"].reason_user == "root" and nodes["gpu-a-001"].reason_user is None


@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_future_table(captures, version):
    nodes = parse_sinfo_table(captures.text(version + "/sinfo_future.txt"))
    assert [(name, node.state, node.flags) for name, node in nodes.items()] == [
        ("gpu-a-001", "MIXED", ()), ("gpu-a-002", "IDLE", ("DRAIN",)), ("gpu-a-003", "FUTURE", ())]
    assert nodes["gpu-a-002"].reason == "gpufleet: Xid79 GPU-fc522a91 (remediation r-1)"
    assert nodes["gpu-a-003"].weight == 1 and nodes["gpu-a-003"].features == ()


def test_22_05_sinfo_has_no_future(captures):
    # "sinfo: unrecognized option '--future'": why the client asks scontrol on 22.05.
    with pytest.raises(SlurmParseError):
        parse_sinfo_table(captures.text("22.05/sinfo_future.txt"))


def test_table_needs_reason_last():
    with pytest.raises(SlurmParseError, match="last"):
        parse_sinfo_table("NODELIST REASON STATE\nn1 none idle\n")


def test_table_node_in_two_partitions():
    nodes = parse_sinfo_table("NODELIST PARTITION STATE\nn1 gpu* idle\nn1 debug idle\n")
    assert nodes["n1"].partitions == ("gpu", "debug")
