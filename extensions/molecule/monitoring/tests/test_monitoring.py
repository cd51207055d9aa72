"""The lab Prometheus and Alertmanager the monitoring role started, checked on the host.

molecule.yml's prepare.yml serves a fake agent for gpu-a-001 (fatal: GPU 3 lost), lists a dead
one for gpu-a-002, and runs a webhook sink where Alertmanager sends alerts.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

LAB = "/var/tmp/gpufleet-molecule-monitoring"
PROMETHEUS = "http://127.0.0.1:24090"
ALERTMANAGER = "http://127.0.0.1:24093"
WEBHOOK_LOG = LAB + "/molecule-webhook.jsonl"
RULES_SOURCE = Path(__file__).resolve().parents[4] / "roles" / "monitoring" / "files" / "gpufleet-alerts.yml"
DAEMONS = {"prometheus": 24090, "alertmanager": 24093}
# The exporter of the remediations' audit log (a lab_process of the role, as root: it reads the log).
LISTENERS = dict(DAEMONS, **{"remediation-exporter": 24095})


def get_json(host, url):
    done = host.run("curl --silent --show-error --fail --max-time 5 %s", url)
    assert done.rc == 0, "%s: %s" % (url, done.stderr)
    return json.loads(done.stdout)


def wait_for(probe, timeout=45.0, interval=0.5):
    """Call probe() until it returns something truthy; return it, or the last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def record(host, name):
    return json.loads(host.file("%s/run/%s.pid" % (LAB, name)).content_string)


@pytest.mark.parametrize("name", sorted(DAEMONS))
def test_daemon_runs_as_prometheus_with_its_recorded_argv(host, name):
    rec = record(host, name)
    proc = host.process.get(pid=rec["pid"])
    assert proc.user == "prometheus"
    assert proc.group == "prometheus"
    # The record matches the running process (lab-down stops it through this record).
    assert host.file("/proc/%d/cmdline" % rec["pid"]).content_string.split("\0")[:-1] == rec["argv"]


@pytest.mark.parametrize("name", sorted(LISTENERS))
def test_daemon_listens_on_loopback_only(host, name):
    pid = record(host, name)["pid"]
    port = LISTENERS[name]
    assert host.socket("tcp://127.0.0.1:%d" % port).is_listening
    assert not host.socket("tcp://0.0.0.0:%d" % port).is_listening
    lines = host.check_output("ss -Hltnp").splitlines()
    own = [line.split()[3] for line in lines if "pid=%d," % pid in line]
    # Alertmanager's gossip port (9094) stays closed: --cluster.listen-address is empty.
    assert own == ["127.0.0.1:%d" % port], own


@pytest.mark.parametrize("path, owner, group, mode", [
    ("monitoring/prometheus/prometheus.yml", "root", "prometheus", 0o640),
    ("monitoring/prometheus/gpufleet-alerts.yml", "root", "prometheus", 0o640),
    ("monitoring/alertmanager/alertmanager.yml", "root", "prometheus", 0o640),
    ("monitoring/prometheus", "root", "prometheus", 0o750),
    ("monitoring/alertmanager", "root", "prometheus", 0o750),
    ("monitoring/prometheus/data", "prometheus", "prometheus", 0o750),
    ("monitoring/alertmanager/data", "prometheus", "prometheus", 0o750),
    ("monitoring/targets", "root", "root", 0o755),
])
def test_files_have_safe_owners_and_modes(host, path, owner, group, mode):
    f = host.file("%s/%s" % (LAB, path))
    assert f.exists
    assert (f.user, f.group, f.mode) == (owner, group, mode)


def test_prometheus_loaded_every_alert_rule(host):
    want = {rule["alert"] for group in yaml.safe_load(RULES_SOURCE.read_text())["groups"] for rule in group["rules"]}

    def evaluated():
        # A rule's health is "unknown" until its group's first evaluation: up to 30 s for
        # gpufleet.gpu-links, which runs every 30 s whatever the global interval.
        groups = get_json(host, PROMETHEUS + "/api/v1/rules?type=alert")["data"]["groups"]
        found = {rule["name"]: rule for group in groups for rule in group["rules"]}
        return found if all(rule["health"] != "unknown" for rule in found.values()) else None

    loaded = wait_for(evaluated)
    assert loaded, "a rule group was never evaluated"
    assert set(loaded) == want
    assert all(rule["health"] == "ok" for rule in loaded.values()), loaded
    assert loaded["GpuNodeFatal"]["duration"] == 0
    assert loaded["GpuNodeFatal"]["labels"] == {"severity": "critical", "component": "gpufleet"}


def test_prometheus_runs_the_lab_intervals_and_sends_to_alertmanager(host):
    config = yaml.safe_load(get_json(host, PROMETHEUS + "/api/v1/status/config")["data"]["yaml"])
    assert config["global"]["scrape_interval"] == "1s"
    assert config["global"]["evaluation_interval"] == "1s"
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"prometheus", "alertmanager", "gpufleet-agent", "gpufleet-remediation"}
    assert jobs["gpufleet-agent"]["file_sd_configs"][0]["files"] == [LAB + "/monitoring/targets/agent-*.json"]
    # Prometheus's notifier finds its Alertmanagers after the first service discovery: on a loaded
    # machine the list is still empty for a moment after the start (it failed a CI run).
    managers = wait_for(lambda: get_json(host, PROMETHEUS + "/api/v1/alertmanagers")["data"]["activeAlertmanagers"])
    assert [m["url"] for m in managers] == ["http://127.0.0.1:24093/api/v2/alerts"]


def test_agent_targets_come_from_file_sd_with_node_and_pool(host):
    def agents():
        targets = get_json(host, PROMETHEUS + "/api/v1/targets?state=active")["data"]["activeTargets"]
        found = {t["labels"]["node"]: t for t in targets if t["labels"]["job"] == "gpufleet-agent"}
        ready = len(found) == 2 and found["gpu-a-001"]["health"] == "up" and found["gpu-a-002"]["health"] == "down"
        return found if ready else None

    found = wait_for(agents)
    assert found, "both agents listed, gpu-a-001 up and gpu-a-002 down"
    assert found["gpu-a-001"]["labels"]["pool"] == "gpu-a"
    assert found["gpu-a-001"]["scrapeUrl"] == "http://127.0.0.1:24401/metrics"
    # The node label comes from the target, not from the agent.
    result = get_json(host, PROMETHEUS + "/api/v1/query?query=gpufleet_node_health_verdict%3D%3D1")["data"]["result"]
    assert [(r["metric"]["node"], r["metric"]["state"]) for r in result] == [("gpu-a-001", "fatal")]


def test_only_the_fatal_alert_fires_for_the_fatal_node(host):
    def firing():
        result = get_json(host, PROMETHEUS + "/api/v1/alerts")["data"]["alerts"]
        return {a["labels"]["alertname"]: a for a in result if a["state"] == "firing"}

    def fatal_fires():
        alerts = firing()
        return alerts if "GpuNodeFatal" in alerts else None

    alerts = wait_for(fatal_fires)
    assert alerts, "GpuNodeFatal fires"
    fatal = alerts["GpuNodeFatal"]
    assert fatal["labels"] == {"alertname": "GpuNodeFatal", "node": "gpu-a-001", "pool": "gpu-a",
                               "severity": "critical", "component": "gpufleet"}
    assert "GPU 3 (GPU-00000000-0000-0000-0000-000000000003)" in fatal["annotations"]["description"]
    # Nothing else is wrong with gpu-a-001, and gpu-a-002's down agent needs a minute to alert.
    assert set(alerts) == {"GpuNodeFatal"}


def test_alertmanager_answers_and_delivers_to_the_webhook(host):
    assert host.run("curl --silent --fail %s/-/ready", ALERTMANAGER).rc == 0
    status = get_json(host, ALERTMANAGER + "/api/v2/status")
    config = yaml.safe_load(status["config"]["original"])
    assert config["route"]["receiver"] == "gpufleet-self-healing"
    assert config["route"]["group_wait"] == "0s"
    receivers = {receiver["name"]: receiver for receiver in config["receivers"]}
    assert receivers["gpufleet-self-healing"]["webhook_configs"][0]["url"] == "http://127.0.0.1:24500/endpoint"
    # Fleet-wide alerts (no node) have their own receiver, never the remediation webhook.
    # (Alertmanager's status shows its own defaults too, such as continue: false.)
    fleet_routes = [{key: route.get(key) for key in ("receiver", "matchers", "group_by", "continue")}
                    for route in config["route"]["routes"]]
    assert fleet_routes == [{"receiver": "gpufleet-fleet", "matchers": ['scope="fleet"'], "group_by": ["alertname"],
                             "continue": False}]
    assert receivers["gpufleet-fleet"] == {"name": "gpufleet-fleet"}

    def delivered():
        f = host.file(WEBHOOK_LOG)
        if not f.exists:
            return None
        for line in f.content_string.splitlines():
            body = json.loads(line)["body"]
            for alert in body["alerts"]:
                if alert["labels"]["alertname"] == "GpuNodeFatal" and alert["status"] == "firing":
                    return alert
        return None

    alert = wait_for(delivered)
    assert alert, "the webhook got GpuNodeFatal"
    assert alert["labels"]["node"] == "gpu-a-001"
    assert alert["annotations"]["runbook_url"].endswith("monitoring.md#gpunodefatal")


def test_prometheus_scrapes_the_remediations_audit_log(host):
    """No remediation ran here: the exporter answers (up), with no cost series and no torn line."""
    def scraped():
        query = "up%7Bjob%3D%22gpufleet-remediation%22%7D"  # braces encoded: curl globs them
        result = get_json(host, PROMETHEUS + "/api/v1/query?query=" + query)["data"]["result"]
        return result if result and result[0]["value"][1] == "1" else None

    assert wait_for(scraped), "Prometheus scrapes the exporter"
    result = get_json(host, PROMETHEUS + "/api/v1/query?query=gpufleet_remediation_audit_lines_skipped")["data"]
    assert [r["value"][1] for r in result["result"]] == ["0"]
