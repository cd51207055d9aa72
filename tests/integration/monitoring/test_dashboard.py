"""Every PromQL query of the Grafana dashboard runs on a real Prometheus and the main panels show data.

A throwaway Prometheus (Debian's 2.42, its own temporary directory and loopback port, stopped by
its PID) scrapes two static exporters served here with prometheus_client: the metrics of
docs/agent.md for a healthy node gpu-a-001 and a fatal node gpu-a-002 (GPU 3 lost, XID 79), with
`node` and `pool` as target labels, as the lab's file_sd files and the PodMonitor set them. It
also loads the alert rules, so the dashboard's ALERTS queries have something to show.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from dashboard_queries import load, metric_names, panel_queries, query, render, run_queries
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
RULES = REPO / "roles" / "monitoring" / "files" / "gpufleet-alerts.yml"
AGENT_DOC = REPO / "docs" / "agent.md"
# Panels that must show data for the fleet served here; the others may legitimately be empty.
MAIN_PANELS = {
    "Healthy nodes", "Degraded nodes", "Fatal nodes", "GPUs lost", "Agents answering", "Firing GPU alerts",
    "Nodes by verdict", "Unhealthy nodes", "XIDs by code", "XIDs by node, GPU and action (time range)",
    "GPU temperature", "GPU power", "ECC errors since the last reset (volatile)", "Remapped rows",
    "Clock-event reasons (GPUs affected)", "NVLink errors", "Agent up (scrape and NVML)", "Snapshot age",
    "Loop lag", "Agent errors",
}
GPUS = 4


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class FakeAgent:
    """The series of one node's health agent, named and labelled as in docs/agent.md."""

    def __init__(self, fatal_gpu=None):
        self.registry = registry = CollectorRegistry()
        gpu_labels = ["gpu", "uuid"]
        self.up = Gauge("gpufleet_agent_up", "", registry=registry)
        self.lag = Gauge("gpufleet_agent_loop_lag_seconds", "", registry=registry)
        self.snapshot = Gauge("gpufleet_agent_last_snapshot_timestamp_seconds", "", registry=registry)
        self.errors = Counter("gpufleet_agent_errors_total", "", ["source"], registry=registry)
        self.verdict = Gauge("gpufleet_node_health_verdict", "", ["state"], registry=registry)
        self.gpu_health = Gauge("gpufleet_gpu_health", "", [*gpu_labels, "state"], registry=registry)
        self.xids = Counter("gpufleet_gpu_xid_errors_total", "", [*gpu_labels, "xid", "action"], registry=registry)
        self.lost = Gauge("gpufleet_gpu_lost", "", gpu_labels, registry=registry)
        self.temperature = Gauge("gpufleet_gpu_temperature_celsius", "", gpu_labels, registry=registry)
        self.power = Gauge("gpufleet_gpu_power_watts", "", gpu_labels, registry=registry)
        self.ecc = Counter("gpufleet_gpu_ecc_errors_total", "", [*gpu_labels, "type", "counter"], registry=registry)
        self.remapped = Gauge("gpufleet_gpu_remapped_rows", "", [*gpu_labels, "kind"], registry=registry)
        self.nvlink = Counter("gpufleet_gpu_nvlink_errors_total", "", [*gpu_labels, "link", "kind"], registry=registry)
        self.throttle = Gauge("gpufleet_gpu_throttle_reasons", "", [*gpu_labels, "reason"], registry=registry)
        port_labels = ["hca", "port", "link_layer"]
        self.ib_up = Gauge("gpufleet_ib_port_up", "", port_labels, registry=registry)
        self.ib_state = Gauge("gpufleet_ib_port_state", "", port_labels, registry=registry)
        self.ib_downed = Counter("gpufleet_ib_port_link_downed_total", "", port_labels, registry=registry)
        self.job_stamp = Gauge("gpufleet_job_progress_timestamp_seconds", "", ["job_id", "rank"], registry=registry)
        self.job_window = Gauge("gpufleet_job_stall_window_seconds", "", ["job_id"], registry=registry)
        self.job_stalled = Gauge("gpufleet_job_stalled", "", ["job_id"], registry=registry)
        self.fatal_gpu = fatal_gpu
        self.up.set(1)
        self.lag.set(0.002)
        node_state = "fatal" if fatal_gpu is not None else "healthy"
        for state in ("healthy", "degraded", "fatal"):
            self.verdict.labels(state).set(1 if state == node_state else 0)
        for gpu in range(GPUS):
            ids = (str(gpu), "GPU-%08d" % gpu)
            state = "fatal" if gpu == fatal_gpu else "healthy"
            for each in ("healthy", "degraded", "fatal"):
                self.gpu_health.labels(*ids, each).set(1 if each == state else 0)
            self.lost.labels(*ids).set(1 if gpu == fatal_gpu else 0)
            self.temperature.labels(*ids).set(40 + gpu)
            self.power.labels(*ids).set(300 + 10 * gpu)
            for kind in ("correctable", "uncorrectable", "pending", "failed"):
                self.remapped.labels(*ids, kind).set(0)
            for typ in ("correctable", "uncorrectable"):
                for counter in ("volatile", "aggregate"):
                    self.ecc.labels(*ids, typ, counter)
            for link in range(2):
                for kind in ("crc_flit", "crc_data", "replay", "recovery"):
                    self.nvlink.labels(*ids, str(link), kind)
            for reason in ("gpu_idle", "sw_power_cap", "hw_thermal_slowdown"):
                self.throttle.labels(*ids, reason).set(1 if reason == "sw_power_cap" else 0)
        # The fatal node's second port is down and its job (7) stalled: rank 1 silent for 900 s.
        for hca in ("mlx5_0", "mlx5_1"):
            down = fatal_gpu is not None and hca == "mlx5_1"
            self.ib_up.labels(hca, "1", "InfiniBand").set(0 if down else 1)
            self.ib_state.labels(hca, "1", "InfiniBand").set(1 if down else 4)
        job = "7" if fatal_gpu is not None else "6"
        self.job_window.labels(job).set(600)
        self.job_stalled.labels(job).set(1 if fatal_gpu is not None else 0)
        self.job_stamp.labels(job, "1").set(time.time() - (900 if fatal_gpu is not None else 0))
        self.errors.labels("nvml")
        self.tick()

    def tick(self):
        """One agent loop: a fresh snapshot, some counters moving (XID 79 on the fatal GPU)."""
        self.snapshot.set(time.time())
        self.ecc.labels("0", "GPU-00000000", "correctable", "volatile").inc(3)
        self.nvlink.labels("1", "GPU-00000001", "0", "crc_flit").inc(2)
        self.errors.labels("kernel_log").inc()
        if self.fatal_gpu is not None:
            self.xids.labels(str(self.fatal_gpu), "GPU-%08d" % self.fatal_gpu, "79", "RESTART_BM").inc()
            self.ib_downed.labels("mlx5_0", "1", "InfiniBand").inc()  # a port that flaps
        else:
            self.job_stamp.labels("6", "1").set(time.time())  # a job making progress


@pytest.fixture(scope="module")
def fleet():
    agents = {"gpu-a-001": FakeAgent(), "gpu-a-002": FakeAgent(fatal_gpu=3)}
    servers = []
    ports = {}
    for node, agent in agents.items():
        ports[node] = free_port()
        server, _thread = start_http_server(ports[node], addr="127.0.0.1", registry=agent.registry)
        servers.append(server)
    yield agents, ports
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def prometheus(fleet, tmp_path_factory):
    """A Prometheus of its own, on a free loopback port, stopped by its PID at the end."""
    binary = shutil.which("prometheus") or "/usr/bin/prometheus"
    if not Path(binary).exists():
        pytest.fail("prometheus is missing: `make debs` installs Debian's prometheus package")
    agents, ports = fleet
    work = tmp_path_factory.mktemp("prometheus")
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [{
            "job_name": "gpufleet-agent",
            "static_configs": [{"targets": ["127.0.0.1:%d" % ports[node]], "labels": {"node": node, "pool": "gpu-a"}}
                               for node in agents],
        }],
    }
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = (work / "prometheus.log").open("wb")
    argv = [binary, "--config.file=%s" % (work / "prometheus.yml"), "--storage.tsdb.path=%s" % (work / "data"),
            "--web.listen-address=127.0.0.1:%d" % port]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = "http://127.0.0.1:%d" % port
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (work / "prometheus.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(base + "/-/ready", timeout=1) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "Prometheus not ready: " + (work / "prometheus.log").read_text()[-3000:]
            time.sleep(0.2)
        # Enough scrapes for rate() and increase() over 1m, with the counters moving in between.
        deadline = time.monotonic() + 60
        while True:
            for agent in agents.values():
                agent.tick()
            samples = query(base, 'min(count_over_time(up{job="gpufleet-agent"}[1m]))')["data"]["result"]
            if samples and float(samples[0]["value"][1]) >= 5:
                break
            assert time.monotonic() < deadline, "too few scrapes: %s" % samples
            time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        log.close()


def series(reply):
    return reply["data"]["result"] if reply.get("status") == "success" else []


def test_the_dashboard_has_queries_for_every_main_panel():
    titles = {pq.panel for pq in panel_queries()}
    assert titles >= MAIN_PANELS, MAIN_PANELS - titles
    board = load()
    assert board["uid"] == "gpufleet-fleet"
    # Panels query the datasource variable, so the dashboard imports into any Grafana.
    assert {json.dumps(p.get("datasource")) for p in board["panels"] if p["type"] != "row"} == \
        {json.dumps({"type": "prometheus", "uid": "${datasource}"})}


def test_every_query_uses_only_known_variables():
    for pq in panel_queries():
        render(pq.expr, {"node": ".*", "pool": ".*"})


def test_every_metric_the_dashboard_reads_is_in_the_agent_contract():
    # The agent's metrics, and the remediations' audit log exporter's (docs/monitoring.md).
    # A documented name may stand for several: `gpufleet_ib_port_<counter>_total`.
    documented = [re.compile(re.sub(r"<[a-z_]+>", "[a-z_]+", name) + "$")
                  for doc in (AGENT_DOC, REPO / "docs" / "monitoring.md")
                  for name in re.findall(r"^\| `(gpufleet_[a-z_<>]+)`", doc.read_text(), re.M)]
    used = {name for pq in panel_queries() for name in metric_names(pq.expr)}
    undocumented = {name for name in used if not any(pattern.match(name) for pattern in documented)}
    assert not undocumented, undocumented


def test_every_query_runs_without_error(prometheus):
    replies = run_queries(prometheus)
    assert len(replies) == len(panel_queries())
    failed = [(pq.panel, pq.ref_id, reply.get("error")) for pq, reply in replies
              if reply.get("status") != "success" or reply.get("error") or reply.get("warnings")]
    assert not failed


def test_main_panels_show_data(prometheus):
    empty = sorted({pq.panel for pq, reply in run_queries(prometheus) if pq.panel in MAIN_PANELS and not series(reply)})
    assert not empty, "no data in: %s" % empty


def test_panels_show_the_fleet_that_was_served(prometheus):
    def value(panel, **labels):
        for pq, reply in run_queries(prometheus):
            if pq.panel != panel:
                continue
            for item in series(reply):
                if all(item["metric"].get(k) == v for k, v in labels.items()):
                    return float(item["value"][1])
        raise AssertionError("%s: no series with %s" % (panel, labels))

    assert value("Healthy nodes") == 1
    assert value("Fatal nodes") == 1
    assert value("Degraded nodes") == 0
    assert value("GPUs lost") == 1
    assert value("Agents answering") == 2
    assert value("Nodes by verdict", state="fatal") == 1
    assert value("Unhealthy nodes", node="gpu-a-002", state="fatal") == 1
    assert value("XIDs by code", xid="79") > 0
    assert value("XIDs by node, GPU and action (time range)",
                 node="gpu-a-002", gpu="3", xid="79", action="RESTART_BM") > 0
    assert value("GPU temperature", node="gpu-a-001", gpu="2") == 42
    assert value("GPU power", node="gpu-a-002", gpu="1") == 310
    assert value("Firing GPU alerts") >= 1
    assert value("IB ports not up") == 1
    assert value("IB ports not up, by port", node="gpu-a-002", hca="mlx5_1", port="1") == 1  # its state code: DOWN
    assert value("Stalled jobs") == 1
    assert value("Stalled jobs, by node", node="gpu-a-002", job_id="7") == 600  # its window
    assert value("IB link flaps and port errors (per minute)", node="gpu-a-002", hca="mlx5_0") > 0
    assert value("Job heartbeat age", node="gpu-a-002", job_id="7") >= 900
    assert value("Job heartbeat age", node="gpu-a-001", job_id="6") < 60


def test_the_node_filter_narrows_the_panels(prometheus):
    only = {pq.panel: series(reply) for pq, reply in run_queries(prometheus, variables={"node": "gpu-a-001"})}
    assert {item["metric"]["node"] for item in only["GPU temperature"]} == {"gpu-a-001"}
    assert only["Unhealthy nodes"] == []
