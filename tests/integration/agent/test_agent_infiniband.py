"""InfiniBand health on a lab node: a port taken down in the node's fake sysfs reaches the agent's
metrics, the InfiniBandHealthy condition on the real API server, the journal, a Kubernetes Event
and the GpuNodeInfiniBandDown alert through the real Prometheus and Alertmanager, for that node
only; a single flap reaches the counter and nothing else; the port back up clears it all after the
recovery window. The test lab's windows are short (lab_harness: 3 s down, 15 s to recover)."""

from __future__ import annotations

import time
from typing import Any, Dict, Optional

import pytest
from agent_probe import AgentProbe, nodes_alerting, wait_for

from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_ib

pytestmark = [pytest.mark.integration, pytest.mark.lab]

NODE = "gpu-a-003"
OTHER = "gpu-a-004"


def ib_condition(probe: AgentProbe) -> Optional[Dict[str, Any]]:
    node = probe.lab.kube().read_node(probe.node)
    for condition in node.status.conditions or []:
        if condition.type == "InfiniBandHealthy":
            return {"status": condition.status, "reason": condition.reason, "message": condition.message}
    return None


def wait_ib(probe: AgentProbe, status: str, reason: str, timeout: float = 60) -> Dict[str, Any]:
    def matches() -> Optional[Dict[str, Any]]:
        condition = ib_condition(probe)
        return condition if condition and (condition["status"], condition["reason"]) == (status, reason) else None

    return wait_for(matches, timeout, what="InfiniBandHealthy %s/%s on %s" % (status, reason, probe.node))


@pytest.fixture()
def probe(lab):
    probe = AgentProbe(lab, NODE)
    root = str(probe.gpu_dir / "sys")
    fake_ib.clear(root)
    wait_ib(probe, "True", "IbPortsHealthy")
    yield probe
    fake_ib.clear(root)
    wait_ib(probe, "True", "IbPortsHealthy")


def test_a_port_down_reaches_the_condition_and_the_alert_and_a_single_flap_does_not(probe):
    root = str(probe.gpu_dir / "sys")
    healthy = ib_condition(probe)
    assert healthy["message"] == "healthy: all 2 InfiniBand/RoCE port(s) up", healthy
    assert probe.sample("gpufleet_ib_port_up", hca="mlx5_1", port="1") == 1.0
    assert probe.sample("gpufleet_ib_port_rate_gbps", hca="mlx5_1", port="1") == 400.0
    journal_before, started = len(probe.journal_records()), time.time()

    # One flap: the driver's link_downed counts it, the verdict does not (3 in 5 minutes would).
    downed = probe.sample("gpufleet_ib_port_link_downed_total", hca="mlx5_0", port="1")
    fake_ib.flap(root, "mlx5_0", 1)
    # The states show nothing of a flap this quick: the counter shows at the next full reading (10 s).
    wait_for(lambda: probe.sample("gpufleet_ib_port_link_downed_total", hca="mlx5_0", port="1") == downed + 1, 30,
             what="the flap in the link_downed counter")
    time.sleep(4)  # past the lab's 3 s sticky window
    assert ib_condition(probe)["status"] == "True"
    assert probe.sample("gpufleet_ib_node_verdict", state="healthy") == 1.0
    assert not [r for r in probe.journal_records()[journal_before:] if r["reason"].startswith("Ib")]
    assert NODE not in nodes_alerting("GpuNodeInfiniBandDown")

    # A port down past the sticky window: fatal, everywhere the agent publishes, for this node only.
    fake_ib.set_port(root, "mlx5_1", 1, state="DOWN", phys_state="Disabled")
    down = wait_ib(probe, "False", "IbPortDown")
    assert down["message"].startswith("fatal: mlx5_1/1 down since "), down
    assert probe.sample("gpufleet_ib_port_up", hca="mlx5_1", port="1") == 0.0
    assert probe.sample("gpufleet_ib_node_verdict", state="fatal") == 1.0
    record = wait_for(lambda: [r for r in probe.journal_records()[journal_before:] if r["reason"] == "IbPortDown"],
                      what="the journal's IbPortDown record")[0]
    assert (record["event"], record["source"], record["fault"]["hca"], record["fault"]["port"]) == \
        ("fault", "sysfs", "mlx5_1", 1)
    events = wait_for(lambda: [e for e in probe.events(since=started) if e.reason == "IbPortDown"] or None,
                      what="a Kubernetes Event IbPortDown")
    assert events[0].type == "Warning" and "mlx5_1/1" in events[0].message
    assert wait_for(lambda: nodes_alerting("GpuNodeInfiniBandDown") == [NODE], 30,
                    what="GpuNodeInfiniBandDown firing for %s only" % NODE)
    # The GPUs' condition is the remediation's, and a link is not a GPU fault.
    assert probe.condition()["status"] == "True"
    assert ib_condition(AgentProbe(probe.lab, OTHER))["status"] == "True"

    # Up again: cleared after the recovery window, with its record and Event.
    fake_ib.set_port(root, "mlx5_1", 1, state="ACTIVE", phys_state="LinkUp")
    wait_ib(probe, "True", "IbPortsHealthy")
    cleared = [r for r in probe.journal_records()[journal_before:] if r["event"] == "cleared"]
    assert [r["reason"] for r in cleared] == ["IbPortDown"]
    assert wait_for(lambda: NODE not in nodes_alerting("GpuNodeInfiniBandDown"), 30, what="the alert resolved")
