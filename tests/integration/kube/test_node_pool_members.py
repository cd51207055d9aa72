# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Marking real-cluster node pools, against the lab's real kube-apiserver.

The lab API server stands in for an existing cluster: the test adds nodes that look like a
cloud's node groups (kwok runs them), then the node_pool_members module and the NodeWriter
label and taint them. Nothing here fakes Kubernetes: the 409 Conflict that makes a stale write
retry comes from the API server itself.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any, Dict, List

import pytest
from kubernetes.client.exceptions import ApiException

from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.nodes import MERGE_PATCH, NodeWriter

pytestmark = [pytest.mark.integration, pytest.mark.lab]

GROUPS = {"ext-h100-1": "h100-a", "ext-h100-2": "h100-a", "ext-h200-1": "h200-b"}
POOLS = [
    {
        "name": "ext-h100",
        "count": 2,
        "selector": {"eks.amazonaws.com/nodegroup": "h100-a"},
        "labels": {"gpufleet.io/tier": "training"},
        "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    },
    {"name": "ext-h200", "count": 1, "selector": {"eks.amazonaws.com/nodegroup": "h200-b"}},
]


@pytest.fixture(scope="module")
def group_nodes(lab):
    """Three nodes in two 'node groups', removed afterwards so the other lab tests never see them."""
    api = lab.kube()
    for name, group in GROUPS.items():
        api.create_node(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {"eks.amazonaws.com/nodegroup": group, "type": "kwok"},
                    "annotations": {"kwok.x-k8s.io/node": "fake"},
                },
            }
        )
    yield api
    for name in GROUPS:
        try:
            api.delete_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise


def taints(api, name: str) -> List[Dict[str, Any]]:
    return [
        {k: v for k, v in t.to_dict().items() if v is not None and k != "time_added"}
        for t in api.read_node(name).spec.taints or []
    ]


def run_module(lab, tmp_path, pools, check: bool = False):
    play = tmp_path / "mark.yml"
    play.write_text(
        textwrap.dedent("""\
        - hosts: localhost
          gather_facts: false
          connection: local
          tasks:
            - name: Mark the pools
              gpufleet.resilience.node_pool_members:
                pools: "{{ pools }}"
                kubeconfig: "{{ kubeconfig }}"
              register: marked
            - name: Show the result
              ansible.builtin.debug:
                msg: "MARKED {{ marked.pools | to_json }}"
        """)
    )
    extra = ["-e", json.dumps({"pools": pools, "kubeconfig": str(lab.kubeconfig)})]
    if check:
        extra.append("--check")
    return lab.playbook(str(play), *extra)


def test_a_taint_added_between_the_read_and_the_write_survives(lab, group_nodes):
    api = group_nodes
    other = lab.kube()  # a second writer with its own connection, as a cordon or an agent would be

    class RacingApi:
        """The real CoreV1Api; after our first read, another writer taints the node for real."""

        def __init__(self) -> None:
            self.reads = 0
            self.api_client = api.api_client

        def read_node(self, name):
            node = api.read_node(name)
            self.reads += 1
            if self.reads == 1:
                other.patch_node(
                    name,
                    {"spec": {"taints": [{"key": "example.com/maintenance", "value": "now", "effect": "NoSchedule"}]}},
                    _content_type=MERGE_PATCH,
                )
            return node

        def __getattr__(self, attr):
            return getattr(api, attr)

    conflicts = []
    racing = RacingApi()
    try:
        result = NodeWriter(racing).apply(
            "ext-h200-1",
            {"gpufleet.io/pool": "race"},
            [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
            on_conflict=lambda name, attempt: conflicts.append(attempt),
        )
        # The first write was computed before the taint: the API server must refuse it. kwok's
        # node heartbeat is a writer too, so a later attempt may meet one more conflict: allowed.
        assert conflicts[:1] == [1], "the stale write must be refused by the API server"
        assert conflicts == list(range(1, len(conflicts) + 1))
        assert result.changed and result.attempts == len(conflicts) + 1
        assert racing.reads == result.attempts
        assert taints(api, "ext-h200-1") == [
            {"key": "example.com/maintenance", "value": "now", "effect": "NoSchedule"},
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
        ]
    finally:
        # Undo, so the module test below starts from plain nodes whatever happened here.
        api.patch_node(
            "ext-h200-1",
            {
                "spec": {"taints": None},
                "metadata": {
                    "labels": {"gpufleet.io/pool": None},
                    "annotations": {"gpufleet.io/managed-labels": None, "gpufleet.io/managed-taints": None},
                },
            },
            _content_type=MERGE_PATCH,
        )


def test_the_module_marks_each_pool_and_climbs_the_idempotency_ladder(lab, group_nodes, tmp_path):
    api = group_nodes
    # 1. check mode reports a change ...
    checked = run_module(lab, tmp_path, POOLS, check=True)
    assert checked.rc == 0 and checked.changed == 1, checked.output[-3000:]
    # 2. ... and changes nothing.
    assert "gpufleet.io/pool" not in (api.read_node("ext-h100-1").metadata.labels or {})
    # 3. the real run changes the nodes.
    done = run_module(lab, tmp_path, POOLS)
    assert done.rc == 0 and done.changed == 1, done.output[-3000:]
    for name in ("ext-h100-1", "ext-h100-2"):
        labels = api.read_node(name).metadata.labels
        assert labels["gpufleet.io/pool"] == "ext-h100" and labels["gpufleet.io/tier"] == "training"
        assert taints(api, name) == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert api.read_node("ext-h200-1").metadata.labels["gpufleet.io/pool"] == "ext-h200"
    assert taints(api, "ext-h200-1") == []
    # 4. check mode and 5. the real run again: nothing to do.
    for check in (True, False):
        again = run_module(lab, tmp_path, POOLS, check=check)
        assert again.rc == 0 and again.changed == 0, again.output[-3000:]
    # The lab's own GPU nodes were never touched.
    assert {
        n.metadata.labels["gpufleet.io/pool"]
        for n in api.list_node(label_selector="type=kwok").items
        if n.metadata.name.startswith("gpu-a-")
    } == {"gpu-a"}
    # Dropping the pool's taint and label from the inventory removes them, and only them.
    api.patch_node(
        "ext-h100-1",
        {
            "spec": {
                "taints": [
                    {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                    {"key": "example.com/maintenance", "value": "now", "effect": "NoSchedule"},
                ]
            }
        },
        _content_type=MERGE_PATCH,
    )
    trimmed = [dict(POOLS[0], labels={}, taints=[]), POOLS[1]]
    assert run_module(lab, tmp_path, trimmed).rc == 0
    assert "gpufleet.io/tier" not in api.read_node("ext-h100-1").metadata.labels
    assert taints(api, "ext-h100-1") == [{"key": "example.com/maintenance", "value": "now", "effect": "NoSchedule"}]


def test_a_selector_that_matches_no_node_fails_naming_the_pool_and_changes_nothing(lab, group_nodes, tmp_path):
    api = group_nodes
    before = {name: api.read_node(name).metadata.resource_version for name in GROUPS}
    pools = [
        dict(POOLS[0], labels={"gpufleet.io/tier": "other"}),
        {"name": "ghost", "count": 1, "selector": {"eks.amazonaws.com/nodegroup": "nowhere"}},
    ]
    failed = run_module(lab, tmp_path, pools)
    assert failed.rc != 0
    assert (
        "gpufleet_node_pools[1].selector: pool 'ghost': selector eks.amazonaws.com/nodegroup=nowhere matches no node"
        in failed.output
    ), failed.output[-3000:]
    assert {name: api.read_node(name).metadata.resource_version for name in GROUPS} == before
