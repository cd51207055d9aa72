# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Variability-aware placement on the lab (docs/scheduling.md, "Variability classes").

gpu-baseline.yml reads the simulated per-GPU figures of the fake GPUs, classifies every Slurm node
against its pool's median GPU and publishes the classes: the real slurmctld must then place an
unconstrained 1-node job on the best class (lower Weight) ahead of nodes that come first in
slurm.conf, honour ``--constraint=<class>``, and the Kubernetes nodes must carry the class label.
A second run changes nothing; gpu-classes-revert.yml puts every Weight, feature, label and
annotation back as it was.
"""

from __future__ import annotations

import json
import time
from typing import Dict, Tuple

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.parse_scontrol import parse_nodes_text
from ansible_collections.gpufleet.resilience.plugins.module_utils.variability.classes import (
    CLASSES,
    DEFAULT_WEIGHT_OFFSETS,
    LABEL,
    SCORE_ANNOTATION,
)

pytestmark = [pytest.mark.integration]

UNAVAILABLE = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "FUTURE")


def slurm_nodes(lab) -> Dict[str, dict]:
    """Name -> weight, features, active features, state (with flags), in slurm.conf's order."""
    nodes = parse_nodes_text(lab.slurm("scontrol", "--oneliner", "show", "node"))
    return {name: {"weight": node.weight, "features": list(node.features),
                   "active_features": list(node.active_features), "state": node.long_state,
                   "available": node.state not in UNAVAILABLE and not set(node.flags) & set(UNAVAILABLE)}
            for name, node in nodes.items()}


def kube_marks(lab) -> Dict[str, Tuple]:
    return {node.metadata.name: ((node.metadata.labels or {}).get(LABEL),
                                 (node.metadata.annotations or {}).get(SCORE_ANNOTATION))
            for node in lab.kube().list_node().items}


def placement(nodes: Dict[str, dict]) -> Dict[str, Tuple]:
    # The node's state is someone else's business (other tests drain nodes meanwhile).
    return {name: (node["weight"], node["features"], node["active_features"]) for name, node in nodes.items()}


def submit(lab, *options: str) -> str:
    return lab.slurm("sbatch", "--parsable", "-N1", "-t", "1", "-o", "/dev/null", "-J", "gpufleet-variability-test",
                     *options, "--wrap", "hostname").strip().split(";")[0]


def ran_on(lab, job: str) -> str:
    try:
        fields = lab.wait_job(job, timeout=60)
    finally:
        lab.slurm("scancel", job, check=False)
    assert fields["JobState"] == "COMPLETED", fields
    return fields["NodeList"]


def test_baseline_publishes_classes_that_slurm_places_by(lab, tmp_path):
    started = time.monotonic()
    state_dir = tmp_path / "variability"
    extra = {"gpu_baseline_state_dir": str(state_dir)}
    # A feature of someone else's on one node: publishing must keep it, and so must the revert.
    foreign_node = "gpu-a-003"
    assert slurm_nodes(lab)[foreign_node]["features"] == [], "the lab's nodes have no features of their own"
    lab.slurm("scontrol", "update", "NodeName=%s" % foreign_node, "AvailableFeatures=ib", "ActiveFeatures=ib")
    slurm_before = placement(slurm_nodes(lab))
    kube_before = kube_marks(lab)
    try:
        # Check mode: classifies, writes nothing anywhere.
        checked = lab.playbook("gpu-baseline.yml", "--check", extra=extra, timeout=180)
        assert checked.rc == 0, checked.output[-4000:]
        assert placement(slurm_nodes(lab)) == slurm_before
        assert not state_dir.exists()

        first = lab.playbook("gpu-baseline.yml", extra=extra, timeout=180)
        assert first.rc == 0, first.output[-4000:]
        assert first.changed == 1
        baseline = json.loads((state_dir / "baseline.json").read_text())
        classes = {name: entry["class"] for name, entry in baseline["nodes"].items()}
        scores = {name: entry["score"] for name, entry in baseline["nodes"].items()}
        print("classes", classes, "scores", scores)
        # Every Slurm node that is not a FUTURE spare is classified, and the lab's spread shows more than one class.
        assert set(classes) == set(slurm_before)
        assert len(set(classes.values())) >= 2, classes

        nodes = slurm_nodes(lab)
        marks = kube_marks(lab)
        for name, cls in classes.items():
            weight_before = slurm_before[name][0]
            assert nodes[name]["weight"] == weight_before + DEFAULT_WEIGHT_OFFSETS[cls], (name, nodes[name])
            # Merged, not clobbered: the node's other features stay (gpu-a-003's ib), the class is added.
            assert nodes[name]["features"] == [f for f in slurm_before[name][1] if f not in CLASSES] + [cls]
            assert nodes[name]["active_features"] == [f for f in slurm_before[name][2] if f not in CLASSES] + [cls]
            if name in marks:
                assert marks[name] == (cls, "%.2f" % scores[name])

        # An unconstrained 1-node job goes to the best class among the nodes that can run it, even
        # though slurm.conf lists other nodes first.
        available = [name for name, node in nodes.items() if node["available"]]
        assert available, nodes
        best_weight = min(nodes[name]["weight"] for name in available)
        best = {name for name in available if nodes[name]["weight"] == best_weight}
        # --constraint picks a class even when it is not the preferred one. Both jobs run at once:
        # a 1-CPU job leaves the node free for the other.
        wanted = next((cls for cls in ("var_mid", "var_high", "var_low")
                       if any(classes[name] == cls for name in available)), None)
        assert wanted is not None
        unconstrained, constrained = submit(lab), submit(lab, "--constraint=%s" % wanted)
        node = ran_on(lab, unconstrained)
        print("unconstrained job ran on", node, "best", sorted(best), "first in slurm.conf", available[0])
        assert node in best
        assert classes[node] == min((classes[name] for name in available), key=CLASSES.index)
        constrained_on = ran_on(lab, constrained)
        print("--constraint=%s job ran on" % wanted, constrained_on)
        assert classes[constrained_on] == wanted

        # Idempotent: the second run changes nothing.
        second = lab.playbook("gpu-baseline.yml", extra=extra, timeout=180)
        assert second.rc == 0, second.output[-4000:]
        assert second.changed == 0, second.output[-4000:]

        reverted = lab.playbook("gpu-classes-revert.yml", extra=extra, timeout=180)
        assert reverted.rc == 0, reverted.output[-4000:]
        assert not (state_dir / "placement.json").exists()
        assert placement(slurm_nodes(lab)) == slurm_before
        assert kube_marks(lab) == kube_before
    finally:
        if (state_dir / "placement.json").exists():
            lab.playbook("gpu-classes-revert.yml", extra=extra, timeout=180)
        lab.slurm("scontrol", "update", "NodeName=%s" % foreign_node, "ActiveFeatures=", "AvailableFeatures=",
                  check=False)
    print("test took %.1fs" % (time.monotonic() - started))
