# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Issue 16, finding 10: a node named ``breaker`` or ``history`` overwrote the breaker or the
escalation history (its progress ConfigMap had the same name). Per-node objects now have a prefix
no singleton starts with; progress kept under the old name is moved, never lost."""

from __future__ import annotations

import json
import re
from typing import Dict

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.kube import remediation_objects as objects
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.store import Policy, RemediationStore

# Kubernetes' IsDNS1123Subdomain (no per-label cap there, unlike a node name of ours).
SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LONG = "a" * 63 + "." + "b" * 63 + "." + "c" * 63 + "." + "d" * 61  # 253 characters


@pytest.mark.parametrize("node", ["breaker", "history", "node-breaker", "gpu-a-001", LONG, LONG[:-1] + "e"])
def test_no_node_shares_a_name_with_a_singleton_and_every_name_is_valid(node: str) -> None:
    name = objects.progress_name(node)
    assert name not in objects.SINGLETONS
    assert name.startswith(objects.NODE_PREFIX)
    assert len(name) <= 253 and SUBDOMAIN.fullmatch(name)  # what the API server takes as an object name
    assert objects.progress_node(name) == node or len(node) > 200


def test_two_long_names_get_two_objects() -> None:
    assert objects.progress_name(LONG) != objects.progress_name(LONG[:-1] + "e")


def test_the_singletons_never_read_as_a_node_and_old_names_still_do() -> None:
    assert objects.progress_node(objects.BREAKER_NAME) == ""
    assert objects.progress_node(objects.HISTORY_NAME) == ""
    assert objects.progress_node("gpufleet-remediation-gpu-a-001") == "gpu-a-001"
    assert objects.legacy_progress_name("breaker") is None


def progress(node: str) -> Dict[str, str]:
    return {objects.PROGRESS_KEY: json.dumps({"id": "r-1-%s" % node, "node": node})}


def test_a_node_called_breaker_leaves_the_breaker_alone(configmaps) -> None:
    configmaps.maps[objects.BREAKER_NAME] = {"state": json.dumps({"tripped": True})}
    store = RemediationStore(None, Policy(), write=True)
    store.progress_store("breaker").update(lambda data: (progress("breaker"), None))
    assert json.loads(configmaps.maps[objects.BREAKER_NAME]["state"]) == {"tripped": True}
    assert store.read_progress("breaker")["node"] == "breaker"


def test_progress_under_the_old_name_is_moved_not_lost(configmaps) -> None:
    configmaps.maps["gpufleet-remediation-gpu-a-001"] = progress("gpu-a-001")
    dry = RemediationStore(None, Policy(), write=False)
    assert dry.read_progress("gpu-a-001")["id"] == "r-1-gpu-a-001"  # check mode reads it where it is
    assert set(configmaps.maps) == {"gpufleet-remediation-gpu-a-001"}
    live = RemediationStore(None, Policy(), write=True)
    assert live.read_progress("gpu-a-001")["id"] == "r-1-gpu-a-001"
    assert configmaps.maps[objects.progress_name("gpu-a-001")] == progress("gpu-a-001")
    assert configmaps.maps["gpufleet-remediation-gpu-a-001"] == {}  # emptied: the identity may not delete
    assert live.read_progress("gpu-a-001")["id"] == "r-1-gpu-a-001"


def test_an_old_name_that_is_another_nodes_new_object_is_not_taken(configmaps) -> None:
    configmaps.maps[objects.progress_name("x")] = progress("x")  # gpufleet-remediation-node-x: node x's
    store = RemediationStore(None, Policy(), write=True)
    assert store.read_progress("node-x") is None
    assert configmaps.maps == {objects.progress_name("x"): progress("x")}
