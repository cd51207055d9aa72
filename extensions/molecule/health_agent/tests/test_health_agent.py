"""Verify the health_agent role on the molecule lab: the lab agents, the staged systemd unit and the
DaemonSet. Each test looks at what the role left on this machine or asks the real API server; the
drills inject faults the way the lab's drills do (fakegpu, a kernel-log line) and wait for the
agent's answer.

The scenario's settings (lab directory, ports, pools) are read from molecule.yml, so the tests and
the scenario cannot drift apart.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

SCENARIO = Path(__file__).resolve().parents[1]
REPO = SCENARIO.parents[2]
VARS = yaml.safe_load((SCENARIO / "molecule.yml").read_text())["provisioner"]["inventory"]["hosts"]["all"]["vars"]
LAB = Path(VARS["gpufleet_lab_dir"])
PORT_BASE = int(VARS["health_agent_lab_port_base"])
CACHE = Path(os.environ.get("GPUFLEET_CACHE_DIR") or Path.home() / ".cache" / "gpufleet")
KUBECTL = str(CACHE / "bin" / "kubectl")
ADMIN = str(LAB / "kube" / "admin.kubeconfig")


def agent_kubeconfig(node: str) -> str:
    """Each lab agent's own identity: a client certificate of the lab CA for its node."""
    return str(LAB / "agent" / ("%s.kubeconfig" % node))


FAKEGPU = str(REPO / "tools" / "fake-nvml" / "fakegpu")
STAGE = LAB / "systemd-root"
MODULE = "ansible_collections.gpufleet.resilience.plugins.module_utils.agent"

# The pool layout of molecule.yml: gpu-a (2 active + 1 spare), gpu-b (1). A node's port is the
# base plus its position in the whole layout, spares included.
ACTIVE = {"gpu-a-001": ("gpu-a", 0), "gpu-a-002": ("gpu-a", 1), "gpu-b-001": ("gpu-b", 3)}
SPARE = "gpu-a-003"


def port_of(node):
    return PORT_BASE + ACTIVE[node][1]


def record(node):
    return json.loads((LAB / "run" / ("health-agent-%s.pid" % node)).read_text())


def kubectl(host, *args, kubeconfig=ADMIN):
    return host.run(" ".join([KUBECTL, "--kubeconfig=" + kubeconfig, "--request-timeout=10s", *args]))


def kube_json(host, *args):
    done = kubectl(host, *args, "-o", "json")
    assert done.rc == 0, done.stderr
    return json.loads(done.stdout)


def condition(host, node):
    for item in kube_json(host, "get", "node", node)["status"].get("conditions", []):
        if item["type"] == "GpuHealthy":
            return item
    return None


def unhealthy(host, node):
    """The GpuHealthy condition of ``node`` when it is False, else None (for wait_for)."""
    found = condition(host, node)
    return found if found and found["status"] == "False" else None


def metrics(host, node):
    return host.check_output("curl -fsS http://127.0.0.1:%d/metrics" % port_of(node))


def sample(text, name, **labels):
    """The value of the first series ``name`` whose labels include ``labels``, or None."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        series, _sep, value = line.rpartition(" ")
        found = dict(re.findall(r'(\w+)="([^"]*)"', series))
        if all(found.get(key) == want for key, want in labels.items()):
            return float(value)
    return None


def wait_for(check, timeout=15.0, what=""):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError("timed out after %ss waiting for %s (last: %r)" % (timeout, what, last))


def fakegpu(host, node, *args):
    done = host.run(" ".join([sys.executable, FAKEGPU, "--dir", str(LAB / "gpus" / node), *args]))
    assert done.rc == 0, done.stderr
    return json.loads(done.stdout)


def reset(host, node):
    """What a GPU reset does: healthy fake GPUs, and SIGUSR1 (by recorded PID) to forget the XIDs."""
    fakegpu(host, node, "clear")
    os.kill(record(node)["pid"], signal.SIGUSR1)
    wait_for(lambda: (condition(host, node) or {}).get("status") == "True", what="%s healthy again" % node)


# ---- lab agents ------------------------------------------------------------------------------

@pytest.mark.parametrize("node", sorted(ACTIVE))
def test_one_agent_per_active_node_runs_as_root(host, node):
    rec = record(node)
    proc = host.process.get(pid=rec["pid"])
    # The lab's Slurm has SlurmUser=root, and fast fence runs scontrol update: root, on purpose.
    assert proc.user == "root"
    assert rec["argv"][1:] == ["-m", MODULE, "--config", str(LAB / "agent" / ("%s.yml" % node))]
    environ = host.file("/proc/%d/environ" % rec["pid"]).content.split(b"\0")
    assert ("GPUFLEET_FAKE_NVML_DIR=%s" % (LAB / "gpus" / node)).encode() in environ


def test_spares_get_no_agent(host):
    assert not host.file(str(LAB / "run" / ("health-agent-%s.pid" % SPARE))).exists
    assert not host.file(str(LAB / "monitoring" / "targets" / ("agent-%s.json" % SPARE))).exists


def test_agents_listen_on_loopback_only(host):
    listeners = host.check_output("ss -Hltnp")
    for node in ACTIVE:
        pid = record(node)["pid"]
        mine = [line.split()[3] for line in listeners.splitlines() if "pid=%d," % pid in line]
        assert mine == ["127.0.0.1:%d" % port_of(node)], (node, mine)


def test_agent_files_are_private(host):
    agent_dir = host.file(str(LAB / "agent"))
    assert agent_dir.is_directory and agent_dir.mode == 0o700 and agent_dir.user == "root"
    for node in ACTIVE:
        config = host.file(str(LAB / "agent" / ("%s.yml" % node)))
        assert config.mode == 0o600 and config.user == "root"
        loaded = yaml.safe_load(config.content_string)
        assert loaded["node"] == node
        assert loaded["metrics"] == {"address": "127.0.0.1", "port": port_of(node)}
        assert loaded["kernel_log"] == {"source": "file", "path": str(LAB / "kmsg" / ("%s.log" % node))}
        assert loaded["kubernetes"]["kubeconfig"] == agent_kubeconfig(node)
        kubeconfig = host.file(agent_kubeconfig(node))
        assert kubeconfig.mode == 0o600 and kubeconfig.user == "root"
        user = yaml.safe_load(kubeconfig.content_string)["users"][0]["user"]
        assert set(user) == {"client-certificate", "client-key"}
        assert host.file(user["client-key"]).mode == 0o600


@pytest.mark.parametrize("node", sorted(ACTIVE))
def test_prometheus_target_per_agent(host, node):
    target = host.file(str(LAB / "monitoring" / "targets" / ("agent-%s.json" % node)))
    assert target.mode == 0o644
    assert json.loads(target.content_string) == [
        {"targets": ["127.0.0.1:%d" % port_of(node)], "labels": {"node": node, "pool": ACTIVE[node][0]}}]
    assert host.file(str(LAB / "monitoring" / "targets")).mode == 0o755


@pytest.mark.parametrize("node", sorted(ACTIVE))
def test_agents_report_healthy_nodes(host, node):
    text = metrics(host, node)
    assert sample(text, "gpufleet_agent_up") == 1.0
    assert sample(text, "gpufleet_agent_info", node=node, kernel_log_source="file") == 1.0
    assert sample(text, "gpufleet_node_health_verdict", state="healthy") == 1.0
    found = wait_for(lambda: condition(host, node), what="the GpuHealthy condition of %s" % node)
    assert (found["status"], found["reason"]) == ("True", "GpusHealthy")


# An agent's rights, asked of the real API server: the condition and Events, nothing else (and the
# admission policy narrows nodes/status to its own node: tests/integration/kube).
@pytest.mark.parametrize("question, answer", [
    ("patch nodes --subresource=status", "yes"),
    ("create events --namespace=default", "yes"),
    ("patch events --namespace=default", "yes"),
    ("get nodes", "no"),
    ("patch nodes", "no"),
    ("delete nodes", "no"),
    ("list pods --all-namespaces", "no"),
    ("get secrets --namespace=gpufleet-system", "no"),
    ("create events --namespace=kube-system", "no"),
])
def test_agent_token_is_least_privilege(host, question, answer):
    done = kubectl(host, "auth", "can-i", *question.split(), kubeconfig=agent_kubeconfig("gpu-a-001"))
    assert done.stdout.strip() == answer, (question, done.stdout, done.stderr)


def test_xid_79_makes_the_node_unhealthy(host):
    node, bystander = "gpu-a-002", "gpu-a-001"
    uuid = fakegpu(host, node, "show")["gpus"][0]["uuid"]
    try:
        fakegpu(host, node, "xid", "--gpu", "0", "--xid", "79")
        count = wait_for(lambda: sample(metrics(host, node), "gpufleet_gpu_xid_errors_total", gpu="0", xid="79"),
                         timeout=5, what="gpufleet_gpu_xid_errors_total{xid=79}")
        assert count >= 1
        found = wait_for(lambda: unhealthy(host, node), timeout=5, what="GpuHealthy False on %s" % node)
        assert found["reason"] == "Xid79"
        assert found["message"].startswith("fatal, RESTART_BM: GPU 0 (%s" % uuid)
        journal = host.file(str(LAB / "agent" / ("%s.events.jsonl" % node))).content_string.splitlines()
        assert any(json.loads(line)["fault"]["xid"] == 79 for line in journal)
        # One node's fault is that node's only.
        assert condition(host, bystander)["status"] == "True"
        assert sample(metrics(host, bystander), "gpufleet_gpu_xid_errors_total", xid="79") is None
    finally:
        reset(host, node)


def test_kernel_log_line_reaches_its_agent(host):
    node = "gpu-b-001"
    gpu = fakegpu(host, node, "show")["gpus"][1]
    # The driver prints a 4-digit domain and no function: 00000000:1f:00.0 -> 0000:1f:00.
    domain, bus, device = gpu["pci_bus_id"].lower().rsplit(".", 1)[0].split(":")
    short = "%s:%s:%s" % (domain[-4:], bus, device)
    # The kernel's own stamp, seconds since boot: now, so the XID falls inside the agent's window.
    uptime = float(host.file("/proc/uptime").content_string.split()[0])
    kmsg = LAB / "kmsg" / ("%s.log" % node)
    before = sample(metrics(host, node), "gpufleet_agent_xid_events_total", source="kernel_log") or 0.0
    try:
        with open(kmsg, "a") as log:
            log.write("[%12.6f] NVRM: Xid (PCI:%s): 13, pid=4242, name=train_sim, "
                      "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address\n" % (uptime, short))
        wait_for(lambda: (sample(metrics(host, node), "gpufleet_agent_xid_events_total", source="kernel_log") or 0)
                 > before, timeout=5, what="a kernel-log XID read by %s's agent" % node)
        assert sample(metrics(host, node), "gpufleet_gpu_xid_errors_total", gpu="1", xid="13") >= 1
        found = wait_for(lambda: unhealthy(host, node), timeout=5, what="GpuHealthy False on %s" % node)
        assert found["reason"] == "Xid13"
    finally:
        reset(host, node)


# ---- systemd backend (staged below the lab directory, not started) ---------------------------

UNIT = STAGE / "etc" / "systemd" / "system" / "gpufleet-agent.service"
HARDENING = [
    "User=gpufleet-agent", "NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes",
    "ReadWritePaths=/var/lib/gpufleet", "CapabilityBoundingSet=CAP_SYSLOG", "AmbientCapabilities=CAP_SYSLOG",
    "DevicePolicy=closed", "DeviceAllow=char-nvidia-frontend rw", "DeviceAllow=/dev/kmsg r",
    "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6", "SystemCallFilter=@system-service",
    "ProtectKernelTunables=yes", "ProtectKernelModules=yes", "ProtectControlGroups=yes", "RestrictNamespaces=yes",
    "RestrictSUIDSGID=yes", "LockPersonality=yes", "SystemCallArchitectures=native",
]


def test_unit_carries_its_hardening(host):
    unit = host.file(str(UNIT))
    assert unit.mode == 0o644 and unit.user == "root"
    lines = {line.strip() for line in unit.content_string.splitlines()}
    missing = [want for want in HARDENING if want not in lines]
    assert not missing
    assert ("ExecStart=/opt/gpufleet-agent/venv/bin/python -m %s --config /etc/gpufleet/agent.yml" % MODULE) in lines
    assert "Environment=PYTHONPATH=/opt/gpufleet-agent/lib" in lines
    # ProtectKernelLogs would take /dev/kmsg away from the agent.
    assert not any(line.startswith("ProtectKernelLogs=") for line in lines)


def test_unit_exposure_is_low(host):
    """systemd's own judgement of the unit, offline: 'OK' is at most 2.9 of 10 on systemd 252."""
    done = host.run("systemd-analyze security --offline=yes --no-pager --threshold=25 %s" % UNIT)
    assert done.rc == 0, done.stdout[-3000:] + done.stderr


def test_systemd_config_is_readable_by_the_agent_user_only(host):
    config = host.file(str(STAGE / "etc" / "gpufleet" / "agent.yml"))
    assert (config.mode, config.user, config.group) == (0o640, "root", "gpufleet-agent")
    etc = host.file(str(STAGE / "etc" / "gpufleet"))
    assert (etc.mode, etc.user, etc.group) == (0o750, "root", "gpufleet-agent")
    assert host.file(str(STAGE / "etc")).mode == 0o755
    loaded = yaml.safe_load(config.content_string)
    assert loaded["node"] == "gpu-a-001"
    assert loaded["metrics"] == {"address": "127.0.0.1", "port": 9402}
    assert loaded["kernel_log"] == {"source": "kmsg", "path": None}
    assert loaded["journal"] == "/var/lib/gpufleet/health-events.jsonl"
    assert loaded["kubernetes"]["kubeconfig"] == agent_kubeconfig("gpu-a-001")
    journal_dir = host.file(str(STAGE / "var" / "lib" / "gpufleet"))
    assert (journal_dir.mode, journal_dir.user, journal_dir.group) == (0o750, "gpufleet-agent", "gpufleet-agent")


def test_agent_system_user(host):
    user = host.user("gpufleet-agent")
    assert user.exists and user.shell == "/usr/sbin/nologin" and user.uid < 1000
    assert user.group == "gpufleet-agent"


def test_staged_venv_runs_the_staged_agent(host):
    """The venv and the copied code are a working agent: it checks the staged config."""
    python = STAGE / "opt" / "gpufleet-agent" / "venv" / "bin" / "python"
    lib, config = STAGE / "opt" / "gpufleet-agent" / "lib", STAGE / "etc" / "gpufleet" / "agent.yml"
    done = host.run("env -i PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=%s %s -m %s --check-config --config %s"
                    % (lib, python, MODULE, config))
    assert done.rc == 0, done.stderr
    assert json.loads(done.stdout)["node"] == "gpu-a-001"
    frozen = host.check_output("%s -m pip freeze --disable-pip-version-check" % python)
    frozen = frozen.lower().replace("_", "-").split()
    for pin in ("nvidia-ml-py==13.615.71", "prometheus-client==0.26.0", "pyyaml==6.0.4"):
        assert pin in frozen
    # Everything the running agent imports (NVML, metrics, the loop) resolves inside the venv.
    done = host.run("env -i PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=%s %s -c 'import pynvml, prometheus_client, yaml; "
                    "from %s.loop import Agent'" % (lib, python, MODULE))
    assert done.rc == 0, done.stderr
    copied = STAGE / "opt/gpufleet-agent/lib/ansible_collections/gpufleet/resilience/plugins/module_utils/agent"
    assert not host.file(str(copied / "__pycache__")).exists


def test_containerfile_pins_match_the_role(host):
    text = (REPO / "roles" / "health_agent" / "files" / "Containerfile").read_text()
    pins = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.M))
    defaults = yaml.safe_load((REPO / "roles" / "health_agent" / "defaults" / "main.yml").read_text())
    assert sorted(defaults["health_agent_systemd_packages"]) == sorted([
        "nvidia-ml-py==" + pins["NVIDIA_ML_PY"], "prometheus-client==" + pins["PROMETHEUS_CLIENT"],
        "PyYAML==" + pins["PYYAML"]])
    assert 'ENTRYPOINT ["python", "-m", "%s"]' % MODULE in text


# ---- daemonset backend (accepted by the real API server; kwok plays its pods) ----------------

def test_daemonset_runs_on_every_gpu_node(host):
    ds = kube_json(host, "get", "daemonset", "gpufleet-health-agent", "--namespace=gpufleet-system")
    status = ds["status"]
    assert status["desiredNumberScheduled"] == len(ACTIVE)
    wait_for(lambda: kube_json(host, "get", "daemonset", "gpufleet-health-agent",
                               "--namespace=gpufleet-system")["status"].get("numberReady") == len(ACTIVE),
             timeout=30, what="every DaemonSet pod ready")
    pods = kube_json(host, "get", "pods", "--namespace=gpufleet-system",
                     "--selector=app.kubernetes.io/name=gpufleet-health-agent")["items"]
    assert sorted(pod["spec"]["nodeName"] for pod in pods) == sorted(ACTIVE)


def test_daemonset_pod_spec(host):
    spec = kube_json(host, "get", "daemonset", "gpufleet-health-agent",
                     "--namespace=gpufleet-system")["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "gpufleet-health-agent"
    assert spec.get("hostPID") is not True and spec.get("hostNetwork") is not True
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "gpufleet.io/gpu-unhealthy", "operator": "Exists"} in spec["tolerations"]
    agent = spec["containers"][0]
    assert agent["ports"] == [{"name": "metrics", "containerPort": 9402, "protocol": "TCP"}]
    context = agent["securityContext"]
    assert context["capabilities"] == {"drop": ["ALL"], "add": ["SYSLOG"]}
    assert context["allowPrivilegeEscalation"] is False and context["privileged"] is False
    assert context["readOnlyRootFilesystem"] is True
    node_name = next(env for env in agent["env"] if env["name"] == "NODE_NAME")
    assert node_name["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    assert volumes["kmsg"]["hostPath"] == {"path": "/dev/kmsg", "type": "CharDevice"}
    assert volumes["nvidia-driver"]["hostPath"]["path"] == "/usr/lib/x86_64-linux-gnu"
    # The fast fence's slurmrestd token: a Secret only the agent reads, mounted read-only.
    assert volumes["slurm-token"]["secret"] == {"secretName": "gpufleet-slurm-token", "defaultMode": 0o400}
    mounts = {mount["name"]: mount for mount in agent["volumeMounts"]}
    assert mounts["slurm-token"] == {"name": "slurm-token", "mountPath": "/run/secrets/gpufleet-slurm",
                                     "readOnly": True}


def test_daemonset_config_is_valid_for_a_node(host, tmp_path):
    """The ConfigMap's agent.yml, with a node's name filled in as the init container does, passes
    the agent's own --check-config."""
    config_map = kube_json(host, "get", "configmap", "gpufleet-health-agent", "--namespace=gpufleet-system")
    text = config_map["data"]["agent.yml"]
    assert '"__NODE_NAME__"' in text
    rendered = tmp_path / "agent.yml"
    rendered.write_text(text.replace("__NODE_NAME__", "gpu-b-001"))
    done = subprocess.run([sys.executable, "-m", MODULE, "--check-config", "--config", str(rendered)],
                          capture_output=True, text=True, check=False,
                          env=dict(os.environ, PYTHONPATH=str(REPO / "collections")))
    assert done.returncode == 0, done.stderr
    effective = json.loads(done.stdout)
    assert effective["node"] == "gpu-b-001"
    assert effective["metrics"] == {"address": "0.0.0.0", "port": 9402}
    assert effective["kubernetes"]["kubeconfig"] is None
    assert effective["nvml_library_path"] == "/run/nvidia-driver/libnvidia-ml.so.1"
    fence = effective["fast_fence"]
    assert (fence["enabled"], fence["slurm_api"], fence["rest_token_file"], fence["slurm_conf"]) == (
        True, "rest", "/run/secrets/gpufleet-slurm/token", None)


# ---- check mode and bad input (ansible-playbook with the scenario's inventory) ----------------

def playbook(name, *args):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_FORCE_COLOR="0")
    # The inventory directory: molecule keeps the scenario's host vars in its `hosts` file there.
    inventory = str(Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent)
    return subprocess.run(["ansible-playbook", "-i", inventory, *args,
                           str(SCENARIO / "tests" / name)], capture_output=True, text=True, env=env,
                          timeout=600, check=False)


def recap(done):
    return {key: int(value) for key, value in re.findall(r"\b(ok|changed|failed|skipped)=(\d+)", done.stdout)}


def test_check_mode_on_the_converged_lab_changes_nothing(host):
    pids = {node: record(node)["pid"] for node in ACTIVE}
    done = playbook("check_converged.yml", "--check")
    assert done.returncode == 0, done.stdout[-4000:]
    assert recap(done)["changed"] == 0, done.stdout[-4000:]
    assert {node: record(node)["pid"] for node in ACTIVE} == pids


def test_check_mode_on_a_new_lab_writes_nothing(host):
    done = playbook("check_new_lab.yml", "--check")
    assert done.returncode == 0, done.stdout[-4000:]
    assert recap(done)["changed"] > 0
    assert not host.file(str(LAB) + "-check-mode").exists


def test_bad_input_fails_before_any_change(host):
    pids = {node: record(node)["pid"] for node in ACTIVE}
    done = playbook("bad_input.yml")
    assert done.returncode == 0, done.stdout[-6000:]
    assert recap(done)["failed"] == 0
    assert {node: record(node)["pid"] for node in ACTIVE} == pids
