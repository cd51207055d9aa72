# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The NUMA chaos family: ``numactl --hardware`` parsing (one node, two nodes, four with an uneven
matrix), the far node, the knobs' checks (FieldError naming the field), the load's command line, the
plan's honesty on a one-node machine, the Topology Manager rule, and the process backend on a real
stress-ng (inject -> running -> revert -> gone; a reused pid is left alone).
tests/integration/chaos/test_numa_chaos.py runs the Slurm backend in the lab."""

from __future__ import annotations

import os
import time

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import api, experiments, numa, numa_plan
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.context import FaultContext
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError

ONE_NODE = """\
available: 1 nodes (0)
node 0 cpus: 0 1
node 0 size: 10074 MB
node 0 free: 5869 MB
node distances:
node   0
  0:  10
"""

# A two-socket server (numactl 2.0.16).
TWO_NODES = """\
available: 2 nodes (0-1)
node 0 cpus: 0 1 2 3 4 5 6 7 16 17 18 19 20 21 22 23
node 0 size: 257652 MB
node 0 free: 241210 MB
node 1 cpus: 8 9 10 11 12 13 14 15 24 25 26 27 28 29 30 31
node 1 size: 258036 MB
node 1 free: 250000 MB
node distances:
node   0   1
  0:  10  21
  1:  21  10
"""

# Four nodes (two sockets, sub-NUMA clustering): node 0's farthest are 2 and 3 (tie: the lower, 2);
# node 1's farthest is 3 alone.
FOUR_NODES = """\
available: 4 nodes (0-3)
node 0 cpus: 0 1
node 0 size: 64000 MB
node 0 free: 60000 MB
node 1 cpus: 2 3
node 1 size: 64000 MB
node 1 free: 60000 MB
node 2 cpus: 4 5
node 2 size: 64000 MB
node 2 free: 60000 MB
node 3 cpus: 6 7
node 3 size: 64000 MB
node 3 free: 40000 MB
node distances:
node   0   1   2   3
  0:  10  11  21  21
  1:  11  10  21  22
  2:  21  21  10  11
  3:  21  22  11  10
"""

NODE = "gpu-a-001"
FAULT = "f-20261130-000000-ab12-gpu-a-001"


def spec(experiment="cpu_saturation", **params):
    return {"experiment": experiment, "node": NODE, "fault_id": FAULT, "backend": "default", "params": params,
            "lab_dir": None}


def test_parse_one_node():
    topology = numa_plan.parse_hardware(ONE_NODE)
    assert topology.nodes == (0,)
    assert topology.cpus == {0: (0, 1)}
    assert topology.size_mb == {0: 10074} and topology.free_mb == {0: 5869}
    assert topology.distances == {0: {0: 10}}
    assert numa_plan.far_node(topology, 0) == 0  # nothing is remote on one node


def test_parse_two_nodes_and_the_far_node():
    topology = numa_plan.parse_hardware(TWO_NODES)
    assert topology.nodes == (0, 1)
    assert topology.cpus[1][:3] == (8, 9, 10) and len(topology.cpus[0]) == 16
    assert topology.free_mb == {0: 241210, 1: 250000}
    assert topology.distances == {0: {0: 10, 1: 21}, 1: {0: 21, 1: 10}}
    assert numa_plan.far_node(topology, 0) == 1 and numa_plan.far_node(topology, 1) == 0


def test_far_node_is_the_largest_distance_lowest_on_a_tie():
    topology = numa_plan.parse_hardware(FOUR_NODES)
    assert topology.nodes == (0, 1, 2, 3)
    assert numa_plan.far_node(topology, 0) == 2
    assert numa_plan.far_node(topology, 1) == 3
    assert numa_plan.far_node(topology, 3) == 1


def test_numactl_trailing_blanks_are_fine():
    # numactl pads the distance table with a blank at each line's end; the samples above have none.
    padded = TWO_NODES.replace("   1\n", "   1 \n").replace("21\n", "21 \n").replace("10\n", "10 \n")
    assert padded != TWO_NODES
    assert numa_plan.parse_hardware(padded) == numa_plan.parse_hardware(TWO_NODES)


def test_not_numactl_output_is_an_error():
    with pytest.raises(ValueError, match="available"):
        numa_plan.parse_hardware("No NUMA available on this system\n")


@pytest.mark.parametrize("experiment, params, field", [
    ("cpu_saturation", {"workers": 0}, "params.workers"),
    ("cpu_saturation", {"seconds": 0}, "params.seconds"),
    ("cpu_saturation", {"seconds": 3601}, "params.seconds"),
    ("cpu_saturation", {"load_percent": 101}, "params.load_percent"),
    ("cpu_saturation", {"memory_percent": 10}, "params.memory_percent"),
    ("numa_memory_pressure", {"memory_percent": 96}, "params.memory_percent"),
    ("numa_memory_pressure", {"memory_percent": 0}, "params.memory_percent"),
    ("numa_memory_pressure", {"load_percent": 50}, "params.load_percent"),
    ("numa_memory_pressure", {"far_node": 1}, "params.far_node"),
    ("numa_remote_memory", {"workers": True}, "params.workers"),
    ("numa_remote_memory", {"via": "ssh"}, "params.via"),
    ("numa_remote_memory", {"output": "relative.out"}, "params.output"),
    ("numa_remote_memory", {"bogus": 1}, "params.bogus"),
    ("cpu_saturation", {"topology_manager_policy": "single-numa-node"}, "params.topology_manager_policy"),
    ("cpu_saturation", {"topology_manager_policy": "strict", "allow_kubelet_change": True},
     "params.topology_manager_policy"),
    ("cpu_saturation", {"allow_kubelet_change": "maybe"}, "params.allow_kubelet_change"),
])
def test_bad_knobs_name_their_field(experiment, params, field):
    with pytest.raises(FieldError) as caught:
        numa_plan.check(spec(experiment, **params), lab=True)
    assert caught.value.field == field


def test_bad_target_and_fault_id():
    with pytest.raises(FieldError) as caught:
        numa_plan.check(dict(spec(), node="-w all"), lab=True)
    assert caught.value.field == "target"
    with pytest.raises(FieldError) as caught:
        numa_plan.check(dict(spec(), fault_id="a b"), lab=True)
    assert caught.value.field == "fault_id"


def test_commands_are_bounded_twice_and_bound_to_the_nodes():
    two = numa_plan.parse_hardware(TWO_NODES)
    cpu = numa_plan.check(spec("cpu_saturation", seconds=20, load_percent=80), lab=True)
    assert numa_plan.command(cpu, two) == ["timeout", "--foreground", "-k", "5", "30", "stress-ng", "--cpu", "1",
                                           "--cpu-load", "80", "--timeout", "20s", "--metrics-brief"]
    remote = numa_plan.check(spec("numa_remote_memory", seconds=30, workers=2, memory_percent=10), lab=True)
    # 10% of the far node's 250000 MB free, split between two workers.
    assert numa_plan.command(remote, two) == [
        "timeout", "--foreground", "-k", "5", "40", "numactl", "--cpunodebind=0", "--membind=1", "stress-ng",
        "--vm", "2", "--vm-bytes", "12500M", "--vm-keep", "--timeout", "30s", "--metrics-brief"]
    pressure = numa_plan.check(spec("numa_memory_pressure", near_node=1, memory_percent=50), lab=True)
    assert numa_plan.command(pressure, two)[5:8] == ["numactl", "--cpunodebind=1", "--membind=1"]
    assert "125000M" in numa_plan.command(pressure, two)
    # Without numactl's figures, stress-ng's own share of the machine.
    assert "50%" in numa_plan.command(pressure, None)
    assert cpu.job_name == "gpufleet-chaos-numa-" + FAULT and cpu.minutes == 2


def test_a_node_that_is_not_there_names_its_knob():
    two = numa_plan.parse_hardware(TWO_NODES)
    with pytest.raises(FieldError) as caught:
        numa_plan.placement(numa_plan.check(spec("numa_remote_memory", far_node=7), lab=True), two)
    assert caught.value.field == "params.far_node"
    with pytest.raises(FieldError) as caught:
        numa_plan.placement(numa_plan.check(spec("numa_memory_pressure", near_node=2), lab=True), two)
    assert caught.value.field == "params.near_node"


def test_one_node_remote_memory_is_marked_simulated():
    one = numa_plan.parse_hardware(ONE_NODE)
    where = numa_plan.placement(numa_plan.check(spec("numa_remote_memory"), lab=True), one)
    assert where["cpu_node"] == 0 and where["mem_node"] == 0
    assert where["simulated"] == ["one NUMA node: membind to node 0, the local node; the drill runs the load but "
                                  "cannot make memory remote"]
    two = numa_plan.parse_hardware(TWO_NODES)
    assert numa_plan.placement(numa_plan.check(spec("numa_remote_memory"), lab=True), two)["simulated"] == []


def test_plan_on_this_machine(monkeypatch):
    monkeypatch.setattr(numa, "read_topology", lambda: numa_plan.parse_hardware(ONE_NODE))
    plan = numa.plan(dict(spec("numa_remote_memory", seconds=20), lab_dir="/lab"))
    assert plan["missing"] == [] and plan["backends"] == ["slurm"]
    assert "cannot make memory remote" in plan["simulated"][0]
    text = "\n".join(plan["actions"])
    assert "sbatch -w gpu-a-001 --time=2 --job-name=gpufleet-chaos-numa-%s" % FAULT in text
    assert "numactl --cpunodebind=0 --membind=0 stress-ng --vm 1" in text
    assert "bounded by stress-ng --timeout 20s and timeout --foreground -k 5 30" in text
    assert "gpu-a-001: simulated: one NUMA node: membind to node 0" in text


def test_topology_manager_change_is_refused_as_missing(monkeypatch, tmp_path):
    monkeypatch.setattr(numa, "read_topology", lambda: numa_plan.parse_hardware(ONE_NODE))
    monkeypatch.setattr(numa_plan, "KUBELET_CONFIG", str(tmp_path / "no-kubelet" / "config.yaml"))
    knobs = {"topology_manager_policy": "single-numa-node", "allow_kubelet_change": True}
    lab = numa.plan(dict(spec("cpu_saturation", **knobs), lab_dir="/lab"))
    assert lab["missing"] == ["topology_manager_policy: no kubelet in the lab (kwok)"]
    site = numa.plan(spec("cpu_saturation", **knobs))
    assert site["missing"][0].startswith("kubelet_config: ") and "does not exist" in site["missing"][0]
    with pytest.raises(FieldError) as caught:
        numa.inject(spec("cpu_saturation", **knobs), FaultContext.of(lab_dir="/lab"))
    assert caught.value.field == "params.topology_manager_policy"
    with pytest.raises(FieldError) as caught:
        numa.inject(spec("cpu_saturation", **knobs), FaultContext())
    assert caught.value.field == "params.kubelet_config"


def test_the_registry_and_the_dispatch():
    for name in numa_plan.EXPERIMENTS:
        experiment = experiments.get(name)
        assert experiment.family == "numa" and api.family_module("numa") is numa
        assert experiment.detection is None and "node_pressure" in experiment.missing_alert_hint
        numa_plan.check(dict(spec(name), params=dict(experiment.params)), lab=True)


def test_process_backend_runs_stress_ng_and_revert_kills_it(tmp_path):
    ctx = FaultContext.of(lab_dir=str(tmp_path))
    started = numa.inject(spec("cpu_saturation", via="process", seconds=30, load_percent=5,
                               output=str(tmp_path / "load.out")), ctx)
    pid = started["pid"]
    try:
        assert started["start_time"] == numa.start_time(pid)
        assert os.path.exists(started["state_file"])
        time.sleep(0.5)
        with open("/proc/%d/cmdline" % pid) as handle:
            assert handle.read().split("\0")[:2] == ["timeout", "--foreground"]
        # After a crash the ledger has only the spec: the state file finds the process.
        done = numa.revert(dict(spec("cpu_saturation", via="process")), ctx)
        assert done["already"] is False and "killed the load's process group %d" % pid in done["reverted"][0]
        assert numa.start_time(pid) is None or numa._zombie(pid)
        assert not os.path.exists(started["state_file"])
        assert numa.revert(started, ctx) == {"reverted": [], "already": True}  # idempotent
    finally:
        if numa.start_time(pid) == started["start_time"]:
            os.killpg(pid, 9)


def test_a_reused_pid_is_left_alone(tmp_path):
    mine = os.getpid()
    undo = {"via": "process", "pid": mine, "start_time": "1", "state_file": str(tmp_path / "x.json"), "command": []}
    assert numa.revert(undo, FaultContext.of(lab_dir=str(tmp_path))) == {"reverted": [], "already": True}


def test_remote_memory_command_really_runs_bound_and_ends_on_its_own(tmp_path):
    """The real numactl + stress-ng line (1% of the node's free memory, 2 s): it runs, stress-ng ends
    it by itself, and the rollback then has nothing to kill."""
    out = tmp_path / "load.out"
    ctx = FaultContext.of(lab_dir=str(tmp_path))
    started = numa.inject(spec("numa_remote_memory", via="process", seconds=2, memory_percent=1, output=str(out)),
                          ctx)
    assert "numactl" in started["command"] and any(w.startswith("--membind=") for w in started["command"])
    deadline = time.time() + 20
    while numa.start_time(started["pid"]) == started["start_time"] and not numa._zombie(started["pid"]):
        assert time.time() < deadline, "the load outlived its bound"
        time.sleep(0.2)
    os.waitpid(started["pid"], 0)
    assert "successful run completed" in out.read_text(), out.read_text()[-2000:]
    assert numa.revert(started, ctx) == {"reverted": [], "already": True}


# -- the kubelet's Topology Manager (a KubeletConfiguration file in tmp_path; no kubelet here) -----------
KUBELET_WITH_COMMENTS = b"""\
# managed by hand: keep this comment
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd   # trailing comment
cpuManagerPolicy: static
"""
KUBELET_WITH_POLICY = KUBELET_WITH_COMMENTS + b"topologyManagerPolicy: best-effort\ntopologyManagerScope: container\n"


def _kubelet(tmp_path, content=KUBELET_WITH_COMMENTS, mode=0o640):
    config = tmp_path / "kubelet" / "config.yaml"
    config.parent.mkdir()
    config.write_bytes(content)
    os.chmod(config, mode)
    log = tmp_path / "restarts.log"
    script = tmp_path / "restart-kubelet.sh"
    script.write_text("#!/bin/sh\necho \"restart $*\" >> %s\n" % log)
    os.chmod(script, 0o755)
    return config, log, [str(script), "kubelet"]


def _kubelet_spec(config, restart, experiment="cpu_saturation", **extra):
    knobs = {"topology_manager_policy": "single-numa-node", "allow_kubelet_change": True,
             "kubelet_config": str(config), "kubelet_restart": restart, "via": "process", "seconds": 30,
             "output": "/dev/null"}
    if experiment == "cpu_saturation":
        knobs["load_percent"] = 5
    else:
        knobs["memory_percent"] = 1
    knobs.update(extra)
    return dict(spec(experiment, **knobs), lab_dir=str(config.parent.parent))


def _stop(started):
    pid = started.get("pid")
    if pid and numa.start_time(pid) == started["start_time"]:
        os.killpg(pid, 9)


@pytest.mark.parametrize("params,field", [
    ({"topology_manager_policy": "strict", "allow_kubelet_change": True}, "params.topology_manager_policy"),
    ({"topology_manager_policy": "single-numa-node"}, "params.topology_manager_policy"),
    ({"topology_manager_policy": "none", "allow_kubelet_change": True, "topology_manager_scope": "node"},
     "params.topology_manager_scope"),
    ({"topology_manager_policy": "none", "allow_kubelet_change": True, "kubelet_config": "relative.yaml"},
     "params.kubelet_config"),
    ({"topology_manager_policy": "none", "allow_kubelet_change": True, "kubelet_restart": "systemctl restart kubelet"},
     "params.kubelet_restart"),
    ({"topology_manager_policy": "none", "allow_kubelet_change": True, "kubelet_restart": []},
     "params.kubelet_restart"),
    ({"topology_manager_policy": "none", "allow_kubelet_change": True, "kubelet_restart": ["systemctl", ""]},
     "params.kubelet_restart"),
    ({"kubelet_config": "/var/lib/kubelet/config.yaml"}, "params.kubelet_config"),
    ({"topology_manager_scope": "pod"}, "params.topology_manager_scope"),
])
def test_kubelet_knobs_name_their_field(params, field):
    with pytest.raises(FieldError) as caught:
        numa_plan.check(spec("cpu_saturation", **params), lab=False)
    assert caught.value.field == field


@pytest.mark.parametrize("content", [b"kind: Pod\napiVersion: v1\n", b"- a list\n", b"kind: [unclosed\n"])
def test_a_file_that_is_not_a_kubelet_configuration_is_refused(tmp_path, content):
    config, log, restart = _kubelet(tmp_path, content)
    with pytest.raises(FieldError) as caught:
        numa.inject(_kubelet_spec(config, restart), FaultContext.of(lab_dir=str(tmp_path)))
    assert caught.value.field == "params.kubelet_config"
    assert config.read_bytes() == content and not log.exists()
    assert "kubelet_config: " in numa.plan(_kubelet_spec(config, restart))["missing"][0]


def test_a_missing_kubelet_config_is_refused(tmp_path):
    config, log, restart = _kubelet(tmp_path)
    config.unlink()
    with pytest.raises(FieldError) as caught:
        numa.inject(_kubelet_spec(config, restart), FaultContext.of(lab_dir=str(tmp_path)))
    assert caught.value.field == "params.kubelet_config" and "does not exist" in caught.value.message
    assert not log.exists()


@pytest.mark.parametrize("before", [KUBELET_WITH_COMMENTS, KUBELET_WITH_POLICY])
def test_inject_sets_the_policy_restarts_and_revert_restores_byte_for_byte(tmp_path, before):
    import yaml

    config, log, restart = _kubelet(tmp_path, before)
    info = os.stat(config)
    the_spec = _kubelet_spec(config, restart, topology_manager_scope="pod")
    plan = numa.plan(the_spec)
    assert plan["missing"] == []
    assert any("topologyManagerPolicy: single-numa-node and topologyManagerScope: pod in %s" % config in a
               for a in plan["actions"])
    started = numa.inject(the_spec, FaultContext.of(lab_dir=str(tmp_path)))
    try:
        doc = yaml.safe_load(config.read_bytes())
        assert doc["topologyManagerPolicy"] == "single-numa-node" and doc["topologyManagerScope"] == "pod"
        assert doc["kind"] == "KubeletConfiguration" and doc["cpuManagerPolicy"] == "static"
        assert os.stat(config).st_mode & 0o7777 == 0o640
        assert log.read_text() == "restart kubelet\n"
        kubelet = started["kubelet"]
        assert os.path.exists(kubelet["sidecar"]) and kubelet["previous"]["existed"]
        assert started["pid"]  # the load runs too
        done = numa.revert(dict(the_spec, **started), FaultContext.of(lab_dir=str(tmp_path)))
    finally:
        _stop(started)
    assert config.read_bytes() == before
    assert os.stat(config).st_mode & 0o7777 == 0o640 and os.stat(config).st_uid == info.st_uid
    assert log.read_text() == "restart kubelet\nrestart kubelet\n"
    assert not os.path.exists(started["kubelet"]["sidecar"])
    assert done["already"] is False
    assert any(line.startswith("restored %s" % config) and "MISMATCH" not in line for line in done["reverted"])
    assert any(line.startswith("restarted the kubelet: ") for line in done["reverted"])
    # Idempotent: the file is back and the sidecar gone, so no second restart.
    again = numa.revert(dict(the_spec, **started), FaultContext.of(lab_dir=str(tmp_path)))
    assert again == {"reverted": [], "already": True}
    assert log.read_text() == "restart kubelet\nrestart kubelet\n"


@pytest.mark.parametrize("experiment", numa_plan.EXPERIMENTS)
def test_the_kubelet_change_goes_with_each_experiment(tmp_path, monkeypatch, experiment):
    monkeypatch.setattr(numa, "read_topology", lambda: numa_plan.parse_hardware(ONE_NODE))
    config, log, restart = _kubelet(tmp_path)
    the_spec = _kubelet_spec(config, restart, experiment)
    assert numa.plan(the_spec)["missing"] == [] or not numa.shutil.which("numactl")
    monkeypatch.setattr(numa, "_inject_process", lambda load, argv, ctx: {"via": "process", "command": argv})
    monkeypatch.setattr(numa, "_revert_process", lambda undo, ctx: {"reverted": [], "already": True})
    monkeypatch.setattr(numa, "_missing", lambda load, lab, topology: [])
    started = numa.inject(the_spec, FaultContext.of(lab_dir=str(tmp_path)))
    assert b"single-numa-node" in config.read_bytes() and started["command"]
    done = numa.revert(dict(the_spec, **started), FaultContext.of(lab_dir=str(tmp_path)))
    assert config.read_bytes() == KUBELET_WITH_COMMENTS and done["already"] is False
    assert log.read_text().count("restart") == 2


def test_check_mode_writes_nothing(tmp_path):
    config, log, restart = _kubelet(tmp_path)
    the_spec = _kubelet_spec(config, restart)
    ctx = FaultContext.of(lab_dir=str(tmp_path), check_mode=True)
    started = numa.inject(the_spec, ctx)
    assert started["kubelet"]["ran"] is False and started["ran"] is False
    assert config.read_bytes() == KUBELET_WITH_COMMENTS and not log.exists()
    assert not os.path.exists(started["kubelet"]["sidecar"])
    assert numa.revert(dict(the_spec, **started), ctx) == {"reverted": [], "already": True}
    assert config.read_bytes() == KUBELET_WITH_COMMENTS and not log.exists()


def test_a_crash_mid_inject_is_reverted_from_the_sidecar(tmp_path, monkeypatch):
    """The controller dies after the kubelet change, before the ledger has the undo: the ledger
    holds the spec alone, and the sidecar beside the file has the pre-drill bytes."""
    config, log, restart = _kubelet(tmp_path, KUBELET_WITH_POLICY)
    the_spec = _kubelet_spec(config, restart)

    def crash(load, argv, ctx):
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(numa, "_inject_process", crash)
    monkeypatch.setattr(numa, "_revert_kubelet", lambda record, ctx: [])  # the dying controller does nothing
    with pytest.raises(KeyboardInterrupt):
        numa.inject(the_spec, FaultContext.of(lab_dir=str(tmp_path)))
    monkeypatch.undo()
    assert b"topologyManagerPolicy: single-numa-node" in config.read_bytes()
    sidecars = [p for p in config.parent.iterdir() if p.name.startswith(".config.yaml.gpufleet-chaos-")]
    assert len(sidecars) == 1
    done = numa.revert(dict(the_spec), FaultContext.of(lab_dir=str(tmp_path)))
    assert config.read_bytes() == KUBELET_WITH_POLICY
    assert not sidecars[0].exists()
    assert log.read_text() == "restart kubelet\nrestart kubelet\n"
    assert any(line.startswith("restored %s" % config) for line in done["reverted"])
    assert numa.revert(dict(the_spec), FaultContext.of(lab_dir=str(tmp_path))) == {"reverted": [], "already": True}


def test_no_sidecar_means_nothing_was_changed(tmp_path):
    config, log, restart = _kubelet(tmp_path)
    the_spec = _kubelet_spec(config, restart)
    assert numa.revert(dict(the_spec), FaultContext.of(lab_dir=str(tmp_path))) == {"reverted": [], "already": True}
    assert config.read_bytes() == KUBELET_WITH_COMMENTS and not log.exists()


def test_a_failed_restart_puts_the_file_back(tmp_path):
    config, log, _restart = _kubelet(tmp_path)
    failing = tmp_path / "fail.sh"
    failing.write_text("#!/bin/sh\necho nope >&2\nexit 3\n")
    os.chmod(failing, 0o755)
    with pytest.raises(numa.GpufleetError) as caught:
        numa.inject(_kubelet_spec(config, [str(failing)]), FaultContext.of(lab_dir=str(tmp_path)))
    assert "rc 3" in str(caught.value)
    assert config.read_bytes() == KUBELET_WITH_COMMENTS and not log.exists()
