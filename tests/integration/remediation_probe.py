"""Drive and watch remediations in the test lab: run the playbook, read Slurm, Kubernetes, the state
ConfigMaps and the audit log, submit train_sim, and put the lab back as it was after each test."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from agent_probe import AgentProbe, alertmanager_url, wait_for
from lab_harness import REPO, VENV_BIN, Lab, PlaybookResult

from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.nodes import NodeWriter
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.quarantine import quarantine_node
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.remediation_objects import progress_name
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab.spares import read_replacement_record
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.api import reset_breaker
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.connect import slurm_client
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.fence import apply_node_state

NAMESPACE = "gpufleet-system"
POOL = "gpu-a"


class Fleet:
    def __init__(self, lab: Lab) -> None:
        self.lab = lab

    # -- running things ------------------------------------------------------------------------
    def remediate(self, node: str, timeout: int = 600, **extra: Any) -> PlaybookResult:
        variables = {"remediation_node": node, "remediation_grace": 30, "remediation_drain_timeout": 20}
        variables.update(extra)
        return self.lab.playbook("remediate-node.yml", extra=variables, timeout=timeout)

    def start_remediation(self, node: str, **extra: Any) -> subprocess.Popen:
        """The playbook as a process of its own session (so a test can SIGKILL the whole run)."""
        variables = dict(
            self.lab.extra_vars,
            gpufleet_lab_dir=str(self.lab.lab_dir),
            remediation_node=node,
            remediation_grace=30,
            remediation_drain_timeout=20,
        )
        variables.update(extra)
        argv = [
            str(VENV_BIN / "ansible-playbook"),
            str(REPO / "playbooks" / "remediate-node.yml"),
            "-e",
            json.dumps(variables),
        ]
        return subprocess.Popen(
            argv,
            cwd=REPO,
            env=self.lab.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )

    def kill(self, process: subprocess.Popen) -> None:
        """SIGKILL the run and every process under it - Ansible's workers and the module in flight
        run in sessions of their own, so a process group is not enough - but not the lab daemons a
        module started (they have PID records in the lab's run directory)."""
        children: Dict[int, List[int]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    parent = int(Path("/proc", entry, "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children.setdefault(parent, []).append(int(entry))
        daemons = set(self.lab.recorded_pids().values())
        doomed, todo = [], [process.pid]
        while todo:
            pid = todo.pop()
            if pid in daemons:
                continue
            doomed.append(pid)
            todo.extend(children.get(pid, []))
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.wait(timeout=30)

    def module(self, name: str, args: Dict[str, Any], check: bool = True) -> Dict[str, Any]:
        """One module run through ansible (ad hoc), its JSON result."""
        env = dict(self.lab.env(), ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json")
        done = subprocess.run(
            [str(VENV_BIN / "ansible"), "localhost", "-m", "gpufleet.resilience.%s" % name, "-a", json.dumps(args)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        result = json.loads(done.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
        if check and result.get("failed"):
            raise AssertionError("%s failed: %s" % (name, result.get("msg")))
        return result

    # -- reading -------------------------------------------------------------------------------
    def slurm_node(self, node: str) -> Dict[str, str]:
        text = self.lab.slurm("scontrol", "--future", "--oneliner", "show", "node", node)
        fields: Dict[str, str] = {}
        for item in text.strip().split(" "):
            if "=" in item:
                key, value = item.split("=", 1)
                fields[key] = value
        # Reason=... runs to the end of the line and has spaces.
        if "Reason=" in text:
            fields["Reason"] = text.split("Reason=", 1)[1].strip()
        return fields

    def slurm_states(self) -> Dict[str, str]:
        out = self.lab.slurm("sinfo", "--noheader", "--Node", "--format=%N|%T|%E")
        states = {}
        for line in out.splitlines():
            name, state, reason = line.split("|", 2)
            states[name] = "%s|%s" % (state, reason)
        return states

    def kube_node(self, node: str) -> Optional[Dict[str, Any]]:
        from kubernetes.client.exceptions import ApiException

        api = self.lab.kube()
        try:
            return api.api_client.sanitize_for_serialization(api.read_node(node))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def active_nodes(self) -> List[str]:
        api = self.lab.kube()
        return sorted(node.metadata.name for node in api.list_node(label_selector="gpufleet.io/pool=%s" % POOL).items)

    def snapshot(self) -> Dict[str, Any]:
        """What a dry run must not change: nodes, taints, cordons, labels, Slurm states, state ConfigMaps."""
        api = self.lab.kube()
        nodes = {}
        for node in api.list_node().items:
            nodes[node.metadata.name] = {
                "unschedulable": bool(node.spec.unschedulable),
                "taints": sorted((t.key, t.effect) for t in node.spec.taints or []),
                "labels": dict(node.metadata.labels or {}),
                "annotation": (node.metadata.annotations or {}).get("gpufleet.io/remediation"),
            }
        maps = {
            cm.metadata.name: cm.data
            for cm in api.list_namespaced_config_map(NAMESPACE).items
            if cm.metadata.name.startswith("gpufleet-remediation")
        }
        return {"nodes": nodes, "slurm": self.slurm_states(), "configmaps": maps}

    @property
    def audit_log(self) -> Path:
        return self.lab.lab_dir / "remediation" / "audit.jsonl"

    def audit(self, node: Optional[str] = None) -> List[Dict[str, Any]]:
        if not self.audit_log.exists():
            return []
        records = [json.loads(line) for line in self.audit_log.read_text().splitlines() if line.strip()]
        return [r for r in records if node is None or r["node"] == node]

    def progress(self, node: str) -> Optional[Dict[str, Any]]:
        from kubernetes.client.exceptions import ApiException

        try:
            cm = self.lab.kube().read_namespaced_config_map(progress_name(node), NAMESPACE)
        except ApiException:
            return None
        return json.loads(cm.data["progress"])

    # -- jobs ----------------------------------------------------------------------------------
    def submit_train_sim(self, workdir: Path, steps: int = 100000, every: int = 20,
                         checkpoint_dir: Optional[Path] = None, extra: tuple = ()) -> tuple:
        """(job id, node it runs on). Not pinned with -w: a pinned job would wait for its node after a requeue.
        Output in ``workdir``/train.out; checkpoints in ``checkpoint_dir`` (default ``workdir``/ckpt)."""
        workdir.mkdir(parents=True, exist_ok=True)
        os.chmod(workdir, 0o777)
        out = workdir / "train.out"
        # Only the pool with spares (an earlier test may have added one without): --exclude, not -w,
        # which would pin the requeued job to its node.
        others = [n for n in self.slurm_states() if not n.startswith(POOL + "-")]
        job = self.lab.slurm(
            "sbatch",
            "--parsable",
            "--requeue",
            "--open-mode=append",
            "--gres=gpu:1",
            *(["--exclude=%s" % ",".join(others)] if others else []),
            "--output=%s" % out,
            str(self.lab.lab_dir / "bin" / "train_sim"),
            "--checkpoint-dir",
            str(checkpoint_dir or workdir / "ckpt"),
            "--steps",
            str(steps),
            "--checkpoint-every",
            str(every),
            "--step-seconds",
            "0.02",
            *extra,
        ).strip()
        wait_for(
            lambda: self.job(job).get("JobState") == "RUNNING" and "step=" in self.output(workdir),
            60,
            what="train_sim job %s running" % job,
        )
        return job, self.job(job)["BatchHost"]

    def job(self, job_id: str) -> Dict[str, str]:
        text = self.lab.slurm("scontrol", "show", "job", "--oneliner", job_id, check=False)
        return dict(item.split("=", 1) for item in text.split() if "=" in item)

    @staticmethod
    def output(workdir: Path) -> str:
        out = workdir / "train.out"
        return out.read_text() if out.exists() else ""

    def cancel(self, job_id: str) -> None:
        self.lab.slurm("scancel", job_id, check=False)

    # -- putting the lab back --------------------------------------------------------------------
    def heal(self, node: str) -> None:
        """A node as before a test: GPUs healthy, agent history forgotten, uncordoned, no remediation
        record on it, Slurm IDLE."""
        if self.kube_node(node) is None:
            return
        AgentProbe(self.lab, node).reset()
        # node_quarantine's and slurm_node's own functions, in this process (each module has its
        # own tests): two ad-hoc ansible runs cost about 3 s per heal.
        api = self.lab.kube()
        quarantine_node(NodeWriter(api), node, "absent")
        # The progress annotation too: a run a test left open (a refused claim) would show as under way.
        api.patch_node(
            node, {"metadata": {"labels": {"gpufleet.io/remediation-hold": None, "gpufleet.io/remediation": None},
                                "annotations": {"gpufleet.io/remediation": None}}}
        )
        apply_node_state(slurm_client({"slurm_conf": str(self.lab.slurm_conf)}), node, "resume", force=True)

    def restore(self, node: str) -> Dict[str, Any]:
        """Bring a replaced node back and retire its replacement (node_replace's rollback). A replacement
        takes work once admitted, and node_replace rightly refuses to retire a node with jobs: a job a
        test requeued (or an earlier one) may have started there. So the replacement is drained (no new
        job lands there; retiring it clears the drain) and its jobs are requeued, or cancelled when Slurm
        will not requeue them, and waited out."""
        spare = (read_replacement_record(str(self.lab.lab_dir), node) or {}).get("replacement")
        jobs = self.lab.slurm("squeue", "--noheader", "--nodelist", spare, "--format=%i", check=False).split() \
            if spare else []
        if jobs:
            self.lab.slurm("scontrol", "update", "NodeName=" + spare, "State=DRAIN", "Reason=test: restoring " + node)
            for job_id in jobs:
                try:
                    self.lab.slurm("scontrol", "requeue", job_id)
                except AssertionError:
                    self.lab.slurm("scancel", job_id, check=False)
            wait_until(lambda: not self.lab.slurm("squeue", "--noheader", "--nodelist", spare, "--states=RUNNING",
                                                  "--format=%i", check=False).split(), 60,
                       "the jobs of %s gone" % spare)
        return self.module(
            "node_replace",
            {
                "name": node,
                "provider": "lab",
                "state": "restored",
                "lab_dir": str(self.lab.lab_dir),
                "kubeconfig": str(self.lab.kubeconfig),
                "slurm_conf": str(self.lab.slurm_conf),
            },
        )

    def reset_state(self) -> None:
        # What remediation-reset.yml's breaker task does (clear_slots, clear_history, take_up false),
        # through the same function in this process: a playbook per test, before and after, cost
        # about 5 s of each remediation test. The playbook itself has tests of its own (the storm).
        reset_breaker({"kubeconfig": str(self.lab.kubeconfig), "namespace": NAMESPACE, "clear_slots": True,
                       "clear_history": True, "alertmanager_url": alertmanager_url()}, False)
        api = self.lab.kube()
        for cm in api.list_namespaced_config_map(NAMESPACE).items:
            name = cm.metadata.name
            # The breaker goes too: its refused list outlives a reset by design, and a test starts clean.
            if name.startswith("gpufleet-remediation-") and name != "gpufleet-remediation-history":
                api.delete_namespaced_config_map(name, NAMESPACE)


def wait_until(predicate, timeout: float = 60.0, what: str = "") -> Any:
    return wait_for(predicate, timeout, 0.2, what)


def now() -> float:
    return time.time()
