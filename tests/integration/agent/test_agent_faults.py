"""Faults injected into one lab node reach every place the agent publishes, for that node only.

For each fault: the metric on the agent's endpoint, the GpuHealthy condition with its reason on
the real API server, the JSON line in the node's journal, a Kubernetes Event on the Node, and the
alert firing in the real Alertmanager (through the real Prometheus) for that node and no other.
Then the fault is cleared and the node is healthy again where the catalog allows it.
"""

from __future__ import annotations

import time

import pytest
from agent_probe import AgentProbe, nodes_alerting, prometheus_query, wait_for

from ansible_collections.gpufleet.resilience.plugins.module_utils.health import gpu_condition
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import XidEvent
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.verdict import evaluate

pytestmark = [pytest.mark.integration, pytest.mark.lab]

NODE = "gpu-a-002"
OTHERS = ("gpu-a-001", "gpu-a-003", "gpu-a-004")


@pytest.fixture()
def probe(lab):
    probe = AgentProbe(lab, NODE)
    probe.reset()
    wait_for(lambda: not nodes_alerting("GpuNodeFatal") and not nodes_alerting("GpuNodeDegraded"), 30,
             what="no gpufleet alert left from an earlier test")
    yield probe
    probe.reset()


def assert_others_healthy(lab):
    for other in OTHERS:
        condition = AgentProbe(lab, other).condition()
        assert condition and condition["status"] == "True", (other, condition)


def assert_published(probe, reason, verdict, alert, journal_before, started):
    """``reason``: the condition's reason (or a tuple of the acceptable ones)."""
    reasons = reason if isinstance(reason, tuple) else (reason,)
    condition = probe.wait_condition(lambda c: c["reason"] in reasons, what="reason %s" % (reasons,))
    assert condition["status"] == "False" and condition["message"].startswith(verdict + ", ")
    assert wait_for(lambda: probe.sample("gpufleet_node_health_verdict", state=verdict) == 1.0)
    records = wait_for(lambda: [r for r in probe.journal_records()[journal_before:] if r["reason"] in reasons],
                       what="a journal line with reason %s" % (reasons,))
    assert records[0]["node"] == NODE and records[0]["event"] == "fault"
    events = wait_for(lambda: [e for e in probe.events(since=started) if e.reason in reasons] or None,
                      what="a Kubernetes Event %s" % (reasons,))
    assert events[0].type == "Warning" and events[0].involved_object.name == NODE
    assert wait_for(lambda: nodes_alerting(alert) == [NODE], 20, what="%s firing for %s only" % (alert, NODE))
    return condition, records[0]


def snapshot_before(probe):
    """The journal's length and the time now: what a test's own records come after."""
    return len(probe.journal_records()), time.time()


def test_every_active_node_has_an_agent_and_is_healthy(lab):
    for node in ("gpu-a-001", NODE, *OTHERS[1:]):
        probe = AgentProbe(lab, node)
        assert probe.sample("gpufleet_agent_up") == 1.0
        assert probe.sample("gpufleet_agent_info", node=node) == 1.0
        condition = probe.wait_condition(lambda c: c["status"] == "True")
        assert condition["reason"] == "GpusHealthy" and condition["message"] == "8 GPUs healthy"
    # Prometheus scrapes every agent, with the node label the scrape adds.
    every = ["gpu-a-001", "gpu-a-002", "gpu-a-003", "gpu-a-004"]

    def scraped():
        result = prometheus_query('up{job="gpufleet-agent"} == 1')["data"]["result"]
        return sorted(series["metric"]["node"] for series in result)

    assert wait_for(lambda: scraped() == every, 30, what="Prometheus scraping every agent")


def test_xid79_from_nvml(lab, probe):
    journal, events = snapshot_before(probe)
    gpu = probe.gpu(3)
    probe.fakegpu("xid", "--gpu", "3", "--xid", "79")
    condition, record = assert_published(probe, "Xid79", "fatal", "GpuNodeFatal", journal, events)
    # The message names the GPU by index, UUID and PCI bus id.
    assert "GPU 3 (%s, 0000:%s)" % (gpu["uuid"], gpu["pci_bus_id"].split(":", 1)[1].lower()) in condition["message"]
    # Machines read the same fault from it through the codec: verdict, action, XIDs, the device.
    fault = gpu_condition.decode(condition)
    assert (fault.verdict, fault.action, fault.reason, fault.xids, fault.gpu_index, fault.gpu_uuid) == (
        "fatal", "RESTART_BM", "Xid79", (79,), 3, gpu["uuid"])
    assert fault.pci_bus_id.lower().endswith(gpu["pci_bus_id"].split(":", 1)[1].lower())
    assert record["fault"]["action"] == "RESTART_BM" and record["source"] == "nvml"
    assert probe.sample("gpufleet_gpu_xid_errors_total", gpu="3", xid="79", action="RESTART_BM") == 1.0
    assert probe.sample("gpufleet_gpu_health", gpu="3", state="fatal") == 1.0
    assert probe.sample("gpufleet_gpu_health", gpu="2", state="healthy") == 1.0
    assert_others_healthy(lab)
    # XID 79 needs a reboot: clearing the fake GPU alone does not make the node healthy.
    probe.fakegpu("clear")
    time.sleep(2.5)
    assert probe.condition()["reason"] == "Xid79"


def test_xid48_with_63_is_judged_as_gpu_health_judges_it(lab, probe):
    journal, events = snapshot_before(probe)
    probe.fakegpu("xid", "--gpu", "1", "--xid", "48")
    probe.fakegpu("xid", "--gpu", "1", "--xid", "63")
    reference = evaluate([XidEvent(xid=48, source="nvml", gpu_index=1, timestamp=1.0),
                          XidEvent(xid=63, source="nvml", gpu_index=1, timestamp=1.1)])
    worst = next(fault for fault in reference.faults if fault.effective)
    reason = "Xid%d" % worst.xid
    assert_published(probe, reason, reference.state, "GpuNodeFatal" if reference.state == "fatal"
                     else "GpuNodeDegraded", journal, events)
    condition = probe.condition()
    assert condition["message"].startswith("%s, %s:" % (reference.state, reference.action))
    assert probe.sample("gpufleet_gpu_xid_errors_total", gpu="1", xid="63") is not None


def test_double_bit_ecc_clears_with_the_counter(lab, probe):
    journal, events = snapshot_before(probe)
    probe.fakegpu("set", "--gpu", "5", "ecc_dbe_volatile=1", "ecc_dbe_aggregate=1")
    assert_published(probe, "EccDoubleBit", "fatal", "GpuNodeFatal", journal, events)
    assert wait_for(lambda: nodes_alerting("GpuEccUncorrectableErrors") == [NODE], 20)
    assert probe.sample("gpufleet_gpu_ecc_errors_total", gpu="5", type="uncorrectable", counter="volatile") == 1.0
    # A GPU reset clears the volatile counter: the node is healthy again, no agent reset needed.
    probe.fakegpu("set", "--gpu", "5", "ecc_dbe_volatile=0")
    probe.wait_condition(lambda c: c["status"] == "True", what="healthy after the counter cleared")
    assert next(r for r in probe.journal_records()[journal:] if r["event"] == "cleared")["reason"] == "EccDoubleBit"


def test_over_temperature_with_thermal_slowdown(lab, probe):
    journal, events = snapshot_before(probe)
    probe.fakegpu("set", "--gpu", "0", "temperature=96", "throttle_reasons=%d" % 0x40)
    # Both faults are seen (clocks throttled for heat, and the temperature over its limit); the
    # condition names the one the verdict ranks first.
    condition, _record = assert_published(probe, ("ThermalThrottle", "OverTemperature"), "degraded",
                                          "GpuNodeDegraded", journal, events)
    assert "CONTACT_SUPPORT" in condition["message"]
    assert wait_for(lambda: nodes_alerting("GpuThermalSlowdown") == [NODE], 20)
    assert probe.sample("gpufleet_gpu_temperature_celsius", gpu="0") == 96.0
    assert probe.sample("gpufleet_gpu_throttle_reasons", gpu="0", reason="hw_thermal_slowdown") == 1.0
    probe.fakegpu("clear")
    probe.wait_condition(lambda c: c["status"] == "True", what="healthy once cool")


def test_gpu_lost(lab, probe):
    journal, events = snapshot_before(probe)
    probe.fakegpu("lost", "--gpu", "6")
    assert_published(probe, "GpuLost", "fatal", "GpuNodeFatal", journal, events)
    assert probe.sample("gpufleet_gpu_lost", gpu="6") == 1.0
    assert probe.sample("gpufleet_agent_up") == 1.0  # a lost GPU is a verdict, not an agent failure


def test_kernel_log_only_xid(lab, probe):
    journal, events = snapshot_before(probe)
    gpu = probe.gpu(2)
    bus = gpu["pci_bus_id"].split(":", 1)[1]  # "18:00.0" style, as the driver prints it
    # dmesg's stamp is seconds since this host booted: the line is written now, so it says now.
    with open("/proc/uptime") as uptime:
        now = float(uptime.read().split()[0])
    probe.kernel_line("[%12.6f] NVRM: Xid (PCI:0000:%s): 94, pid=2301, name=python3, "
                      "Contained: CE User Channel (0x9). RST: No, D-RST: No" % (now, bus))
    reference = evaluate([XidEvent(xid=94, source="kernel_log", gpu_index=2)])
    alert = "GpuNodeFatal" if reference.state == "fatal" else "GpuNodeDegraded"
    condition, record = assert_published(probe, "Xid94", reference.state, alert, journal, events)
    assert record["source"] == "kernel_log" and record["raw"].endswith("D-RST: No")
    assert record["fault"]["gpu_index"] == 2 and record["fault"]["gpu_uuid"] == gpu["uuid"]
    assert "GPU 2" in condition["message"]


def test_xid45_alone_vs_with_79(lab, probe):
    alone = evaluate([XidEvent(xid=45, source="nvml", gpu_index=4, timestamp=1.0)])
    probe.fakegpu("xid", "--gpu", "4", "--xid", "45")
    wait_for(lambda: probe.sample("gpufleet_gpu_xid_errors_total", gpu="4", xid="45") == 1.0)
    # Polled, not a sleep and one look: on a loaded machine the verdict may lag the counter.
    wait_for(lambda: probe.sample("gpufleet_node_health_verdict", state=alone.state) == 1.0,
             what="the %s verdict of XID 45 alone" % alone.state)
    together = evaluate([XidEvent(xid=45, source="nvml", gpu_index=4, timestamp=1.0),
                         XidEvent(xid=79, source="nvml", gpu_index=4, timestamp=1.1)])
    probe.fakegpu("xid", "--gpu", "4", "--xid", "79")
    condition = probe.wait_condition(lambda c: c["reason"] == "Xid79")
    # Next to 79, 45 is the driver cleaning up after it: IGNOREd, so only 79 is in the message.
    assert condition["message"].startswith("%s, %s:" % (together.state, together.action))
    assert "XID 45" not in condition["message"]
