# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""node_replace against the real lab: kube-apiserver + kwok, slurmctld + slurmd, the health agents.

* provider ``lab``: a spare comes online in Kubernetes (Ready, annotated), in Slurm (IDLE, runs a
  job) and in monitoring (its agent serves /metrics, writes GpuHealthy=True, has a scrape target);
  the failed node leaves all three (Slurm FUTURE). The idempotency ladder, a run killed half-way
  and run again, an explicit spare, no spare left, and the rollback (``state: restored``), which
  puts the session lab back exactly as it was.
* provider ``clusterapi``: Cluster API's own Machine CRD (v1.13.6, from its Go module) on the lab's
  API server. No Cluster API controller runs here, so the test plays the MachineSet controller
  and the infrastructure provider: once the Machine is deleted, it creates the new Machine and
  its Node (kwok makes it Ready) and sets the Machine's status.nodeRef.
* provider ``command``: a harmless command that writes a file (no lab needed).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest
from agent_probe import AgentProbe
from lab_harness import REPO, VENV_BIN, go_module_dir, kubectl, unestablished_crds

pytestmark = [pytest.mark.integration]

POOL = "gpu-a"
ACTIVE = ["gpu-a-001", "gpu-a-002", "gpu-a-003", "gpu-a-004"]
SPARES = ["gpu-a-005", "gpu-a-006"]
CAPI_MODULE, CAPI_VERSION = "sigs.k8s.io/cluster-api", "v1.13.6"
CAPI_GROUP = "cluster.x-k8s.io"
CAPI_NAMESPACE = "gpufleet-capi-test"
CAPI_CLUSTER = "gpu-cluster"
_RESULT = re.compile(r"^localhost \| (CHANGED|SUCCESS|FAILED!) => ", re.M)


# ---------------------------------------------------------------- helpers


def wait_for(what: str, condition: Callable[[], Any], timeout: float = 60, every: float = 0.3) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))
        time.sleep(every)


def ansible_env(lab=None) -> Dict[str, str]:
    if lab is not None:
        env = lab.env()
    else:
        env = dict(os.environ, PATH=str(VENV_BIN) + os.pathsep + os.environ.get("PATH", ""),
                   ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
                   ANSIBLE_NOCOLOR="1")
    return dict(env, ANSIBLE_CALLBACK_RESULT_FORMAT="json")


def module_argv(args: Dict[str, Any], check: bool = False, diff: bool = False) -> List[str]:
    argv = [str(VENV_BIN / "ansible"), "localhost", "-m", "gpufleet.resilience.node_replace", "-a", json.dumps(args)]
    return argv + (["--check"] if check else []) + (["--diff"] if diff else [])


def parse_result(output: str, rc: int) -> Dict[str, Any]:
    found = _RESULT.search(output)
    assert found, output[-3000:]
    result, _end = json.JSONDecoder().raw_decode(output, found.end())
    result["failed"] = found.group(1) == "FAILED!"
    result["_output"] = output
    assert (rc != 0) == result["failed"], output[-3000:]
    return result


def node_replace(lab, check: bool = False, diff: bool = False, **args: Any) -> Dict[str, Any]:
    """``ansible localhost -m gpufleet.resilience.node_replace``, as the remediation runs it."""
    if lab is not None and args.get("provider") == "lab":
        args.setdefault("lab_dir", str(lab.lab_dir))
    done = subprocess.run(module_argv(args, check, diff), cwd=REPO, env=ansible_env(lab), capture_output=True,
                          text=True, timeout=600, check=False)
    return parse_result(done.stdout + done.stderr, done.returncode)


def kube_node(lab, name: str) -> Optional[Dict[str, Any]]:
    from kubernetes.client.exceptions import ApiException

    api = lab.kube()
    try:
        return api.api_client.sanitize_for_serialization(api.read_node(name))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def ready(node: Optional[Dict[str, Any]]) -> bool:
    conditions = ((node or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def slurm_state(lab, name: str) -> str:
    """The node's State word (FUTURE included): IDLE, FUTURE, DOWN+DRAIN, ..."""
    text = lab.slurm("scontrol", "--future", "--oneliner", "show", "node", name)
    return re.search(r"\bState=(\S+)", text).group(1)


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` (ansible) and its processes, as a crash would: its worker leads a session of its own,
    below it the module. Lab daemons the module started lead their own sessions too; they are the lab's,
    not the run's, and stay."""
    stats: Dict[int, List[str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stats[int(entry)] = Path("/proc", entry, "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
    tree, grown = {pid}, True
    while grown:
        below = {child for child, fields in stats.items() if int(fields[1]) in tree and child not in tree
                 and (int(fields[3]) != child or int(fields[1]) == pid)}
        tree |= below
        grown = bool(below)
    for member in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, signal.SIGKILL)


def alive(pid: int) -> bool:
    try:
        with open("/proc/%d/stat" % pid) as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def layout(lab) -> Dict[str, Any]:
    """What the lab's pool looks like from every side; the rollback must give this back exactly."""
    pool_nodes = lab.kube().list_node(label_selector="gpufleet.io/pool=%s" % POOL).items
    pids = lab.recorded_pids()
    return {
        "kube": sorted(node.metadata.name for node in pool_nodes),
        "slurm": {name: slurm_state(lab, name) for name in ACTIVE + SPARES},
        "slurmd": sorted(name for name in pids if name.startswith("slurmd-") and alive(pids[name])),
        "agents": sorted(name for name in pids if name.startswith("health-agent-") and alive(pids[name])),
        "targets": {path.name: path.read_text() for path in (lab.lab_dir / "monitoring" / "targets").glob("*.json")},
    }


def assert_in_service(lab, name: str) -> None:
    node = wait_for("node %s Ready" % name, lambda: ready(kube_node(lab, name)) and kube_node(lab, name))
    assert not [t for t in (node["spec"].get("taints") or []) if t["key"] == "node.kubernetes.io/not-ready"]
    assert slurm_state(lab, name) == "IDLE"
    probe = AgentProbe(lab, name)
    assert probe.sample("gpufleet_agent_up") == 1.0
    assert probe.sample("gpufleet_agent_info", node=name) == 1.0
    condition = probe.wait_condition(lambda c: c["status"] == "True", timeout=30)
    assert condition["reason"] == "GpusHealthy", condition


def assert_out_of_service(lab, name: str) -> None:
    assert kube_node(lab, name) is None
    assert slurm_state(lab, name) == "FUTURE"
    assert ("slurmd-%s" % name) not in lab.recorded_pids()
    assert ("health-agent-%s" % name) not in lab.recorded_pids()
    assert not (lab.lab_dir / "monitoring" / "targets" / ("agent-%s.json" % name)).exists()
    # FUTURE nodes are hidden from sinfo, as the spares were.
    assert name not in lab.slurm("sinfo", "--Node", "--noheader", "--format=%N")


def run_job_on(lab, name: str) -> None:
    out = lab.lab_dir / "storage" / "checkpoints" / ("replace-%s-%d.out" % (name, time.time_ns()))
    job = lab.slurm("sbatch", "--parsable", "--gres=gpu:1", "-w", name, "--output=%s" % out,
                    "--wrap", "echo node=$SLURMD_NODENAME").strip().split(";")[0]
    fields = lab.wait_job(job, timeout=60)
    assert fields["JobState"] == "COMPLETED", fields
    assert "node=%s" % name in out.read_text()


@pytest.fixture()
def lab_as_before(lab):
    """The session lab's pool as it was, asserted (and put back, whatever happened) after the test."""
    before = layout(lab)
    assert before["kube"] == ACTIVE, before
    yield before
    for name in ACTIVE:
        if kube_node(lab, name) is None:
            node_replace(lab, name=name, provider="lab", state="restored")
    assert layout(lab) == before


# ---------------------------------------------------------------- provider lab


@pytest.mark.lab
def test_lab_replace_ladder_then_restore_puts_the_lab_back(lab, lab_as_before):
    failed, spare = "gpu-a-004", "gpu-a-005"
    args = dict(name=failed, provider="lab", remediation_id="r-test-0001")

    planned = node_replace(lab, check=True, diff=True, **args)
    assert planned["changed"] and not planned["failed"], planned["_output"][-3000:]
    assert planned["replacement"] == spare and planned["retired"] == failed
    assert planned["actions"][0] == "create Kubernetes node %s" % spare
    assert "set Slurm node %s FUTURE" % failed in planned["actions"]
    assert planned["actions"][-1] == "delete Kubernetes node %s" % failed
    # The diff callback prints the diff before the result.
    assert '-    "%s": "in service",' % failed in planned["_output"]
    assert '+    "%s": "in service"' % spare in planned["_output"]
    assert layout(lab) == lab_as_before, "check mode changed the lab"

    done = node_replace(lab, **args)
    assert done["changed"], done["_output"][-3000:]
    assert (done["replacement"], done["retired"], done["provider"]) == (spare, failed, "lab")
    assert done["actions"] == planned["actions"]
    assert_out_of_service(lab, failed)
    assert_in_service(lab, spare)
    annotations = kube_node(lab, spare)["metadata"]["annotations"]
    assert annotations["gpufleet.io/replaces"] == failed
    assert annotations["gpufleet.io/remediation-id"] == "r-test-0001"
    target = json.loads((lab.lab_dir / "monitoring" / "targets" / ("agent-%s.json" % spare)).read_text())
    assert target[0]["labels"] == {"node": spare, "pool": POOL}
    run_job_on(lab, spare)

    for check in (True, False):
        again = node_replace(lab, check=check, **args)
        assert not again["changed"] and again["actions"] == [], again["_output"][-3000:]
        assert again["replacement"] == spare

    # A rerun of the main job keeps the fleet as it was replaced: the retired node stays out, the spare in.
    record = lab.lab_dir / "replacements" / ("%s.json" % failed)
    assert json.loads(record.read_text()) == {"retired": failed, "replacement": spare, "pool": POOL}
    replaced = layout(lab)
    rerun = lab.playbook("one-click-slurm.yml")
    assert rerun.rc == 0 and rerun.changed == 0, rerun.output[-3000:]
    assert layout(lab) == replaced
    assert_out_of_service(lab, failed)
    assert_in_service(lab, spare)

    planned_back = node_replace(lab, check=True, name=failed, provider="lab", state="restored")
    assert planned_back["changed"] and planned_back["retired"] == spare and planned_back["replacement"] == failed
    back = node_replace(lab, name=failed, provider="lab", state="restored")
    assert back["changed"] and back["actions"] == planned_back["actions"], back["_output"][-3000:]
    assert_in_service(lab, failed)
    assert_out_of_service(lab, spare)
    assert not record.exists(), "the restore left the replacement's record"
    run_job_on(lab, failed)
    for check in (True, False):
        again = node_replace(lab, check=check, name=failed, provider="lab", state="restored")
        assert not again["changed"] and again["actions"] == [], again["_output"][-3000:]
    assert layout(lab) == lab_as_before


@pytest.mark.lab
def test_lab_explicit_spare_then_the_next_then_none_left(lab, lab_as_before):
    first = node_replace(lab, name="gpu-a-003", provider="lab", spare="gpu-a-006")
    assert first["changed"] and first["replacement"] == "gpu-a-006", first["_output"][-3000:]
    second = node_replace(lab, name="gpu-a-004", provider="lab")
    assert second["changed"] and second["replacement"] == "gpu-a-005", second["_output"][-3000:]
    # A retired node is out for repair, not spare capacity.
    before = layout(lab)
    refused = node_replace(lab, name="gpu-a-002", provider="lab")
    assert refused["failed"]
    assert "pool gpu-a has no spare left for gpu-a-002" in refused["msg"], refused["msg"]
    assert layout(lab) == before
    for failed in ("gpu-a-003", "gpu-a-004"):
        back = node_replace(lab, name=failed, provider="lab", state="restored")
        assert back["changed"], back["_output"][-3000:]


@pytest.mark.lab
def test_lab_replace_killed_half_way_finishes_on_rerun_without_repeating(lab, lab_as_before):
    failed, spare = "gpu-a-001", "gpu-a-005"
    # A simulated boot long enough to be caught: kill the run once the spare's Node is there.
    argv = module_argv(dict(name=failed, provider="lab", lab_dir=str(lab.lab_dir), boot_delay=1))
    run = subprocess.Popen(argv, cwd=REPO, env=ansible_env(lab), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for("the spare's Kubernetes node", lambda: kube_node(lab, spare) is not None, timeout=120, every=0.05)
    finally:
        kill_tree(run.pid)
        run.wait(timeout=30)
    assert kube_node(lab, failed) is not None, "the run was killed after the failed node was retired"
    again = node_replace(lab, name=failed, provider="lab")
    assert again["changed"] and again["replacement"] == spare, again["_output"][-3000:]
    assert "create Kubernetes node %s" % spare not in again["actions"]
    assert again["actions"][-1] == "delete Kubernetes node %s" % failed
    assert_in_service(lab, spare)
    assert_out_of_service(lab, failed)
    node_replace(lab, name=failed, provider="lab", state="restored")


@pytest.mark.lab
def test_lab_bad_input_names_the_field_and_changes_nothing(lab, lab_as_before, tmp_path):
    # A directory that is not a lab, and one that does not exist: made here, so that neither depends
    # on the machine (Debian's /nonexistent, the home of daemon users, exists once something made it).
    not_a_lab, missing = tmp_path / "not-a-lab", tmp_path / "missing"
    not_a_lab.mkdir()
    cases = [
        (dict(name="gpu-a-042", provider="lab"), "name: 'gpu-a-042' is not a node of any pool of the lab"),
        (dict(name="gpu-a-005", provider="lab"), "name: gpu-a-005 is not in service"),
        (dict(name="gpu-a-001", provider="lab", spare="gpu-a-002"), "spare: gpu-a-002 is in service"),
        (dict(name="gpu-a-001", provider="lab", spare="gpu-a-001"), "spare: must be another node"),
        (dict(name="GPU_A", provider="lab"), "name: must be a node name"),
        (dict(name="gpu-a-001", provider="lab", lab_dir=str(not_a_lab)), "lab_dir: %s has no node recipes" % not_a_lab),
        (dict(name="gpu-a-001", provider="lab", lab_dir=str(missing)), "lab_dir: %s is not a directory" % missing),
        (dict(name="gpu-a-001", provider="clusterapi", state="restored"), "state: restored is for provider lab only"),
        (dict(name="gpu-a-001", provider="command"), "command: is required with provider command"),
    ]
    for args, message in cases:
        result = node_replace(lab, **args)
        assert result["failed"] and message in result["msg"], (args, result["msg"])
    assert layout(lab) == lab_as_before


@pytest.mark.lab
def test_lab_refuses_a_node_that_still_runs_a_job(lab, lab_as_before):
    job = lab.slurm("sbatch", "--parsable", "-w", "gpu-a-002", "--output=/dev/null", "--wrap", "sleep 300").strip()
    job = job.split(";")[0]
    try:
        wait_for("the job running", lambda: "RUNNING" in lab.slurm("squeue", "--noheader", "--format=%T", "-j", job))
        result = node_replace(lab, name="gpu-a-002", provider="lab")
        assert result["failed"] and "node gpu-a-002 still has jobs %s (RUNNING)" % job in result["msg"], result["msg"]
    finally:
        lab.slurm("scancel", job)
    wait_for("the job gone", lambda: not lab.slurm("squeue", "--noheader", "-j", job, check=False).strip())


# ---------------------------------------------------------------- provider command


def test_command_runs_once_with_the_node_name_and_reports_failure(tmp_path):
    out = tmp_path / "replaced.txt"
    script = "import os, sys; open(sys.argv[1], 'a').write(sys.argv[2] + ' ' + os.environ['GPUFLEET_NODE'] + '\\n')"
    args = dict(name="gpu-a-003", provider="command", remediation_id="r-42",
                command=[sys.executable, "-c", script, str(out), "{node}:{remediation_id}:{other}"])

    planned = node_replace(None, check=True, **args)
    assert planned["changed"] and not out.exists()
    assert planned["cmd"][-1] == "gpu-a-003:r-42:{other}" and planned["rc"] is None
    done = node_replace(None, **args)
    assert done["changed"] and done["rc"] == 0 and done["retired"] == "gpu-a-003" and done["replacement"] is None
    assert out.read_text() == "gpu-a-003:r-42:{other} gpu-a-003\n"

    failing = dict(args)
    failing["command"] = [sys.executable, "-c", "import sys; sys.stderr.write('quota exceeded'); sys.exit(3)"]
    failed = node_replace(None, **failing)
    assert failed["failed"] and failed["rc"] == 3
    assert "command exited 3" in failed["msg"] and "quota exceeded" in failed["msg"]
    missing_args = dict(args)
    missing_args["command"] = ["/nonexistent/replace-instance", "{node}"]
    missing = node_replace(None, **missing_args)
    assert missing["failed"] and "command[0]: '/nonexistent/replace-instance' is not an executable" in missing["msg"]
    assert out.read_text() == "gpu-a-003:r-42:{other} gpu-a-003\n"


# ---------------------------------------------------------------- provider clusterapi


def capi_crd_dir() -> Path:
    """config/crd/bases of Cluster API's Go module, from the Go module proxy (cached)."""
    crds = go_module_dir(CAPI_MODULE, CAPI_VERSION) / "config" / "crd" / "bases"
    assert (crds / "cluster.x-k8s.io_machines.yaml").is_file(), crds
    return crds


class Capi:
    """Machines and their Nodes, made the way Cluster API's controllers would make them."""

    def __init__(self, lab) -> None:
        from kubernetes import client

        self.lab = lab
        self.core = lab.kube()
        self.custom = client.CustomObjectsApi(self.core.api_client)
        self.nodes: List[str] = []

    def machine(self, name: str, group: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
        body = {
            "apiVersion": "%s/v1beta2" % CAPI_GROUP,
            "kind": "Machine",
            "metadata": {"name": name, "namespace": CAPI_NAMESPACE,
                         "labels": dict({"cluster.x-k8s.io/cluster-name": CAPI_CLUSTER}, **(group or {}))},
            "spec": {
                "clusterName": CAPI_CLUSTER,
                "bootstrap": {"dataSecretName": "%s-bootstrap" % name},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachine",
                                      "name": name},
            },
        }
        return self.custom.create_namespaced_custom_object(CAPI_GROUP, "v1beta2", CAPI_NAMESPACE, "machines", body)

    def node_for(self, machine: str, node: str, annotate: bool = True) -> None:
        """The Node a machine joins as (kwok makes it Ready), and the Machine's nodeRef to it."""
        annotations = {"kwok.x-k8s.io/node": "fake"}
        if annotate:
            annotations.update({"cluster.x-k8s.io/machine": machine, "cluster.x-k8s.io/cluster-name": CAPI_CLUSTER,
                                "cluster.x-k8s.io/cluster-namespace": CAPI_NAMESPACE})
        self.core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": node, "labels": {"type": "kwok", "kubernetes.io/hostname": node}, "annotations": annotations}})
        self.nodes.append(node)
        self.custom.patch_namespaced_custom_object_status(CAPI_GROUP, "v1beta2", CAPI_NAMESPACE, "machines", machine,
                                                          {"status": {"nodeRef": {"name": node}}})
        wait_for("node %s Ready" % node, lambda: ready(kube_node(self.lab, node)))

    def exists(self, machine: str) -> bool:
        from kubernetes.client.exceptions import ApiException

        try:
            self.custom.get_namespaced_custom_object(CAPI_GROUP, "v1beta2", CAPI_NAMESPACE, "machines", machine)
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise

    def provide_after_delete(self, old_machine: str, new_machine: str, new_node: str, group: Dict[str, str],
                             boot: float = 1.0) -> threading.Thread:
        """The MachineSet controller and the provider: a new Machine, then its Node, once the old one is gone."""
        errors: List[BaseException] = []

        def run() -> None:
            try:
                wait_for("Machine %s deleted" % old_machine, lambda: not self.exists(old_machine), timeout=120)
                self.machine(new_machine, group)
                time.sleep(boot)
                self.node_for(new_machine, new_node)
            except BaseException as exc:  # reported by the test through .errors
                errors.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.errors = errors  # type: ignore[attr-defined]
        thread.start()
        return thread


@pytest.mark.lab
def test_clusterapi_without_cluster_api_says_so(lab):
    if CAPI_GROUP in kubectl(lab, "api-versions").stdout:
        pytest.skip("another test left the Cluster API CRDs installed")
    missing = node_replace(lab, name="gpu-a-001", provider="clusterapi", kubeconfig=str(lab.kubeconfig))
    assert missing["failed"] and "serves no cluster.x-k8s.io group" in missing["msg"], missing["msg"]


@pytest.fixture(scope="module")
def capi(lab):
    crds = capi_crd_dir()
    # Server-side: the CRD is too big for kubectl's last-applied annotation.
    kubectl(lab, "apply", "--server-side", "--force-conflicts", "-f", str(crds / "cluster.x-k8s.io_machines.yaml"))
    # Polled: right after the create the CRD has no status yet, and `kubectl wait` fails on that at once.
    wait_for("the Machine CRD Established", lambda: not unestablished_crds(lab, ["machines.%s" % CAPI_GROUP]))
    kubectl(lab, "create", "namespace", CAPI_NAMESPACE)
    helper = Capi(lab)
    try:
        yield helper
    finally:
        kubectl(lab, "delete", "namespace", CAPI_NAMESPACE, "--ignore-not-found", "--wait=true", "--timeout=120s",
                check=False)
        kubectl(lab, "delete", "crd", "machines.%s" % CAPI_GROUP, "--ignore-not-found", check=False)
        for node in helper.nodes:
            kubectl(lab, "delete", "node", node, "--ignore-not-found", check=False)


@pytest.mark.lab
def test_clusterapi_deletes_the_machine_and_waits_for_the_new_node(lab, capi):
    deployment = {"cluster.x-k8s.io/deployment-name": "gpu-md-0", "cluster.x-k8s.io/set-name": "gpu-md-0-abc"}
    capi.machine("gpu-md-0-old", deployment)
    capi.node_for("gpu-md-0-old", "capi-old")
    # A sibling of the same MachineDeployment, Ready all along: not a new node.
    capi.machine("gpu-md-0-sib", deployment)
    capi.node_for("gpu-md-0-sib", "capi-sibling")
    args = dict(name="capi-old", provider="clusterapi", kubeconfig=str(lab.kubeconfig), wait_timeout=60,
                remediation_id="r-capi-1")

    planned = node_replace(lab, check=True, **args)
    assert planned["changed"] and planned["machine"] == "%s/gpu-md-0-old" % CAPI_NAMESPACE, planned["_output"][-3000:]
    assert planned["actions"][0] == "delete Machine %s/gpu-md-0-old of MachineDeployment %s/gpu-md-0" % (
        CAPI_NAMESPACE, CAPI_NAMESPACE)
    assert capi.exists("gpu-md-0-old") and planned["replacement"] is None

    provider = capi.provide_after_delete("gpu-md-0-old", "gpu-md-0-new", "capi-new", deployment)
    done = node_replace(lab, **args)
    provider.join(timeout=60)
    assert not provider.errors, provider.errors
    assert done["changed"] and done["replacement"] == "capi-new", done["_output"][-3000:]
    assert done["machine"] == "%s/gpu-md-0-old" % CAPI_NAMESPACE and done["retired"] == "capi-old"
    assert not capi.exists("gpu-md-0-old") and capi.exists("gpu-md-0-sib")
    annotations = kube_node(lab, "capi-new")["metadata"]["annotations"]
    assert annotations["gpufleet.io/replaces"] == "capi-old"
    assert annotations["gpufleet.io/remediation-id"] == "r-capi-1"
    assert "gpufleet.io/replaces" not in (kube_node(lab, "capi-sibling")["metadata"].get("annotations") or {})

    for check in (True, False):
        again = node_replace(lab, check=check, **args)
        assert not again["changed"] and again["replacement"] == "capi-new" and again["actions"] == [], again


@pytest.mark.lab
def test_clusterapi_no_new_node_times_out_clearly_and_a_rerun_resumes(lab, capi):
    deployment = {"cluster.x-k8s.io/deployment-name": "gpu-md-1"}
    capi.machine("gpu-md-1-old", deployment)
    # No annotations on this Node: its Machine is found by status.nodeRef.
    capi.node_for("gpu-md-1-old", "capi-lonely", annotate=False)
    args = dict(name="capi-lonely", provider="clusterapi", kubeconfig=str(lab.kubeconfig), wait_timeout=4,
                clusterapi_namespace=CAPI_NAMESPACE)

    late = node_replace(lab, **args)
    assert late["failed"], late["_output"][-3000:]
    assert ("Machine %s/gpu-md-1-old was deleted, but no new Ready node of MachineDeployment %s/gpu-md-1 came "
            "within 4s" % (CAPI_NAMESPACE, CAPI_NAMESPACE)) in late["msg"], late["msg"]
    assert not capi.exists("gpu-md-1-old")
    record = json.loads(kube_node(lab, "capi-lonely")["metadata"]["annotations"]["gpufleet.io/replace-machine"])
    assert record["machine"] == "gpu-md-1-old"

    # The provider catches up; the rerun waits on the record instead of failing for a missing Machine.
    capi.machine("gpu-md-1-new", deployment)
    capi.node_for("gpu-md-1-new", "capi-late")
    resumed_args = dict(args)
    resumed_args["wait_timeout"] = 30
    resumed = node_replace(lab, **resumed_args)
    assert resumed["changed"] and resumed["replacement"] == "capi-late", resumed["_output"][-3000:]
    assert not any(action.startswith("delete Machine") for action in resumed["actions"])


@pytest.mark.lab
def test_clusterapi_refusals_take_no_action(lab, capi):
    capi.machine("standalone")  # no MachineSet: nothing would bring it back
    capi.node_for("standalone", "capi-standalone")
    refused = node_replace(lab, name="capi-standalone", provider="clusterapi", kubeconfig=str(lab.kubeconfig))
    assert refused["failed"] and "belongs to no MachineDeployment or MachineSet" in refused["msg"], refused["msg"]
    assert capi.exists("standalone")
    orphan = node_replace(lab, name="gpu-a-001", provider="clusterapi", kubeconfig=str(lab.kubeconfig),
                          clusterapi_namespace=CAPI_NAMESPACE)
    assert orphan["failed"] and "name: node gpu-a-001 has no Cluster API Machine" in orphan["msg"], orphan["msg"]
    unknown = node_replace(lab, name="no-such-node", provider="clusterapi", kubeconfig=str(lab.kubeconfig))
    assert unknown["failed"] and "name: node no-such-node does not exist" in unknown["msg"], unknown["msg"]
    assert kube_node(lab, "gpu-a-001") is not None
