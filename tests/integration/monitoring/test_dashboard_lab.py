"""The Grafana dashboard on the lab's own Prometheus, scraping the real agents: every query runs
without an error, and after a fault the main panels show it."""

from __future__ import annotations

import time

import pytest
from agent_probe import AgentProbe, prometheus_url, wait_for
from dashboard_queries import run_queries

pytestmark = [pytest.mark.integration, pytest.mark.lab]

NODE = "gpu-a-002"


def series(reply):
    return reply["data"]["result"] if reply.get("status") == "success" else []


def by_panel(replies):
    found = {}
    for query, reply in replies:
        found.setdefault(query.panel, []).extend(series(reply))
    return found


def test_every_panel_runs_and_shows_the_fault(lab):
    probe = AgentProbe(lab, NODE)
    probe.reset()
    try:
        probe.fakegpu("set", "--gpu", "1", "ecc_dbe_volatile=2", "temperature=90", "throttle_reasons=%d" % 0x40)
        probe.fakegpu("xid", "--gpu", "1", "--xid", "79")
        probe.wait_condition(lambda c: c["reason"] == "Xid79")
        time.sleep(3)  # a few 1 s scrapes, so rates and ranges have samples

        def fatal_shown():
            panels = by_panel(run_queries(prometheus_url()))
            return panels if any(float(s["value"][1]) >= 1 for s in panels.get("Fatal nodes", [])) else None

        panels = wait_for(fatal_shown, 20, interval=1.0, what="the Fatal nodes panel counting the node")
        replies = run_queries(prometheus_url())
        errors = [(query.panel, reply.get("error")) for query, reply in replies if reply.get("status") != "success"]
        assert errors == []
        unhealthy = {s["metric"]["node"]: s["metric"]["state"] for s in panels["Unhealthy nodes"]}
        assert unhealthy == {NODE: "fatal"}
        assert {s["metric"]["xid"] for s in panels["XIDs by code"]} >= {"79"}
        ecc = [s for s in panels["ECC errors since the last reset (volatile)"]
               if s["metric"]["node"] == NODE and s["metric"]["gpu"] == "1" and s["metric"]["type"] == "uncorrectable"]
        assert ecc and float(ecc[0]["value"][1]) == 2.0
        hot = [s for s in panels["GPU temperature"] if s["metric"]["node"] == NODE and s["metric"]["gpu"] == "1"]
        assert hot and float(hot[0]["value"][1]) == 90.0
        assert {s["metric"]["reason"] for s in panels["Clock-event reasons (GPUs affected)"]} >= {"hw_thermal_slowdown"}
        for panel in ("GPU power", "Agent up (scrape and NVML)", "Snapshot age", "Nodes by verdict"):
            assert panels[panel], panel
        # Every agent of the first pool (a pool added by an earlier test may have more).
        answering = {s["metric"]["node"] for s in panels["Agent up (scrape and NVML)"]}
        assert answering >= {"gpu-a-001", "gpu-a-002", "gpu-a-003", "gpu-a-004"}
    finally:
        probe.reset()
