"""Drive a lab from tests: bring it up with the real playbooks, talk to its Slurm and Kubernetes.

The test lab has its own directory and ports, so it runs beside a lab a developer
brought up with `make lab`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent

# The pytest-xdist worker this process is (`make test` runs two): each has a session lab of its own.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
WORKER_INDEX = int(WORKER[2:]) if WORKER.startswith("gw") else 0
# The environment variable naming the file where the workers write each test's unit of work for the
# controller's scheduler (tests/conftest.py).
XDIST_UNITS_FILE = "GPUFLEET_XDIST_UNITS_FILE"
# Where each worker's ports go: below the ephemeral range (32768-) and apart from `make lab`
# (12379, 16xxx-19xxx) and the molecule scenarios (22xxx-27xxx), the second worker's lab in 14xxx-15xxx.
WORKER_PORT_SHIFTS = (0, -6000)
if len(WORKER_PORT_SHIFTS) <= WORKER_INDEX:
    raise RuntimeError("pytest-xdist worker %s: the integration tests have ports for %d workers at most (-n %d)"
                       % (WORKER, len(WORKER_PORT_SHIFTS), len(WORKER_PORT_SHIFTS)))

# Ports of the test lab: 20xxx-21xxx for the first worker (or a run without xdist).
# GPUFLEET_TEST_LAB_PORT_OFFSET shifts every port (with GPUFLEET_TEST_LAB_DIR, a second test lab
# can run beside the first).
ENV_PORT_OFFSET = int(os.environ.get("GPUFLEET_TEST_LAB_PORT_OFFSET", "0"))
PORT_OFFSET = ENV_PORT_OFFSET + WORKER_PORT_SHIFTS[WORKER_INDEX]


def worker_dir(path: str) -> Path:
    """A session lab's directory, the worker's own: the second worker's gets a ``-gw1`` suffix."""
    return Path(path + ("-%s" % WORKER if WORKER_INDEX else ""))


TEST_LAB_PORTS = {
    "kubernetes_lab_etcd_client_port": 20379,
    "kubernetes_lab_etcd_peer_port": 20380,
    "kubernetes_lab_apiserver_port": 20443,
    "kubernetes_lab_controller_manager_port": 20257,
    "kubernetes_lab_scheduler_port": 20259,
    "kubernetes_lab_kwok_port": 20247,
    "slurm_slurmctld_port": 20817,
    "slurm_slurmd_port_base": 21001,
    "health_agent_lab_port_base": 20400,
    "monitoring_prometheus_port": 20090,
    "monitoring_alertmanager_port": 20093,
    "monitoring_remediation_exporter_port": 20095,
    "self_healing_webhook_port": 20500,
}
TEST_LAB_VARS = {
    **{name: port + PORT_OFFSET for name, port in TEST_LAB_PORTS.items()},
    # Alertmanager sends to the test lab's rulebook.
    "monitoring_alert_webhook_url": "http://127.0.0.1:%d/endpoint"
    % (TEST_LAB_PORTS["self_healing_webhook_port"] + PORT_OFFSET),
    # Self-healing acts on injected faults; the tests that inject them for other reasons must not
    # see their nodes remediated. tests/integration/remediation turns it on where it is tested.
    "self_healing_enabled": False,
    # The agents' fast fence is an acting path too (Slurm DRAIN on a fatal verdict), on by default in
    # the lab: off here for the same reason. Its own tests turn it on (agent/test_agent_resilience.py).
    "health_agent_fast_fence": False,
    # The IB judge's windows, short (defaults 10 s down, 60 s to recover; a drill must see a flap's alert
    # before it clears): tests/integration/agent/test_agent_infiniband.py and test_drills.py wait for both.
    "health_agent_ib_thresholds": {"down_after_s": 3, "recover_after_s": 15},
    # Alerts that wait minutes on a real site fire at once here, so the tests see them.
    "monitoring_alert_for": {"GpuNodeDegraded": "0s", "GpuThermalSlowdown": "0s", "GpuRowRemapPending": "0s"},
    "gpufleet_node_pools": [{
        "name": "gpu-a", "count": 4, "spares": 2, "gpus_per_node": 8, "gpu_product": "NVIDIA-H100-80GB-HBM3",
        "zone": "lab-zone-a", "nodes_per_rack": 2, "racks_per_block": 2, "cpus": 16, "memory_mb": 65536,
    }],
    # GPUFLEET_TEST_SLURM_VERSION=26.05 runs the test lab on Slurm 26.05 (docs/testing.md).
    "slurm_lab_version": os.environ.get("GPUFLEET_TEST_SLURM_VERSION", "22.05"),
}

_RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


@dataclass
class PlaybookResult:
    rc: int
    output: str
    recap: Dict[str, Dict[str, int]] = field(default_factory=dict)

    @property
    def changed(self) -> int:
        return sum(host["changed"] for host in self.recap.values())

    @property
    def failed(self) -> int:
        return sum(host["failed"] for host in self.recap.values())


def run_playbook(args: List[str], env: Dict[str, str], timeout: int = 900) -> PlaybookResult:
    """ansible-playbook ARGS from the repo root; the result with its recap counts."""
    argv = [str(VENV_BIN / "ansible-playbook"), *args]
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    output = done.stdout + done.stderr
    recap = {m.group(1): dict(ok=int(m.group(2)), changed=int(m.group(3)), unreachable=int(m.group(4)),
                              failed=int(m.group(5))) for m in _RECAP.finditer(output)}
    return PlaybookResult(rc=done.returncode, output=output, recap=recap)


def case_hosts(cases: Dict[str, Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """One local host per case, its variables as host variables: several cases in one ansible-playbook
    run, side by side, each stopping at its own first refusal."""
    local = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
    return {case: dict(variables, **local) for case, variables in cases.items()}


def run_cases(args: List[str], env: Dict[str, str], tree: Path, cases: Iterable[str],
              timeout: int = 900) -> Tuple[PlaybookResult, Dict[str, str]]:
    """run_playbook with Ansible's tree callback into ``tree``: the run and, per case (a host of the run),
    its last task result as JSON text (a refusal's message is there), "" for a host that ran none."""
    env = dict(env, ANSIBLE_CALLBACKS_ENABLED="ansible.builtin.tree", ANSIBLE_CALLBACK_TREE_DIR=str(tree))
    result = run_playbook(args, env, timeout)
    return result, {case: (tree / case).read_text() if (tree / case).is_file() else "" for case in cases}


@dataclass
class Lab:
    lab_dir: Path
    extra_vars: dict

    @property
    def slurm_conf(self) -> Path:
        return self.lab_dir / "slurm" / "slurm.conf"

    @property
    def kubeconfig(self) -> Path:
        return self.lab_dir / "kube" / "admin.kubeconfig"

    @property
    def run_dir(self) -> Path:
        return self.lab_dir / "run"

    def env(self) -> Dict[str, str]:
        env = dict(os.environ)
        env.update(
            # The lab's Slurm commands (<lab>/bin/sbatch, ...) run its Slurm, whatever the version.
            PATH=os.pathsep.join([str(VENV_BIN), str(self.lab_dir / "bin"), env.get("PATH", "")]),
            ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
            ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
            ANSIBLE_FORCE_COLOR="0",
            ANSIBLE_NOCOLOR="1",
            SLURM_CONF=str(self.slurm_conf),
            KUBECONFIG=str(self.kubeconfig),
            LC_ALL="C.UTF-8",
        )
        return env

    def playbook(self, name: str, *args: str, extra: Optional[dict] = None, timeout: int = 900) -> PlaybookResult:
        variables = dict(self.extra_vars, gpufleet_lab_dir=str(self.lab_dir))
        variables.update(extra or {})
        argv = [str(REPO / "playbooks" / name), "-e", json.dumps(variables), *args]
        return run_playbook(argv, self.env(), timeout)

    def slurm(self, *argv: str, check: bool = True) -> str:
        done = subprocess.run(list(argv), env=self.env(), capture_output=True, text=True, timeout=60, check=False)
        if check and done.returncode != 0:
            raise AssertionError("%s failed (%d): %s" % (" ".join(argv), done.returncode, done.stderr))
        return done.stdout

    def kube(self):
        from kubernetes import client, config

        return client.CoreV1Api(config.new_client_from_config(config_file=str(self.kubeconfig)))

    def recorded_pids(self) -> Dict[str, int]:
        pids = {}
        for record in sorted(self.run_dir.glob("*.pid")):
            try:
                pids[record.stem] = int(json.loads(record.read_text())["pid"])
            except (ValueError, KeyError, OSError):
                continue
        return pids

    def wait_job(self, job_id: str, timeout: float = 120) -> Dict[str, str]:
        """Poll scontrol until the job ends; return its fields."""
        deadline = time.monotonic() + timeout
        fields: Dict[str, str] = {}
        while time.monotonic() < deadline:
            text = self.slurm("scontrol", "show", "job", "--oneliner", job_id, check=False)
            fields = dict(item.split("=", 1) for item in text.split() if "=" in item)
            if fields.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"):
                return fields
            time.sleep(0.5)
        raise AssertionError("job %s did not finish in %ss: %s" % (job_id, timeout, fields))


def unestablished_crds(lab: "Lab", names: List[str]) -> List[str]:
    """The CRDs among `names` that the API server does not serve yet: no Established=True condition.

    A CRD created an instant ago has no status at all, and `kubectl wait --for=condition=Established`
    fails at once on it (`.status.conditions accessor error: <nil>`) instead of waiting; poll this
    with a deadline instead (e.g. agent_probe.wait_for).
    """
    from kubernetes import client

    api = client.ApiextensionsV1Api(lab.kube().api_client)
    pending = []
    for name in names:
        status = api.read_custom_resource_definition(name).status
        conditions = (status.conditions if status is not None else None) or []
        if not any(c.type == "Established" and c.status == "True" for c in conditions):
            pending.append(name)
    return pending


def descendants_alive(pids: List[int]) -> List[int]:
    """PIDs in the list that still exist (and are not zombies)."""
    alive = []
    for pid in pids:
        try:
            with open("/proc/%d/stat" % pid) as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] != "Z":
                    alive.append(pid)
        except (OSError, IndexError):
            continue
    return alive


def ancestors(pid: int) -> List[int]:
    """``pid`` and its parents, up to init."""
    chain = []
    while pid > 1 and pid not in chain:
        chain.append(pid)
        try:
            pid = int(Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return chain


def lab_processes(lab_dir: Path) -> List[int]:
    """Every live process whose command line, environment or working directory names the lab directory.

    This is a check, not a way to stop anything: it finds what a faulty stop would
    leave behind (a slurmstepd whose slurmd is gone, a daemon whose record was lost).
    """
    # The directory itself or a path in it, never a sibling whose name only starts the same
    # (/var/tmp/gpufleet-pytest-lab-mon is another lab).
    marker = re.compile(re.escape(str(lab_dir)) + r"(?=/|\s|\x00|$)")
    # This process and its ancestors (a `timeout` or shell that started pytest with
    # GPUFLEET_TEST_LAB_DIR in its environment) are not the lab's.
    ours = set(ancestors(os.getpid()))
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in ours:
            continue
        try:
            cmdline = Path("/proc", entry, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(Path("/proc", entry, "cwd"))
            # slurmstepd renames itself ("slurmstepd: [3.batch]") but keeps slurmd's environment.
            environ = Path("/proc", entry, "environ").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if marker.search(cmdline) or marker.search(environ) or marker.match(cwd):
            found.append(int(entry))
    return descendants_alive(found)


@dataclass
class DownUp:
    """A lab taken down with lab-down.yml and brought back with one-click-slurm.yml, and what was
    seen between: the session does it right after its first bring-up (conftest), while the tests
    that need no lab run, and test_lab.py checks what it recorded."""

    pids_before: Dict[str, int]
    down: PlaybookResult
    left: List[int]
    pids_after_down: Dict[str, int]
    up: PlaybookResult
    slurm_states: Dict[str, str]


def down_and_up(lab: "Lab") -> DownUp:
    pids_before = lab.recorded_pids()
    down = lab.playbook("lab-down.yml")
    left, pids_after_down = lab_processes(lab.lab_dir), lab.recorded_pids()
    up = lab.playbook("one-click-slurm.yml")
    states = {}
    if up.rc == 0:
        lines = lab.slurm("sinfo", "--Node", "--noheader", "--format=%N|%T").split()
        states = dict(line.split("|", 1) for line in lines)
    return DownUp(pids_before, down, left, pids_after_down, up, states)


class Background:
    """Long runs that mostly wait on daemons (the molecule scenarios, ansible-test), started when
    the session's collection is done instead of when their tests are reached, so they overlap the
    tests before them.

    A test module opts in with a module-level ``start_in_background(items)`` (the session's
    selected items of that module), which submits its runs here by name; each of its tests then
    waits for its own run with ``result(name)`` and asserts on it, so a failed run still fails
    that test. GPUFLEET_BACKGROUND_JOBS runs at a time (default 1: on two cores a second one
    slows the foreground tests by as much as it gains). ``submit`` of a name already submitted
    returns the same run, so a test run alone (no collection hook) starts its run itself.
    """

    _lock = threading.Lock()
    _pool: Optional[ThreadPoolExecutor] = None
    _runs: Dict[str, Future] = {}
    _closed = False

    @classmethod
    def submit(cls, name: str, work: Callable[[], Any]) -> Future:
        with cls._lock:
            if name not in cls._runs:
                if cls._closed:
                    raise RuntimeError("the session is over: %s not started" % name)
                if cls._pool is None:
                    jobs = max(1, int(os.environ.get("GPUFLEET_BACKGROUND_JOBS", "1")))
                    cls._pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="gpufleet-background")
                cls._runs[name] = cls._pool.submit(work)
            return cls._runs[name]

    @classmethod
    def result(cls, name: str, work: Callable[[], Any]) -> Any:
        return cls.submit(name, work).result()

    @classmethod
    def shutdown(cls) -> None:
        """End of session: drop the runs nobody waited for that have not started; let a started one
        finish (a molecule scenario ends with its own destroy)."""
        with cls._lock:
            pool, cls._pool, cls._closed = cls._pool, None, True
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


CACHE_DIR = Path(os.environ.get("GPUFLEET_CACHE_DIR") or Path.home() / ".cache" / "gpufleet")


def go_module_dir(module: str, version: str) -> Path:
    """The source of a Go module at a version, from the Go module proxy into the cache (for upstream
    CRDs the tests install: the Prometheus Operator's, Cluster API's)."""
    import shutil
    import tempfile

    import pytest

    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(go).exists():
        pytest.fail("go is missing: %s comes from its Go module" % module)
    env = dict(os.environ, GOMODCACHE=str(CACHE_DIR / "go" / "mod"), GOTOOLCHAIN="local", GOFLAGS="-mod=mod")
    with tempfile.TemporaryDirectory() as outside_any_module:
        done = subprocess.run([go, "mod", "download", "-json", "%s@%s" % (module, version)],
                              cwd=outside_any_module, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return Path(json.loads(done.stdout)["Dir"])


def kubectl(lab: "Lab", *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """kubectl (the lab's, from the cache) against the lab's API server as its admin."""
    import shutil

    binary = shutil.which("kubectl", path=str(CACHE_DIR / "bin")) or "kubectl"
    done = subprocess.run([binary, "--kubeconfig", str(lab.kubeconfig), *args], capture_output=True, text=True,
                          timeout=120, check=False)
    if check:
        assert done.returncode == 0, " ".join(args) + ": " + done.stdout + done.stderr
    return done


def namespace_exists(lab: "Lab", name: str) -> bool:
    from kubernetes.client.exceptions import ApiException

    try:
        lab.kube().read_namespace(name)
        return True
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
