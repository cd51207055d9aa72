"""Living with neighbours: another remediator's mark on a node keeps our remediation off it.

Against the lab's real API server and slurmctld: a node that carries NVSentinel's state label is
not claimed, fenced in Slurm, cordoned or written to, and the run says which remediator holds it;
told to act beside it (remediation_neighbours: []), a dry run plans the remediation; a site's own
mark (a taint) counts as well; a bad mark is refused by name before anything is read.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.lab]

NVSENTINEL = "dgxc.nvidia.com/nvsentinel-state"
XID79 = {"action": "RESTART_BM", "xid": 79, "verdict": "fatal"}


def said(result) -> str:
    return " ".join(result.output.split())


def test_a_node_another_remediator_works_on_is_left_alone(fleet):
    node = fleet.active_nodes()[2]
    core = fleet.lab.kube()
    core.patch_node(node, {"metadata": {"labels": {NVSENTINEL: "quarantined"}}})
    try:
        before = fleet.snapshot()
        refused = fleet.remediate(node, remediation_fault=XID79)
        assert refused.rc == 0, refused.output[-3000:]
        assert ("node %s is being worked on by another remediator (NVSentinel: label %s=quarantined): not remediated"
                % (node, NVSENTINEL)) in said(refused), refused.output[-3000:]
        # Nothing claimed, fenced, cordoned or recorded.
        assert fleet.snapshot() == before
        assert fleet.progress(node) is None

        # Told to act beside it: the dry run plans the replacement, and still changes nothing.
        beside = fleet.remediate(node, remediation_fault=XID79, remediation_neighbours=[], remediation_dry_run=True)
        assert beside.rc == 0 and "plan RESTART_BM" in beside.output, beside.output[-3000:]
        assert fleet.snapshot() == before
    finally:
        core.patch_node(node, {"metadata": {"labels": {NVSENTINEL: None}}})


def test_a_sites_own_mark_counts_and_a_bad_one_is_refused_by_name(fleet):
    node = fleet.active_nodes()[2]
    core = fleet.lab.kube()
    taint = {"key": "example.com/repairing", "value": "bmc", "effect": "NoSchedule"}
    taints = core.read_node(node).spec.taints or []
    core.patch_node(node, {"spec": {"taints": [*taints, taint]}})
    try:
        before = fleet.snapshot()
        ours = [{"owner": "site repair controller", "taint": "example.com/repairing"}]
        refused = fleet.remediate(node, remediation_fault=XID79, remediation_neighbours=ours)
        assert refused.rc == 0, refused.output[-3000:]
        assert "another remediator (site repair controller: taint example.com/repairing=bmc)" in said(refused)
        assert fleet.snapshot() == before

        bad = fleet.remediate(node, remediation_fault=XID79, remediation_neighbours=[{"owner": "x"}])
        assert bad.rc != 0 and "neighbours[0]: must have exactly one of label, taint, annotation, condition" \
            in said(bad), bad.output[-3000:]
        assert fleet.snapshot() == before
    finally:
        core.patch_node(node, {"spec": {"taints": taints}})
