"""Self-healing wiring (role self_healing): faults in, remediation runs out, all real components.

The lab's agents, Prometheus, Alertmanager and kube-apiserver, and ansible-rulebook with the
rendered rulebook and our node_condition source. The remediation playbook is replaced by
files/record-vars.yml, which records what the rulebook ran it with (the module fixture reruns
the role with self_healing_playbook pointing at it, and reruns it with the session's settings
at the end, so later tests see the lab as it was).

The node_condition source watches only the Nodes labelled gpufleet.io/test-eda-watch=true (the
role's self_healing_node_selector): a Node the test makes, with no agent, whose GpuHealthy
condition the test writes as an agent does (no agent heartbeat overwrites it), so the fault
injected for the Alertmanager path gives no node-condition run and the patched condition no
alert.

Not in the lab: the systemd backend (rendered into a staging tree and checked with
systemd-analyze verify) and the shipped example rulebooks (the role's template rendered with
their settings must give them byte for byte).
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Dict, List

import pytest
import yaml
from agent_probe import AgentProbe, alertmanager_url, firing_alerts, nodes_alerting, wait_for
from lab_harness import REPO, TEST_LAB_VARS, VENV_BIN, Lab, case_hosts, run_playbook

pytestmark = [pytest.mark.integration]

FILES = Path(__file__).resolve().parent / "files"
RECORD_PLAYBOOK = FILES / "record-vars.yml"
ALERT_NODE = "gpu-a-002"
CONDITION_NODE = "eda-test-node"
WATCH_LABEL = "gpufleet.io/test-eda-watch"
# Long enough for the duplicates of test 2, short enough that test 3 can outwait it.
WINDOW_S = 30
WEBHOOK = "http://127.0.0.1:%d/endpoint" % TEST_LAB_VARS["self_healing_webhook_port"]
PROCESS = "self-healing-eda"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


def rfc3339(moment: float) -> str:
    return datetime.datetime.fromtimestamp(moment, tz=datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def epoch(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


class Eda:
    """The lab's rulebook, running the recording playbook."""

    def __init__(self, lab: Lab, record_dir: Path) -> None:
        self.lab = lab
        self.record_dir = record_dir

    def runs(self, node: str, source: str) -> List[Dict[str, Any]]:
        found = []
        for path in sorted(self.record_dir.glob("*.json")):
            try:
                record = json.loads(path.read_text())
            except ValueError:  # being written
                continue
            if record["remediation_node"] == node and record["remediation_trigger"]["source"] == source:
                found.append(record)
        return sorted(found, key=lambda r: r["started_at"])

    def log(self) -> str:
        path = self.lab.lab_dir / "log" / ("%s.log" % PROCESS)
        return path.read_text(errors="replace") if path.exists() else ""

    def pid(self) -> int:
        return self.lab.recorded_pids()[PROCESS]


def webhook_token(lab: Lab) -> str:
    """The bearer token the lab generated for its webhook (Alertmanager sends the same)."""
    return (lab.lab_dir / "secrets" / "webhook-token").read_text().strip()


def post_alerts(lab: Lab, alerts: List[Dict[str, Any]], status: str = "firing") -> None:
    """A webhook notification as Alertmanager sends it (version 4 of its payload), with the token."""
    body = {"version": "4", "groupKey": "{}:{}", "status": status, "receiver": "gpufleet-self-healing",
            "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {}, "externalURL": "http://test",
            "truncatedAlerts": 0, "alerts": alerts}
    request = urllib.request.Request(WEBHOOK, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json",
                                              "Authorization": "Bearer " + webhook_token(lab)})
    with urllib.request.urlopen(request, timeout=5) as answer:
        assert answer.status == 200


def as_notified(alert: Dict[str, Any]) -> Dict[str, Any]:
    """An alert of Alertmanager's v2 API as its webhook sends it."""
    return {"status": "firing", "labels": alert["labels"], "annotations": alert.get("annotations", {}),
            "startsAt": alert["startsAt"], "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": alert.get("generatorURL", ""), "fingerprint": alert["fingerprint"]}


def patch_condition(lab: Lab, node: str, status: str, reason: str, message: str, transition: float,
                    heartbeat: float) -> None:
    """Write GpuHealthy as the agent does: a strategic merge patch of nodes/status."""
    lab.kube().patch_node_status(node, {"status": {"conditions": [{
        "type": "GpuHealthy", "status": status, "reason": reason, "message": message,
        "lastHeartbeatTime": rfc3339(heartbeat), "lastTransitionTime": rfc3339(transition)}]}},
        _content_type=STRATEGIC_MERGE_PATCH)


def load_source():
    """The node_condition source, loaded from its file as ansible-rulebook loads it."""
    path = REPO / "extensions" / "eda" / "plugins" / "event_source" / "node_condition.py"
    spec = importlib.util.spec_from_file_location("gpufleet_node_condition_source_it", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def make_watched_node(lab: Lab) -> None:
    """A Node with no kubelet and no agent: only the test writes its GpuHealthy condition."""
    lab.kube().create_node({"apiVersion": "v1", "kind": "Node",
                            "metadata": {"name": CONDITION_NODE, "labels": {WATCH_LABEL: "true"}}})


def delete_watched_node(lab: Lab) -> None:
    from kubernetes.client.exceptions import ApiException

    try:
        lab.kube().delete_node(CONDITION_NODE)
    except ApiException as exc:
        if exc.status != 404:
            raise


@pytest.fixture(scope="module")
def eda(lab: Lab, tmp_path_factory):
    record_dir = tmp_path_factory.mktemp("eda-runs")
    delete_watched_node(lab)
    make_watched_node(lab)
    AgentProbe(lab, ALERT_NODE).reset()
    wait_for(lambda: ALERT_NODE not in nodes_alerting("GpuNodeFatal"), 30,
             what="no GpuNodeFatal left for %s" % ALERT_NODE)
    up = lab.playbook("one-click-slurm.yml", "--tags", "self_healing", extra={
        "self_healing_enabled": True,
        "self_healing_playbook": str(RECORD_PLAYBOOK),
        # The recording playbook stands in for the remediation: the first responder, which acts for
        # real, would fence the nodes these tests inject faults on (tests/.../test_first_responder.py).
        "self_healing_first_responder": False,
        "self_healing_source": "both",
        "self_healing_node_selector": "%s=true" % WATCH_LABEL,
        "self_healing_throttle_window": "%d seconds" % WINDOW_S,
        "self_healing_inventory_vars": {"self_healing_test_record_dir": str(record_dir)},
        # A remediation setting of the inventory: the rulebook's inventory must hand it on.
        "remediation_test_marker": "handed-on",
    })
    assert up.rc == 0, up.output[-4000:]
    try:
        yield Eda(lab, record_dir)
    finally:
        AgentProbe(lab, ALERT_NODE).reset()
        delete_watched_node(lab)
        wait_for(lambda: ALERT_NODE not in nodes_alerting("GpuNodeFatal"), 30, what="GpuNodeFatal resolved")
        # The session's own settings again (self-healing on or off as TEST_LAB_VARS say, with the
        # real remediation playbook).
        restored = lab.playbook("one-click-slurm.yml", "--tags", "self_healing")
        assert restored.rc == 0, restored.output[-4000:]


@pytest.mark.lab
def test_an_xid79_alert_runs_the_playbook_for_its_node(eda):
    lab = eda.lab
    probe = AgentProbe(lab, ALERT_NODE)
    injected = time.time()
    probe.fakegpu("xid", "--gpu", "3", "--xid", "79")
    run = wait_for(lambda: eda.runs(ALERT_NODE, "alertmanager"), 90, 0.2,
                   what="a run of the playbook for %s from Alertmanager" % ALERT_NODE)[0]
    alert = next(a for a in firing_alerts("GpuNodeFatal") if a["labels"].get("node") == ALERT_NODE)
    trigger = run["remediation_trigger"]
    assert trigger["alert"] == "GpuNodeFatal"
    assert trigger["labels"]["node"] == ALERT_NODE and trigger["labels"]["component"] == "gpufleet"
    assert trigger["fingerprint"] == alert["fingerprint"]
    assert epoch(trigger["starts_at"]) == pytest.approx(epoch(alert["startsAt"]), abs=0.01)
    assert "fatal GPU fault" in trigger["annotations"]["summary"]
    # The rulebook's inventory: localhost, local, the venv's Python, the lab, and every
    # remediation_* setting of the play; its environment: the collections, the cluster, Slurm.
    # The interpreter is the venv's, by whichever name its ansible-playbook runs it (python3 or python3.11,
    # depending on the Python the venv was made from).
    interpreter = Path(run["inventory"]["ansible_python_interpreter"])
    assert interpreter.parent == VENV_BIN and interpreter.name.startswith("python3"), interpreter
    assert run["inventory"] == {"ansible_connection": "local", "ansible_python_interpreter": str(interpreter),
                                "gpufleet_lab_dir": str(lab.lab_dir), "kubernetes_kubeconfig": str(lab.kubeconfig)}
    assert run["remediation_vars"].get("remediation_test_marker") == "handed-on"
    assert run["environment"]["ANSIBLE_COLLECTIONS_PATH"] == str(REPO / "collections")
    assert run["environment"]["KUBECONFIG"] == str(lab.kubeconfig)
    assert run["environment"]["SLURM_CONF"] == str(lab.slurm_conf)
    assert run["environment"]["PATH"].split(":")[0] == str(VENV_BIN)
    # The node-condition source watches only the labelled node.
    assert not eda.runs(ALERT_NODE, "node_condition")
    received = epoch(trigger["received_at"])
    print("\nEDA latency (Alertmanager path): injection -> alert startsAt %.2fs -> webhook %.2fs -> playbook's first "
          "task %.2fs; webhook -> first task %.2fs; injection -> first task %.2fs"
          % (epoch(alert["startsAt"]) - injected, received - injected, run["started_at"] - injected,
             run["started_at"] - received, run["started_at"] - injected))


@pytest.mark.lab
def test_duplicate_alerts_for_a_node_start_no_second_run(eda):
    first = wait_for(lambda: eda.runs(ALERT_NODE, "alertmanager"), 90, what="the run of the first test")[0]
    alert = next(a for a in firing_alerts("GpuNodeFatal") if a["labels"].get("node") == ALERT_NODE)
    assert time.time() - epoch(first["remediation_trigger"]["received_at"]) < WINDOW_S - 10, "too slow for the window"
    # Alertmanager's repeat of the same alert, and another gpufleet alert about the same node.
    post_alerts(eda.lab, [as_notified(alert)])
    remap = dict(alert["labels"], alertname="GpuRowRemapFailure", gpu="3")
    post_alerts(eda.lab, [as_notified(alert), dict(as_notified(alert), labels=remap, fingerprint="0123456789abcdef")])
    # Resolved notifications and alerts the rule does not take start nothing either.
    post_alerts(eda.lab, [dict(as_notified(alert), status="resolved")], status="resolved")
    not_taken = dict(alert["labels"], node="gpu-a-004", alertname="GpufleetAgentDown")
    post_alerts(eda.lab, [dict(as_notified(alert), labels=not_taken)])
    # The control: the same alert about another node, within the window, runs at once (throttle
    # per node, runs in parallel).
    other = "gpu-a-099"
    post_alerts(eda.lab, [dict(as_notified(alert), labels=dict(alert["labels"], node=other),
                               fingerprint="fedcba9876543210")])
    wait_for(lambda: eda.runs(other, "alertmanager"), 30, what="the run for %s" % other)
    # Another alert about the node is not a duplicate (a fatal fault after a degraded one must not
    # be dropped): it runs once, after the first run, under the node's lock.
    runs = wait_for(lambda: [r for r in eda.runs(ALERT_NODE, "alertmanager")
                             if r["remediation_trigger"]["alert"] == "GpuRowRemapFailure"], 30,
                    what="the run for the second alert about %s" % ALERT_NODE)
    time.sleep(5)
    assert len(runs) == 1 and len(eda.runs(ALERT_NODE, "alertmanager")) == 2, eda.runs(ALERT_NODE, "alertmanager")
    assert not eda.runs("gpu-a-004", "alertmanager")
    AgentProbe(eda.lab, ALERT_NODE).reset()


@pytest.mark.lab
def test_a_node_condition_turning_unhealthy_runs_the_playbook_once_per_transition(eda):
    lab = eda.lab
    message = "fatal, RESTART_BM: GPU 0 (GPU-test, 0000:1b:00.0): XID 79 (patched by the test)"
    began = time.time()
    patch_condition(lab, CONDITION_NODE, "False", "Xid79", message, transition=began, heartbeat=began)
    run = wait_for(lambda: eda.runs(CONDITION_NODE, "node_condition"), 60, 0.2,
                   what="a run for %s from its node condition" % CONDITION_NODE)[0]
    trigger = run["remediation_trigger"]
    assert trigger["alert"] is None
    assert trigger["condition"] == {"type": "GpuHealthy", "status": "False", "reason": "Xid79", "message": message,
                                    "verdict": "fatal", "action": "RESTART_BM"}
    assert trigger["starts_at"] == rfc3339(began)
    assert trigger["fingerprint"] == "%s/False/Xid79/%s" % (CONDITION_NODE, rfc3339(began))
    print("\nEDA latency (node-condition path): patch -> playbook's first task %.2fs" % (run["started_at"] - began))
    # Heartbeat rewrites of the same condition, after the throttle window: the source gives no
    # event (the rulebook would run one now).
    time.sleep(max(0.0, began + WINDOW_S + 2 - time.time()))
    for beat in (1, 2, 3):
        patch_condition(lab, CONDITION_NODE, "False", "Xid79", message, transition=began, heartbeat=time.time() + beat)
        time.sleep(1)
    time.sleep(5)
    assert len(eda.runs(CONDITION_NODE, "node_condition")) == 1
    # Healthy, then unhealthy again: a new transition, a new run.
    patch_condition(lab, CONDITION_NODE, "True", "GpusHealthy", "8 GPUs healthy", transition=time.time(),
                    heartbeat=time.time())
    time.sleep(2)
    again = time.time()
    patch_condition(lab, CONDITION_NODE, "False", "Xid79", message, transition=again, heartbeat=again)

    def two_runs():
        runs = eda.runs(CONDITION_NODE, "node_condition")
        return runs if len(runs) == 2 else None

    runs = wait_for(two_runs, 60, what="a second run after a second transition")
    assert runs[1]["remediation_trigger"]["starts_at"] == rfc3339(again)
    assert "node_condition: listed Nodes" in eda.log()


@pytest.mark.lab
def test_the_source_renews_its_watch_without_repeating_events(lab):
    """The source's list + watch on the real API server, with 2-second watches renewed from their
    resourceVersion: heartbeats across renewals give nothing, a new transition one event."""
    source = load_source()
    name = "eda-watch-node"
    lab.kube().create_node({"apiVersion": "v1", "kind": "Node",
                            "metadata": {"name": name, "labels": {WATCH_LABEL: "direct"}}})
    events: List[Dict[str, Any]] = []
    watcher = source.NodeWatcher(lab.kube, events.append, source.TransitionTracker(),
                                 label_selector="%s=direct" % WATCH_LABEL, watch_timeout=2)
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: watcher._listed_once, 20, what="the first list")
        began = time.time()
        patch_condition(lab, name, "False", "Xid48", "fatal, RESET_GPU: GPU 1: XID 48", began, began)
        wait_for(lambda: len(events) == 1, 20, what="the event of the transition")
        for _beat in range(4):
            time.sleep(1.5)
            patch_condition(lab, name, "False", "Xid48", "fatal, RESET_GPU: GPU 1: XID 48", began, time.time())
        time.sleep(2.5)
        assert len(events) == 1, events
        assert events[0]["gpufleet_condition"]["action"] == "RESET_GPU"
        patch_condition(lab, name, "True", "GpusHealthy", "8 GPUs healthy", time.time(), time.time())
        again = time.time() + 1
        patch_condition(lab, name, "False", "Xid48", "fatal, RESET_GPU: GPU 1: XID 48", again, again)
        wait_for(lambda: len(events) == 2, 20, what="the event of the second transition")
    finally:
        watcher.stop()
        lab.kube().delete_node(name)
        thread.join(10)
    assert not thread.is_alive()


def test_an_unresolved_episode_is_reported_again_until_a_remediation_settles_it(lab):
    """The source on the real API server with repeats every 3 s: an episode no remediation took up
    is reported again; the remediation's own annotation of a run that succeeded settles it, one
    that failed makes it come back."""
    from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import progress as progress_rules
    from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.plans import plan_for

    source = load_source()
    name = "eda-repeat-node"
    lab.kube().create_node({"apiVersion": "v1", "kind": "Node",
                            "metadata": {"name": name, "labels": {WATCH_LABEL: "repeat"}}})
    events: List[Dict[str, Any]] = []
    watcher = source.NodeWatcher(lab.kube, events.append, source.TransitionTracker(repeat_after=3),
                                 label_selector="%s=repeat" % WATCH_LABEL, watch_timeout=2)
    thread = threading.Thread(target=watcher.run, daemon=True)

    def annotate(result: str) -> None:
        progress = progress_rules.new_progress("r-it", name, plan_for("RESTART_BM"), {}, {}, time.time(),
                                               {"pid": 1, "host": "test"})
        value = progress_rules.annotation(progress_rules.finish(progress, result, time.time()))
        lab.kube().patch_node(name, {"metadata": {"annotations": {"gpufleet.io/remediation": value}}})

    thread.start()
    try:
        wait_for(lambda: watcher._listed_once, 20, what="the first list")
        began = time.time()
        patch_condition(lab, name, "False", "Xid79", "fatal, RESTART_BM: GPU 3: XID 79", began, began)
        wait_for(lambda: [e["gpufleet_condition"]["repeat"] for e in events][:2] == [0, 1], 20,
                 what="the episode reported, then reported again")
        annotate("succeeded")
        time.sleep(4)  # a repeat already on its way when the annotation landed
        settled = len(events)
        time.sleep(7)
        assert len(events) == settled, events[settled:]
        annotate("failed")
        wait_for(lambda: len(events) > settled, 20, what="a repeat after the failed run")
        fingerprints = {event["gpufleet_condition"]["fingerprint"] for event in events}
        assert fingerprints == {events[0]["gpufleet_condition"]["fingerprint"]}
    finally:
        watcher.stop()
        lab.kube().delete_node(name)
        thread.join(10)
    assert not thread.is_alive()


def template_payloads(marker_dir: Path, tag: str) -> List[str]:
    """Template forms that would each create a marker file if anything rendered them (once or twice)."""
    touch = "touch %s/%s-%%d" % (marker_dir, tag)
    return [
        "{{ lookup('pipe', '%s') }}" % (touch % 1),
        "{%% set x = lookup('ansible.builtin.pipe', '%s') %%}text" % (touch % 2),
        "{# comment #}{{ query('pipe', '%s') }}" % (touch % 3),
        # Rendered once, it becomes a template: a second rendering would run it.
        "{{ '{{' }} lookup('pipe', '%s') {{ '}}' }}" % (touch % 4),
        # Percent-encoded, as the rulebook sends it: decoded once, it must stay this text.
        "%%7B%%7B lookup('pipe', '%s') %%7D%%7D" % (touch % 5).replace(" ", "%20"),
        "{{ lookup('pipe', '%s') }}\nsecond line" % (touch % 6),
    ]


def post_raw(body: bytes, headers: Dict[str, str]) -> int:
    request = urllib.request.Request(WEBHOOK, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.lab
def test_alert_and_condition_text_is_data_never_a_template(eda, tmp_path):
    """Finding 1 of issue 16: labels, annotations and a condition message that hold templates reach
    the playbook as text; a node label that is not a node name starts nothing; only the token gets in."""
    lab = eda.lab
    markers = tmp_path / "markers"
    markers.mkdir()
    text = template_payloads(markers, "alert")
    now = rfc3339(time.time())
    # Straight to the webhook, as a forger with the token would.
    direct = {"status": "firing", "startsAt": now, "fingerprint": "1111111111111111",
              "labels": {"alertname": "GpuNodeFatal", "component": "gpufleet", "node": "gpu-a-097",
                         "pool": text[0], "gpu": text[1]},
              "annotations": {"summary": text[2], "description": text[3], "runbook": text[4], "note": text[5]}}
    # Without the token (or with a wrong one) the webhook turns it away.
    body = json.dumps({"version": "4", "status": "firing", "receiver": "x", "alerts": [direct]}).encode()
    assert post_raw(body, {"Content-Type": "application/json"}) == 401
    assert post_raw(body, {"Content-Type": "application/json", "Authorization": "Bearer not-the-token"}) == 401
    time.sleep(3)
    assert not eda.runs("gpu-a-097", "alertmanager")
    post_alerts(lab, [direct])
    # Through Alertmanager's own route (its API, then its webhook notification with the token).
    routed = {"labels": {"alertname": "GpuNodeDegraded", "component": "gpufleet", "node": "gpu-a-096",
                         "pool": text[0], "gpu": text[1]},
              "annotations": {"summary": text[2], "description": text[3]}}
    request = urllib.request.Request(alertmanager_url() + "/api/v2/alerts", data=json.dumps([routed]).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as answer:
        assert answer.status == 200
    # Node labels that are no node name: refused by the rule, no run at all.
    bad_nodes = [text[0], "gpu-a-095\n", "gpu-a-095\nx", "../../etc/passwd", "/etc/passwd", "-oProxyCommand=id",
                 "GPU-A-095", "", "a" * 300, "gpu a 095", "{{ 'gpu-a-095' }}"]
    post_alerts(lab, [dict(direct, fingerprint="2%015d" % i, labels=dict(direct["labels"], node=bad))
                      for i, bad in enumerate(bad_nodes)])
    # The node-condition path: a message written as any agent could write it.
    message = "fatal, RESTART_BM: GPU 0 (GPU-test, 0000:1b:00.0): XID 79 " + text[0] + text[1]
    patch_condition(lab, CONDITION_NODE, "True", "GpusHealthy", "8 GPUs healthy", time.time(), time.time())
    time.sleep(2)
    began = time.time()
    patch_condition(lab, CONDITION_NODE, "False", "Xid79", message, transition=began, heartbeat=began)

    direct_run = wait_for(lambda: eda.runs("gpu-a-097", "alertmanager"), 60, what="the run of the direct alert")[0]
    routed_run = wait_for(lambda: eda.runs("gpu-a-096", "alertmanager"), 60, what="the run of the routed alert")[0]
    condition_run = wait_for(lambda: [r for r in eda.runs(CONDITION_NODE, "node_condition")
                                      if r["remediation_trigger"]["starts_at"] == rfc3339(began)], 60,
                             what="the run of the patched condition")[0]
    assert direct_run["remediation_trigger"]["labels"]["pool"] == text[0]
    assert direct_run["remediation_trigger"]["labels"]["gpu"] == text[1]
    annotations = direct_run["remediation_trigger"]["annotations"]
    assert [annotations[key] for key in ("summary", "description", "runbook", "note")] == text[2:6]
    assert routed_run["remediation_trigger"]["labels"]["pool"] == text[0]
    assert routed_run["remediation_trigger"]["annotations"] == {"summary": text[2], "description": text[3]}
    assert condition_run["remediation_trigger"]["condition"]["message"] == message
    # What crossed into extra vars holds no template delimiter at all.
    for run in (direct_run, routed_run, condition_run):
        assert not any(mark in run["remediation_trigger_encoded"] for mark in ("{", "}", "#")), run
    time.sleep(3)
    assert sorted(path.name for path in markers.iterdir()) == []
    assert len(eda.runs("gpu-a-097", "alertmanager")) == 1
    recorded = {json.loads(path.read_text())["remediation_node"] for path in eda.record_dir.glob("*.json")}
    assert not recorded & set(bad_nodes), recorded & set(bad_nodes)
    assert "is not a node name" in eda.log()


@pytest.mark.lab
def test_the_off_switch_stops_the_rulebook(eda):
    lab = eda.lab
    pid = eda.pid()
    off = lab.playbook("one-click-slurm.yml", "--tags", "self_healing", extra={"self_healing_enabled": False})
    assert off.rc == 0, off.output[-4000:]
    assert PROCESS not in lab.recorded_pids()
    assert not Path("/proc/%d" % pid).exists() or "Z" in Path("/proc/%d/stat" % pid).read_text().split(")")[1][:3]
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", TEST_LAB_VARS["self_healing_webhook_port"]),
                                                          timeout=2):
        pass
    # Off again: nothing to do.
    again = lab.playbook("one-click-slurm.yml", "--tags", "self_healing", extra={"self_healing_enabled": False})
    assert again.rc == 0 and again.recap["localhost"]["changed"] == 0, again.output[-3000:]


# ---- without the lab -----------------------------------------------------------------------------

RULEBOOKS = REPO / "extensions" / "eda" / "rulebooks"
# The shipped rulebooks and the role settings that render them.
SHIPPED = {
    "gpufleet-remediation.yml": {"self_healing_source": "alertmanager", "self_healing_webhook_token": "t" * 32},
    "gpufleet-remediation-node-condition.yml": {"self_healing_source": "node_condition"},
    "gpufleet-remediation-controller.yml": {
        "self_healing_source": "alertmanager",
        "self_healing_action": "run_job_template",
        "self_healing_controller_url": "https://controller.example.com",
        "self_healing_webhook_token": "t" * 32,
    },
}


def staged_cases(tmp_path: Path, cases: Dict[str, Dict[str, Any]]) -> Dict[str, tuple]:
    """The role with backend systemd, staged below tmp_path/<case>/root for each case, in one run (a local
    host per case, its settings as host variables); each venv (tmp_path/<case>/opt/venv, also staged) is
    the repo's, so the unit's ExecStart names a program that exists. (root, prefix) per case."""
    hosts, staged_at = {}, {}
    for case, variables in cases.items():
        root = tmp_path / case / "root"
        prefix = tmp_path / case / "opt"
        for place in (prefix, root / str(prefix).lstrip("/")):
            place.mkdir(parents=True)
            (place / "venv").symlink_to(VENV_BIN.parent)
        settings = dict(self_healing_backend="systemd", self_healing_systemd_root=str(root),
                        self_healing_systemd_start=False, self_healing_systemd_packages=[],
                        self_healing_systemd_install_packages=False,
                        self_healing_systemd_prefix=str(prefix), kubernetes_kubeconfig="/etc/gpufleet/eda.kubeconfig",
                        kubernetes_backend="existing", gpufleet_lab_dir=str(tmp_path / "no-lab"))
        settings.update(variables)
        hosts[case] = settings
        staged_at[case] = (root, prefix)
    inventory = tmp_path / "cases.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"cases": {"hosts": case_hosts(hosts)}}}}))
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{"name": "Stage self-healing", "hosts": "cases", "gather_facts": False,
                                         "roles": [{"role": "gpufleet.resilience.self_healing"}]}]))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), ANSIBLE_NOCOLOR="1",
               PATH=str(VENV_BIN) + os.pathsep + os.environ.get("PATH", ""))
    # The lab inventory's group variables as before; the cases' own settings win as host variables.
    result = run_playbook(["-i", str(REPO / "inventories" / "lab"), "-i", str(inventory), str(playbook)], env,
                          timeout=300)
    assert result.rc == 0, result.output[-4000:]
    return staged_at


def staged(tmp_path: Path, variables: Dict[str, Any]):
    """One case of staged_cases: (root, prefix)."""
    return staged_cases(tmp_path, {"stage": variables})["stage"]


def test_shipped_rulebooks_are_what_the_role_renders(tmp_path):
    regenerate = os.environ.get("GPUFLEET_REGENERATE_RULEBOOKS") == "1"
    # One run, a host per rulebook (host names: the file names without .yml).
    cases = staged_cases(tmp_path, {name[:-len(".yml")]: variables for name, variables in SHIPPED.items()})
    for name in SHIPPED:
        root, _prefix = cases[name[:-len(".yml")]]
        rendered = (root / "etc" / "gpufleet" / "eda" / "gpufleet-remediation.yml").read_text()
        if regenerate:
            (RULEBOOKS / name).write_text(rendered)
        assert (RULEBOOKS / name).read_text() == rendered, (
            "%s differs from what the role renders; GPUFLEET_REGENERATE_RULEBOOKS=1 rewrites it" % name)


def test_systemd_backend_stages_a_unit_that_systemd_accepts(tmp_path):
    root, prefix = staged(tmp_path, {"self_healing_source": "both", "self_healing_webhook_host": "0.0.0.0",
                                     "self_healing_webhook_token": "s3cret-" * 4, "remediation_grace": 30,
                                     "self_healing_webhook_certfile": "/etc/gpufleet/eda/tls.crt",
                                     "self_healing_webhook_keyfile": "/etc/gpufleet/eda/tls.key"})
    unit = root / "etc" / "systemd" / "system" / "gpufleet-eda.service"
    text = unit.read_text()
    exec_start = "ExecStart=%s/venv/bin/ansible-rulebook --rulebook /etc/gpufleet/eda/gpufleet-remediation.yml"
    assert exec_start % prefix in text
    assert "EnvironmentFile=/etc/gpufleet/eda/environment" in text
    config = root / "etc" / "gpufleet" / "eda"
    for name in ("vars.yml", "inventory.yml", "environment"):
        assert (config / name).stat().st_mode & 0o777 == 0o600, name
    assert oct(config.stat().st_mode & 0o777) == "0o700"
    inventory = yaml.safe_load((config / "inventory.yml").read_text())["all"]["hosts"]["localhost"]
    assert inventory["ansible_python_interpreter"] == "%s/venv/bin/python" % prefix
    assert inventory["remediation_grace"] == 30 and inventory["kubernetes_kubeconfig"] == "/etc/gpufleet/eda.kubeconfig"
    rulebook = yaml.safe_load((config / "gpufleet-remediation.yml").read_text())
    webhook = rulebook[0]["sources"][0]["eda.builtin.webhook"]
    assert webhook["token"] == "{{ self_healing_webhook_token }}"
    assert webhook["certfile"] == "{{ self_healing_webhook_certfile }}" and "hmac_secret" not in webhook
    rulebook_vars = yaml.safe_load((config / "vars.yml").read_text())
    assert rulebook_vars["self_healing_webhook_certfile"] == "/etc/gpufleet/eda/tls.crt"
    assert [s["name"] for s in rulebook[0]["sources"]] == ["alertmanager", "node_condition"]
    environment = (config / "environment").read_text()
    assert 'ANSIBLE_COLLECTIONS_PATH="%s"' % (REPO / "collections") in environment
    # The first responder: its unit beside the rulebook's, its settings (the remediation's) root's only.
    responder_unit = root / "etc" / "systemd" / "system" / "gpufleet-first-responder.service"
    responder_text = responder_unit.read_text()
    assert ("ExecStart=%s/venv/bin/python -m ansible_collections.gpufleet.resilience.plugins.module_utils.remediation"
            ".first_responder --config /etc/gpufleet/eda/first-responder.json" % prefix) in responder_text
    assert "Environment=PYTHONPATH=%s" % (REPO / "collections") in responder_text
    settings = config / "first-responder.json"
    assert settings.stat().st_mode & 0o777 == 0o600
    start = json.loads(settings.read_text())["start"]
    assert start["kubeconfig"] == "/etc/gpufleet/eda.kubeconfig"
    assert start["fence"]["taint_key"] == "gpufleet.io/gpu-unhealthy"
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed: the units were rendered but not verified")
    # systemd-analyze reports unknown keys and bad values on stderr (exit 0) and a missing or
    # non-executable ExecStart with exit 1.
    for path in (unit, responder_unit):
        done = subprocess.run([analyze, "verify", str(path)], capture_output=True, text=True, timeout=60, check=False)
        problems = [line for line in (done.stdout + done.stderr).splitlines() if path.name in line]
        assert done.returncode == 0 and not problems, done.stdout + done.stderr
