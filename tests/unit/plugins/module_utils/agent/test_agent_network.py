# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The agent's IB watch on a fake sysfs tree (lab/fake_ib): the condition, the journal records
and the metrics, with the judge's sticky and recovery windows."""

from __future__ import annotations

from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.metrics import MetricsView, render
from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.network import (
    CONDITION_TYPE,
    FULL_EVERY_S,
    NetworkWatch,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.infiniband import IbThresholds
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_ib

T0 = 1_800_000_000.0


def watch(tmp_path, **thresholds):
    root = str(tmp_path / "sys")
    fake_ib.create_tree(root, ["mlx5_0", "mlx5_1"])
    return root, NetworkWatch("gpu-a-001", root, IbThresholds(**thresholds))


def test_a_node_without_hcas_has_no_condition(tmp_path):
    network = NetworkWatch("gpu-a-001", str(tmp_path), IbThresholds())
    assert network.tick(T0) == [] and network.condition() is None
    assert network.view.ports == [] and network.view.verdict == "healthy"


def test_healthy_ports_give_a_true_condition(tmp_path):
    _root, network = watch(tmp_path)
    assert network.tick(T0) == []
    condition = network.condition()
    assert (condition.type, condition.status, condition.reason) == (CONDITION_TYPE, "True", "IbPortsHealthy")
    assert "2 InfiniBand/RoCE port(s) up" in condition.message


def test_a_port_down_past_the_sticky_window_is_fatal_once_and_clears_after_recovery(tmp_path):
    root, network = watch(tmp_path, down_after_s=10, recover_after_s=60)
    network.tick(T0)
    fake_ib.set_port(root, "mlx5_1", 1, state="DOWN", phys_state="Disabled")
    assert network.tick(T0 + 1) == [] and network.condition().status == "True"  # not yet: sticky window
    records = network.tick(T0 + 12)
    assert [(r["event"], r["reason"], r["fault"]["hca"]) for r in records] == [("fault", "IbPortDown", "mlx5_1")]
    condition = network.condition()
    assert (condition.status, condition.reason) == ("False", "IbPortDown")
    assert condition.message.startswith("fatal: mlx5_1/1 down since ")
    # The message names when it began, not a running figure: equal on the next tick (no write per second).
    assert network.tick(T0 + 13) == [] and network.condition() == condition
    fake_ib.set_port(root, "mlx5_1", 1, state="ACTIVE", phys_state="LinkUp")
    assert network.tick(T0 + 20) == [] and network.condition().status == "False"  # recovery window
    cleared = network.tick(T0 + 81)
    assert [(r["event"], r["reason"]) for r in cleared] == [("cleared", "IbPortDown")]
    assert network.condition().status == "True" and network.view.verdict == "healthy"


def test_a_single_flap_is_nothing_and_three_are_flapping(tmp_path):
    root, network = watch(tmp_path, flap_count=3, flap_window_s=300)
    network.tick(T0)
    fake_ib.flap(root, "mlx5_0", 1)
    network.tick(T0 + 1)
    assert network.tick(T0 + 2) == [] and network.condition().status == "True"
    fake_ib.flap(root, "mlx5_0", 1, times=2)
    records = network.tick(T0 + 30)
    assert [(r["event"], r["reason"]) for r in records] == [("fault", "IbLinkFlapping")]
    assert network.condition().reason == "IbLinkFlapping" and network.view.verdict == "fatal"


def test_metrics_show_the_ports_and_the_verdict(tmp_path):
    root, network = watch(tmp_path, down_after_s=0)
    network.tick(T0)
    fake_ib.set_port(root, "mlx5_0", 1, state="DOWN", phys_state="Polling")
    network.tick(T0 + 1)
    text = render(MetricsView(node="gpu-a-001", version="t", driver_version="", kernel_log_source="none", up=True,
                              network=network.view))
    assert 'gpufleet_ib_node_verdict{state="fatal"} 1.0' in text
    assert 'gpufleet_ib_port_up{hca="mlx5_0",link_layer="InfiniBand",port="1"} 0.0' in text
    assert 'gpufleet_ib_port_up{hca="mlx5_1",link_layer="InfiniBand",port="1"} 1.0' in text
    assert 'gpufleet_ib_port_link_downed_total{hca="mlx5_0",link_layer="InfiniBand",port="1"} 1.0' in text
    assert 'gpufleet_ib_port_rate_gbps{hca="mlx5_1",link_layer="InfiniBand",port="1"} 400.0' in text
    off = render(MetricsView(node="gpu-a-001", version="t", driver_version="", kernel_log_source="none", up=True))
    assert "gpufleet_ib_" not in off


def counter(network, name, port=0):
    return network.view.ports[port].counters[name]


def test_counters_are_read_every_full_every_s_and_at_once_when_a_state_changes(tmp_path):
    root, network = watch(tmp_path, down_after_s=30)
    network.tick(T0)
    fake_ib.bump_counter(root, "mlx5_0", 1, "symbol_error", 4)
    network.tick(T0 + 1)
    assert counter(network, "symbol_error") == 0  # a light reading: the states only
    network.tick(T0 + FULL_EVERY_S)
    assert counter(network, "symbol_error") == 4
    fake_ib.bump_counter(root, "mlx5_0", 1, "symbol_error", 3)
    fake_ib.set_port(root, "mlx5_0", 1, state="DOWN", phys_state="Polling")
    network.tick(T0 + FULL_EVERY_S + 1)
    assert counter(network, "symbol_error") == 7 and network.view.ports[0].state == "DOWN"
    # While a port is down every reading is full, before any finding (down_after_s is 30 here).
    fake_ib.bump_counter(root, "mlx5_0", 1, "symbol_error", 1)
    network.tick(T0 + FULL_EVERY_S + 2)
    assert counter(network, "symbol_error") == 8 and network.findings == []


def test_flaps_between_state_readings_are_found_at_the_next_full_reading(tmp_path):
    root, network = watch(tmp_path, flap_count=3, flap_window_s=300)
    network.tick(T0)
    fake_ib.flap(root, "mlx5_1", 1, times=3)  # up again before the next reading: link_downed shows it
    assert network.tick(T0 + 1) == []
    records = network.tick(T0 + FULL_EVERY_S)
    assert [(r["event"], r["reason"], r["fault"]["hca"]) for r in records] == [("fault", "IbLinkFlapping", "mlx5_1")]


def test_a_clock_that_went_back_reads_in_full(tmp_path):
    root, network = watch(tmp_path)
    network.tick(T0)
    fake_ib.bump_counter(root, "mlx5_0", 1, "port_rcv_errors", 2)
    network.tick(T0 - 3600)
    assert counter(network, "port_rcv_errors") == 2
