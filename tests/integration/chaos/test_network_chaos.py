# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The network family for real, through the drill playbook: net_degrade builds its own two network
namespaces and veth pair, limits the rate with tbf, drops packets with nftables, counts the veth's
packets with bpftrace, and measures TCP throughput across it before and during the fault; the
rollback leaves the machine as it found it (namespaces, links, qdiscs, nft rules, no bpftrace). A
controller killed mid-drill leaves all that to playbooks/chaos-stop.yml, which removes it.

The drills run against a ledger file of their own (the bare-metal mode: no Kubernetes, the target
opted in by name), so neither the shared test lab nor its kill switch is touched. Needs root (netns,
tc, nft, bpftrace); CI runs as root, so without it these tests fail; they never skip.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest
from lab_harness import REPO, VENV_BIN

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import ebpf, ledger, network
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.context import FaultContext

pytestmark = [pytest.mark.integration]

NODE = "netlab-1"
RATE_MBIT = 10
LOSS_PERCENT = 5


def run(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30).stdout


def observers() -> List[int]:
    """PIDs of every bpftrace running one of the family's programs (/run/gpufleet-chaos/*.bt)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path("/proc/%s/cmdline" % pid).read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "bpftrace" in cmdline and ebpf.STATE_DIR in cmdline:
            found.append(int(pid))
    return found


def ours(name: str) -> bool:
    return name.startswith("gpf-") or name.startswith("gpufleet_chaos_")


def snapshot() -> Dict[str, Any]:
    """What a rollback must put back: namespaces, the host's links, the qdiscs of every namespace the
    drill may make (named by the family), the host's nft ruleset, and running observers."""
    netns = sorted(run("ip", "netns", "list").split())
    links = sorted((link["ifname"], link.get("operstate")) for link in json.loads(run("ip", "-j", "link")))
    qdiscs = {ns: json.loads(run("tc", "-n", ns, "-j", "qdisc", "show") or "[]") for ns in netns if ours(ns)}
    return {"netns": netns, "links": links, "qdiscs": qdiscs, "nft": json.loads(run("nft", "-j", "list", "ruleset")),
            "observers": observers(), "state_files": sorted(os.listdir(ebpf.STATE_DIR))
            if os.path.isdir(ebpf.STATE_DIR) else []}


@pytest.fixture
def drill_env(tmp_path):
    env = dict(os.environ)
    for name in ("KUBECONFIG", "SLURM_CONF", "KUBERNETES_SERVICE_HOST"):
        env.pop(name, None)
    env.update(PATH=str(VENV_BIN) + os.pathsep + env.get("PATH", ""), ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), ANSIBLE_NOCOLOR="1", LC_ALL="C.UTF-8")
    variables = {
        "target": NODE, "chaos_drill_allowed_nodes": [NODE], "chaos_drill_kubeconfig": "",
        "chaos_drill_ledger_file": str(tmp_path / "ledger.json"), "chaos_drill_lab_dir": str(tmp_path),
        "chaos_drill_slurm_conf": "", "chaos_drill_prometheus_url": "", "chaos_drill_alertmanager_url": "",
        "chaos_drill_report_dir": str(tmp_path / "drills"), "chaos_drill_verify_timeout": 5, "duration": 120,
        "chaos_drill_deadlines": {"detected": 1, "alerted": 1, "scheduler": 1, "recovered": 1},
        "params": {"rate_mbit": RATE_MBIT, "loss_percent": LOSS_PERCENT, "delay_ms": 50, "measure_s": 1.0},
    }
    return env, variables, tmp_path


def playbook(env, name: str, variables: Dict[str, Any], **popen: Any) -> subprocess.Popen:
    return subprocess.Popen([str(VENV_BIN / "ansible-playbook"), str(REPO / "playbooks" / name),
                             "-e", json.dumps(variables)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **popen)


def active_fault(ledger_file: Path) -> Dict[str, Any]:
    data, _version = ledger.FileStore(str(ledger_file)).read()
    return next((f for f in ledger.faults(data).values() if f.get("state") == "active"), {})


def wait_active(proc: subprocess.Popen, ledger_file: Path, timeout: float = 60) -> Dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fault = active_fault(ledger_file)
        if fault or proc.poll() is not None:
            return fault
        time.sleep(0.1)
    return {}


def test_drill_degrades_observes_and_restores(drill_env):
    env, variables, tmp = drill_env
    before = snapshot()
    assert not before["observers"], "a bpftrace observer of the family is running before the test"
    started = time.monotonic()
    proc = playbook(env, "drills/net_degrade.yml", variables)
    fault = wait_active(proc, tmp / "ledger.json")
    assert fault, "the fault never showed active in the ledger: %s" % (proc.communicate()[0][-3000:])
    output, _err = proc.communicate(timeout=120)
    took = time.monotonic() - started
    assert proc.returncode == 0, output[-4000:]

    report = json.loads(next((tmp / "drills").glob("drill-*.json")).read_text())
    (row,) = report["faults"]
    seen = row["observed"]
    print("\nNET_DEGRADE drill %.1fs: throughput %s Mbit/s, nft drops %s, eBPF %s, not injected %s" % (
        took, seen["throughput_mbit"], seen["nft_dropped"], seen["ebpf"], report["not_injected"]))
    assert row["rollback"] == "done"
    # The rate limit shows: far below the unlimited path, at most a little above the limit.
    assert seen["throughput_mbit"]["before_mbit"] > 5 * RATE_MBIT
    assert 0 < seen["throughput_mbit"]["during_mbit"] < 1.5 * RATE_MBIT
    assert seen["nft_dropped"]["packets"] > 0
    assert seen["ebpf"]["tx_packets"] > 0 and seen["ebpf"]["tx_bytes"] > 0 and seen["ebpf"]["rx_packets"] > 0
    # This kernel has no netem: the delay is reported as not injected, in the plan and the report.
    if not network.capabilities()["netem"]:
        assert any(text.startswith("delay_ms=50: needs the netem qdisc") for text in report["not_injected"])
        assert any("not injected (missing capability): delay_ms=50" in text for text in report["findings"])
    steps = {s["step"]: s["verdict"] for s in report["steps"]}
    assert steps["detected"] == "not_observable"  # no agent metric for a degraded fabric: a gap, reported
    assert any("eBPF" in gap["add"] for gap in report["gaps"])
    assert "observed ebpf: rx_bytes=" in (tmp / "drills" / ("drill-%s.md" % report["id"])).read_text()

    assert snapshot() == before
    # Revert again (a second rollback, or the kill switch after the drill): nothing left to do.
    again = network.revert(dict(fault["spec"], **fault["undo"]), FaultContext())
    assert again["already"] and again["reverted"] == []


def test_killed_controller_then_chaos_stop_restores_everything(drill_env):
    env, variables, tmp = drill_env
    before = snapshot()
    proc = playbook(env, "drills/net_degrade.yml", variables, start_new_session=True)
    try:
        fault = wait_active(proc, tmp / "ledger.json")
        assert fault, "the fault never showed active in the ledger: %s" % (proc.communicate()[0][-3000:])
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    # The controller is dead and the fault is still on: our qdisc and nft table on the a-side veth,
    # the observer alive (it runs in a session of its own).
    undo = fault["undo"]
    pid = undo["observer"]["pid"]
    qdisc = network.root_qdisc(run("tc", "-n", undo["netns"], "-j", "qdisc", "show", "dev", undo["dev"]))
    assert qdisc["kind"] == "tbf" and qdisc["handle"] == network.HANDLE
    assert "numgen" in run("ip", "netns", "exec", undo["netns"], "nft", "-j", "list", "table", "inet", undo["table"])
    assert pid in observers(), "the bpftrace observer died with the controller"

    stop_vars = {k: variables[k] for k in ("chaos_drill_kubeconfig", "chaos_drill_ledger_file", "chaos_drill_lab_dir",
                                           "chaos_drill_slurm_conf")}
    stop = playbook(env, "chaos-stop.yml", dict(stop_vars, chaos_drill_stop_reason="test_network_chaos"))
    output, _err = stop.communicate(timeout=120)
    assert stop.returncode == 0, output[-4000:]
    data, _version = ledger.FileStore(str(tmp / "ledger.json")).read()
    assert ledger.faults(data) == {} and ledger.kill_switch(data).get("on")
    (done,) = [f for f in ledger.history(data) if f["id"] == fault["id"]]
    assert done["rolled_back_by"] == "kill_switch"
    assert any("stopped the bpftrace observer (pid %d)" % pid in text for text in done["reverted"])
    assert snapshot() == before
    # The kill switch is on in this test's own ledger file only, which goes with tmp_path: no clear
    # run needed (test_drills.py clears the shared lab's; that path is the same module).


def test_revert_from_the_spec_alone_after_a_crash_mid_inject():
    """The undo never reached the ledger (the module died right after inject): revert finds every
    object by the fault id's names, and the observer by its script path."""
    before = snapshot()
    # The family's default measurement (1.5 s). With 0.3 s, a fresh-clone run beside a second lab
    # counted no packet (2026-12-03); the cause is not known (20 packets sent at once after the
    # "Attaching" line were counted under stress-ng, so not a slow attach).
    spec = {"experiment": "net_degrade", "node": NODE, "fault_id": "f-crash-%d" % os.getpid(), "lab_dir": "/lab",
            "params": {"rate_mbit": RATE_MBIT, "loss_percent": LOSS_PERCENT, "measure_s": 1.5}}
    undo = network.inject(spec, FaultContext())
    try:
        assert undo["observer"]["pid"] in observers() and undo["netns"] in snapshot()["netns"]
    finally:
        done = network.revert(spec, FaultContext())
    assert done["reverted"][0] == "stopped the bpftrace observer (pid %d)" % undo["observer"]["pid"]
    assert done["observed"]["ebpf"]["tx_packets"] > 0 and done["observed"]["nft_dropped"]["packets"] >= 0
    assert snapshot() == before
    assert network.revert(spec, FaultContext())["already"]
