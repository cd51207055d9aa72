"""The remediation's object names and the rule both the remediation and the chaos gate read its
progress records by."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.kube import remediation_objects as objects
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import progress


def test_a_progress_configmap_names_its_node_and_the_shared_objects_name_none():
    assert objects.progress_node(objects.progress_name("gpu-a-003")) == "gpu-a-003"
    assert objects.progress_node(objects.BREAKER_NAME) == ""
    assert objects.progress_node(objects.HISTORY_NAME) == ""
    assert objects.progress_node("kube-root-ca.crt") == ""


@pytest.mark.parametrize("record, done", [
    (None, False),
    ({"finished_at": None, "result": None}, False),            # under way
    ({"finished_at": 1700000000.0, "result": "failed"}, False),  # resumed by the next run
    ({"finished_at": 1700000000.0, "result": "succeeded"}, True),
])
def test_finished_means_done_for_good(record, done):
    assert objects.finished(record) is done
    assert progress.finished is objects.finished  # the remediation reads its records by the same rule
