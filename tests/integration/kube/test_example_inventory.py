"""The real-cluster path's shipped inventory (inventories/example), as a site first runs it.

Everything before the first call to the cluster runs here: every role's checks on the shipped
inventory once its REQUIRED values are filled in (docs/real-cluster.md's table), and each of those
values left out, refused by name before anything changes. The cluster part of the path runs
against the lab in tests/integration/slinky/test_one_click_existing.py.
"""

from __future__ import annotations

import pytest
from lab_harness import REPO
from shipped_inventory import play_cases

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


# What a site fills in where the shipped inventory says REQUIRED (the kubeconfig is written per test).
SITE = {
    "health_agent_daemonset_image": "ghcr.io/acme/gpufleet-health-agent:0.5.0",
    "self_healing_decision_environment_image": "ghcr.io/acme/gpufleet-de:0.5.0",
    "self_healing_controller_url": "https://awx.example.internal",
    "self_healing_controller_token": "awx-oauth-token-0123456789",
    "gpufleet_webhook_token": "abcdefghijklmnopqrstuvwxyz012345",
}
# Each REQUIRED value left out (or a trap put back), and what the refusal must say.
REFUSED = {
    "kubeconfig": ({"kubernetes_kubeconfig": ""}, "kubernetes_backend=existing needs kubernetes_kubeconfig"),
    "agent-image": ({"health_agent_daemonset_image": ""},
                    "health_agent_backend=daemonset needs health_agent_daemonset_image"),
    "de-image": ({"self_healing_decision_environment_image": ""},
                 "self_healing_backend=kubernetes needs self_healing_decision_environment_image"),
    "controller-url": ({"self_healing_controller_url": ""},
                       "self_healing_action=run_job_template needs self_healing_controller_url"),
    "controller-token": ({"self_healing_controller_token": ""}, "needs self_healing_controller_token"),
    "webhook-token": ({"gpufleet_webhook_token": ""},
                      "the webhook would let anyone start remediations: set self_healing_webhook_token"),
    "loopback-receiver": ({"monitoring_alert_webhook_url": "http://127.0.0.1:19500/endpoint"},
                          "monitoring_alert_webhook_url (http://127.0.0.1:19500/endpoint) is a loopback address"),
}


def test_the_filled_in_example_passes_and_each_value_left_out_is_refused_by_name(tmp_path):
    kubeconfig = tmp_path / "site.kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    # One run, one host per case (shipped_inventory.play_cases); only the always-tagged tasks: the
    # validation play of every role, then the first task that needs the cluster.
    cases = {"filled-in": {}, **{case: overrides for case, (overrides, _named) in REFUSED.items()}}
    result, last = play_cases(tmp_path, "example", dict(SITE, kubernetes_kubeconfig=str(kubeconfig)), cases,
                              ONE_CLICK, "--tags", "gpufleet-none")
    assert result.changed == 0, result.output[-4000:]
    assert set(result.recap) == set(cases) and all(r["failed"] == 1 for r in result.recap.values()), result.recap

    # The filled-in example passes every role's checks and stops at the cluster, which is not there.
    checks = result.output.split("PLAY [One-click Slurm on Kubernetes]")[0]
    for role in ("health agent", "monitoring", "self-healing", "chaos warden"):
        assert "TASK [Check the %s settings]" % role in checks, role
    assert "failed: [filled-in]" not in checks and "fatal: [filled-in]" not in checks, checks[-4000:]
    assert "127.0.0.1', port=9" in last["filled-in"].replace("''", "'"), last["filled-in"][-2000:]

    # Each value left out is refused in the validation play, naming it.
    for case, (_overrides, named) in REFUSED.items():
        said = " ".join(last[case].split())
        assert named in said, "%s: %s" % (case, said[-2000:])
        assert "127.0.0.1', port=9" not in said, case
