"""Run chaos drills in the test lab and look at what they leave: the drill's report, the ledger, and a
snapshot of everything a rollback must put back (labels, taints, conditions, Slurm states, the fake
GPU state, mounts and the files a fault may add)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from lab_harness import REPO, VENV_BIN, Lab, PlaybookResult
from remediation_probe import NAMESPACE, Fleet

from ansible_collections.gpufleet.resilience.plugins.module_utils.health.infiniband import read_ports

OPT_IN = "gpufleet.io/chaos"
LEDGER = "gpufleet-chaos-ledger"


class Drills(Fleet):
    def __init__(self, lab: Lab) -> None:
        super().__init__(lab)

    # -- running -------------------------------------------------------------------------------
    def variables(self, experiment: str, target: str, **extra: Any) -> Dict[str, Any]:
        variables = {"experiment": experiment, "target": target}
        variables.update(extra)
        return variables

    def drill(self, experiment: str, target: str, timeout: int = 900, **extra: Any) -> PlaybookResult:
        return self.lab.playbook("drill.yml", extra=self.variables(experiment, target, **extra), timeout=timeout)

    def start_drill(self, experiment: str, target: str, wrap: Sequence[str] = (), **extra: Any) -> subprocess.Popen:
        """The drill as a process of its own session, so a test can SIGKILL the whole run; ``wrap``
        goes before ansible-playbook (an `unshare` that gives the run a PID namespace of its own)."""
        variables = dict(self.lab.extra_vars, gpufleet_lab_dir=str(self.lab.lab_dir))
        variables.update(self.variables(experiment, target, **extra))
        return subprocess.Popen(
            [*wrap, str(VENV_BIN / "ansible-playbook"), str(REPO / "playbooks" / "drill.yml"), "-e",
             json.dumps(variables)],
            cwd=REPO, env=self.lab.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
        )

    def stop(self, clear: bool = False) -> PlaybookResult:
        return self.lab.playbook("chaos-stop.yml",
                                 extra={"chaos_drill_stop_clear": clear, "chaos_drill_stop_reason": "test"})

    # -- opting in -----------------------------------------------------------------------------
    def opt_in(self, nodes: List[str], allowed: bool = True) -> None:
        api = self.lab.kube()
        for node in nodes:
            api.patch_node(node, {"metadata": {"labels": {OPT_IN: "allowed" if allowed else None}}})

    # -- reading -------------------------------------------------------------------------------
    def ledger(self) -> Dict[str, Any]:
        from kubernetes.client.exceptions import ApiException

        try:
            data = self.lab.kube().read_namespaced_config_map(LEDGER, NAMESPACE).data or {}
        except ApiException as exc:
            if exc.status == 404:
                return {}
            raise
        return {key: json.loads(value) for key, value in data.items()}

    @property
    def checkpoint_volume(self) -> Path:
        """The lab's checkpoint storage: a size-limited tmpfs (role storage) when the lab runs as root."""
        return self.lab.lab_dir / "storage" / "checkpoints"

    @property
    def report_dir(self) -> Path:
        return self.lab.lab_dir / "drills"

    def report(self, result: PlaybookResult) -> Dict[str, Any]:
        """The drill document of the run whose output this is (its summary line names the id)."""
        marker = "drill d-"
        start = result.output.rfind(marker)
        assert start >= 0, result.output[-3000:]
        drill_id = result.output[start + len("drill "):].split()[0]
        return json.loads((self.report_dir / ("drill-%s.json" % drill_id)).read_text())

    def node_snapshot(self, node: str) -> Dict[str, Any]:
        """Everything about ``node`` a rolled-back fault must leave as it found it."""
        api = self.lab.kube()
        found = api.read_node(node)
        condition = next((c for c in found.status.conditions or [] if c.type == "GpuHealthy"), None)
        network = next((c for c in found.status.conditions or [] if c.type == "InfiniBandHealthy"), None)
        gpu_dir = self.lab.lab_dir / "gpus" / node
        return {
            "labels": dict(found.metadata.labels or {}),
            "annotations": {k: v for k, v in (found.metadata.annotations or {}).items()
                            if k.startswith("gpufleet.io/")},
            "taints": sorted((t.key, t.value or "", t.effect) for t in found.spec.taints or []),
            "unschedulable": bool(found.spec.unschedulable),
            "gpu_healthy": (condition.status, condition.reason) if condition else None,
            "ib_healthy": (network.status, network.reason) if network else None,
            # The ports' states; not their counters, which only ever grow (a flap stays counted).
            "ib_ports": {port.name: (port.state, port.phys_state) for port in read_ports(str(gpu_dir / "sys"))},
            "slurm": self.slurm_states().get(node),
            "fake_gpus": {p.name: p.read_text() for p in sorted(gpu_dir.iterdir()) if p.is_file()
                          and p.name != ".lock"},
            "pending_events": sorted(os.listdir(gpu_dir / "events")) if (gpu_dir / "events").is_dir() else [],
            "mounts": lab_mounts(self.lab.lab_dir),
            "checkpoint_files": sorted(p.name for p in self.checkpoint_volume.iterdir())
            if self.checkpoint_volume.is_dir() else [],
            "lab_processes": sorted(self.lab.recorded_pids().items()),
        }


def lab_mounts(lab_dir: Path) -> List[str]:
    """Mount points under the lab directory, with their options (a read-only remount shows here)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4].startswith(str(lab_dir)):
            found.append("%s %s" % (fields[4], fields[5]))
    return sorted(found)


def wait_equal(read, expected: Any, timeout: float = 30.0) -> Optional[Any]:
    """Poll ``read()`` until it equals ``expected``; the last value when it never does (the caller asserts)."""
    import time

    deadline = time.monotonic() + timeout
    current = read()
    while current != expected and time.monotonic() < deadline:
        time.sleep(0.5)
        current = read()
    return current


def screenshot(html: Path, png: Path) -> int:
    """Headless Chromium (the Debian package) renders the page offline; the PNG's size in bytes."""
    import shutil

    browser = shutil.which("chromium") or "/usr/bin/chromium"
    assert os.access(browser, os.X_OK), "chromium is not installed (Makefile DEBS)"
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--disable-dev-shm-usage", "--user-data-dir=%s" % (png.parent / "chromium-profile"),
                           "--window-size=1280,1400", "--screenshot=%s" % png, "file://%s" % html],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and png.is_file(), done.stderr[-2000:]
    return png.stat().st_size
