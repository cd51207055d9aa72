"""A light lab for the identity tests: the real kube-apiserver (with etcd, the controller manager
and kwok) and the identities the roles issue, without Slurm, agents or monitoring.

Its own directory and ports (29xxx), so it runs beside the test lab and `make lab`.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict

import pytest
from lab_harness import TEST_LAB_VARS, Lab, lab_processes, run_playbook

HERE = Path(__file__).resolve().parent
IDENTITY_LAB_DIR = Path(os.environ.get("GPUFLEET_TEST_IDENTITY_LAB_DIR", "/var/tmp/gpufleet-pytest-identities"))
IDENTITY_LAB_VARS: Dict[str, Any] = {
    "kubernetes_lab_etcd_client_port": 29379,
    "kubernetes_lab_etcd_peer_port": 29380,
    "kubernetes_lab_apiserver_port": 29443,
    "kubernetes_lab_controller_manager_port": 29257,
    "kubernetes_lab_scheduler_port": 29259,
    "kubernetes_lab_kwok_port": 29247,
    "kubernetes_lab_scheduler": False,
    # Two active nodes and a spare: every one gets an agent identity.
    "gpufleet_node_pools": [dict(TEST_LAB_VARS["gpufleet_node_pools"][0], count=2, spares=1)],
}


@dataclass
class IdentityLab(Lab):
    def kubeconfig_of(self, who: str) -> Path:
        """remediation, drill or self-healing (the kubernetes role's), or a node's agent (the health_agent role's)."""
        if who in ("remediation", "drill", "self-healing"):
            return self.lab_dir / "kube" / ("%s.kubeconfig" % who)
        return self.lab_dir / "agent" / ("%s.kubeconfig" % who)

    def run(self, playbook: Path, extra: Dict[str, Any], timeout: int = 900):
        variables = dict(self.extra_vars, gpufleet_lab_dir=str(self.lab_dir))
        variables.update(extra)
        return run_playbook([str(playbook), "-e", json.dumps(variables)], self.env(), timeout)


@pytest.fixture(scope="session")
def identity_lab() -> IdentityLab:
    the_lab = IdentityLab(lab_dir=IDENTITY_LAB_DIR, extra_vars=dict(IDENTITY_LAB_VARS))
    up_book, down_book = HERE / "files" / "identity-lab-up.yml", HERE / "files" / "identity-lab-down.yml"
    if IDENTITY_LAB_DIR.exists():
        the_lab.run(down_book, {})
        shutil.rmtree(IDENTITY_LAB_DIR)
    up = the_lab.run(up_book, {})
    if up.rc != 0:
        the_lab.run(down_book, {})
        pytest.fail("the identity lab did not come up:\n" + up.output[-6000:])
    yield the_lab
    down = the_lab.run(down_book, {})
    left = lab_processes(IDENTITY_LAB_DIR)
    assert down.rc == 0, down.output[-4000:]
    assert not left, "processes left after the identity lab's teardown: %s" % left
