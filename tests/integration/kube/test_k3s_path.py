"""The k3s path with inventories/k3s, as far as this machine allows (docs/k3s.md).

No k3s can run here (no systemd as PID 1, no route to the release downloads), so what runs is
everything before the first k3s host is touched: the real playbook's validation of the shipped
inventory, each k3s rule refusing its own variable, the play that puts k3s on the server and the
agents and no other host, and the systemd units the role writes, rendered from the inventory by the
role and checked with ``systemd-analyze verify``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from lab_harness import REPO, VENV_BIN
from shipped_inventory import copy_inventory, play, play_cases

pytestmark = pytest.mark.integration

# What a site fills in where the shipped inventory says REQUIRED.
SITE = {
    "kubernetes_k3s_sha256": "0123456789abcdef" * 4,
    "kubernetes_k3s_token": "K10example::server:join-secret",
    "health_agent_daemonset_image": "ghcr.io/acme/gpufleet-health-agent:0.5.0",
}


def inventory(tmp_path: Path, **overrides: Any) -> Path:
    return copy_inventory(tmp_path, "k3s", dict(SITE, **overrides))


def test_the_shipped_inventory_passes_every_check_and_stops_at_the_cluster(tmp_path):
    # Only the always-tagged tasks: the validation play of every role, then the first task that
    # needs the cluster, which reads the kubeconfig k3s would have written.
    result = play(inventory(tmp_path), REPO / "playbooks" / "one_click_slurm.yml", "--tags", "gpufleet-none")
    assert result.recap["localhost"]["failed"] == 1 and result.changed == 0, result.output[-4000:]
    checks = result.output.split("PLAY [One-click Slurm on Kubernetes]")[0]
    assert "TASK [Check the chaos warden settings]" in checks and "FAILED" not in checks, checks[-4000:]
    assert ".kube/gpufleet-k3s.yaml" in result.output.split("FAILED!")[-1], result.output[-3000:]


# Each k3s rule broken on its own, and what the refusal must say.
REFUSED = {
    "sha256": ({"kubernetes_k3s_sha256": ""}, "kubernetes_k3s_sha256 must be the 64-hex-digit SHA256"),
    "token": ({"kubernetes_k3s_token": ""}, "kubernetes_k3s_token is required when the group 'k3s_agents' has hosts"),
    "version": ({"kubernetes_k3s_version": "1.33"}, "kubernetes_k3s_version must look like v1.33.5+k3s1"),
    "old-version": ({"kubernetes_k3s_version": "v1.27.4+k3s1"}, "is older than kubernetes_min_version"),
    "two-servers": ({"kubernetes_k3s_server_group": "k3s_agents"},
                    "kubernetes_k3s_server_group: the inventory group 'k3s_agents'"),
    "lab-kubeconfig": ({"kubernetes_kubeconfig": "/var/tmp/gpufleet-lab/kube/admin.kubeconfig"},
                       "kubernetes_kubeconfig must name"),
}


def test_each_k3s_rule_names_its_variable_before_any_host_is_touched(tmp_path):
    # One run, one control host per case (shipped_inventory.play_cases), the k3s hosts as shipped.
    result, last = play_cases(tmp_path, "k3s", SITE, {case: o for case, (o, _named) in REFUSED.items()},
                              REPO / "playbooks" / "one_click_slurm.yml")
    assert result.rc != 0 and result.changed == 0, result.output[-3000:]
    for case, (_overrides, named) in REFUSED.items():
        assert named in " ".join(last[case].split()), "%s: %s" % (case, last[case][-2000:])
    assert "PLAY [Install k3s on its server and agents]" not in result.output
    assert set(result.recap) == set(REFUSED)


def test_k3s_goes_on_the_server_and_the_agents_in_units_systemd_accepts(tmp_path):
    inv = inventory(tmp_path)
    listed = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", str(inv), "--list-hosts", "--tags", "k3s",
                             str(REPO / "playbooks" / "one_click_slurm.yml")], capture_output=True, text=True,
                            check=True, env=dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
                                                 ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections")))
    k3s_play = listed.stdout.split("Install k3s on its server and agents")[1].split("play #")[0]
    assert {"k3s-server-1", "gpu-node-1", "gpu-node-2"} <= set(k3s_play.split()), listed.stdout

    # The role's own defaults and checks, then its unit template, per host as k3s.yml decides.
    out = tmp_path / "units"
    out.mkdir()
    binary = out / "k3s"
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    render = tmp_path / "render.yml"
    render.write_text(yaml.safe_dump([{
        "name": "Render the k3s units as the kubernetes role writes them",
        "hosts": "k3s_server:k3s_agents",
        "gather_facts": False,
        "tasks": [
            {"name": "The role's defaults and its checks",
             "ansible.builtin.include_role": {"name": "gpufleet.resilience.kubernetes", "tasks_from": "validate",
                                              "public": True}},
            {"name": "The unit", "delegate_to": "localhost",
             "ansible.builtin.template": {"src": str(REPO / "roles/kubernetes/templates/k3s.service.j2"),
                                          "dest": str(out) + "/{{ inventory_hostname }}.service", "mode": "0644"},
             "vars": {"kubernetes__k3s_role": "{{ 'server' if inventory_hostname in groups.k3s_server else 'agent' }}",
                      "kubernetes_k3s_install_path": str(binary)}},
        ],
    }]))
    rendered = play(inv, render)
    assert rendered.rc == 0, rendered.output[-3000:]
    server = (out / "k3s-server-1.service").read_text()
    agent = (out / "gpu-node-1.service").read_text()
    assert "Type=notify" in server and "ExecStart=%s server --disable=traefik" % binary in server
    assert "EnvironmentFile=/etc/default/k3s-server" in server
    # The node label the shipped pool selects its GPU nodes by.
    assert "ExecStart=%s agent --node-label=gpufleet.io/k3s-gpu=true" % binary in agent
    pools = yaml.safe_load((inv / "group_vars" / "all" / "site.yml").read_text())["gpufleet_node_pools"]
    assert pools[0]["selector"] == {"gpufleet.io/k3s-gpu": "true"}
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze is missing: install the systemd package (bindep.txt)")
    verified = subprocess.run(["systemd-analyze", "verify", *map(str, sorted(out.glob("*.service")))],
                              capture_output=True, text=True, check=False)
    assert verified.returncode == 0, verified.stdout + verified.stderr
