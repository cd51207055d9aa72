"""The real-cluster path's shipped inventory (inventories/example), as a site first runs it.

Everything before the first call to the cluster runs here: every role's checks on the shipped
inventory once its REQUIRED values are filled in (docs/real-cluster.md's table), and each of those
values left out, refused by name before anything changes. The cluster part of the path runs
against the lab in tests/integration/slinky/test_one_click_existing.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lab_harness import REPO
from shipped_inventory import copy_inventory, play

pytestmark = pytest.mark.integration

ONE_CLICK = REPO / "playbooks" / "one_click_slurm.yml"
# The kubeconfig of a cluster that is not there: the checks read the file, the first task that
# needs the cluster fails on the connection.
KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: site, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: site, user: {token: not-a-token}}]
contexts: [{name: site, context: {cluster: site, user: site}}]
current-context: site
"""


def inventory(tmp_path: Path, **overrides: Any) -> Path:
    kubeconfig = tmp_path / "site.kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    # What a site fills in where the shipped inventory says REQUIRED.
    site = {
        "kubernetes_kubeconfig": str(kubeconfig),
        "health_agent_daemonset_image": "ghcr.io/acme/gpufleet-health-agent:0.5.0",
        "self_healing_decision_environment_image": "ghcr.io/acme/gpufleet-de:0.5.0",
        "self_healing_controller_url": "https://awx.example.internal",
        "self_healing_controller_token": "awx-oauth-token-0123456789",
        "gpufleet_webhook_token": "abcdefghijklmnopqrstuvwxyz012345",
    }
    return copy_inventory(tmp_path, "example", dict(site, **overrides))


def test_the_filled_in_example_passes_every_check_and_stops_at_the_cluster(tmp_path):
    result = play(inventory(tmp_path), ONE_CLICK, "--tags", "gpufleet-none")
    assert result.recap["localhost"]["failed"] == 1 and result.changed == 0, result.output[-4000:]
    checks = result.output.split("PLAY [One-click Slurm on Kubernetes]")[0]
    for role in ("health agent", "monitoring", "self-healing", "chaos warden"):
        assert "TASK [Check the %s settings]" % role in checks, role
    assert "FAILED" not in checks, checks[-4000:]
    assert "127.0.0.1', port=9" in result.output.split("FAILED!")[-1].replace("''", "'"), result.output[-3000:]


@pytest.mark.parametrize("variable, value, named", [
    ("kubernetes_kubeconfig", "", "kubernetes_backend=existing needs kubernetes_kubeconfig"),
    ("health_agent_daemonset_image", "", "health_agent_backend=daemonset needs health_agent_daemonset_image"),
    ("self_healing_decision_environment_image", "",
     "self_healing_backend=kubernetes needs self_healing_decision_environment_image"),
    ("self_healing_controller_url", "", "self_healing_action=run_job_template needs self_healing_controller_url"),
    ("self_healing_controller_token", "", "needs self_healing_controller_token"),
    ("gpufleet_webhook_token", "", "the webhook would let anyone start remediations: set self_healing_webhook_token"),
    ("monitoring_alert_webhook_url", "http://127.0.0.1:19500/endpoint",
     "monitoring_alert_webhook_url (http://127.0.0.1:19500/endpoint) is a loopback address"),
], ids=["kubeconfig", "agent-image", "de-image", "controller-url", "controller-token", "webhook-token",
        "loopback-receiver"])
def test_each_required_value_left_out_is_refused_by_name(tmp_path, variable, value, named):
    result = play(inventory(tmp_path, **{variable: value}), ONE_CLICK)
    said = " ".join(result.output.split())
    assert result.rc != 0 and named in said, result.output[-3000:]
    assert result.changed == 0
    assert "PLAY [One-click Slurm on Kubernetes]" not in result.output
