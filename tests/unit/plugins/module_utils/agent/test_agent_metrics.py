# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.metrics import MetricsView, render
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import GpuSnapshot, NvLinkStatus

UUID = "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd"


def samples(view):
    found = {}
    for family in text_string_to_metric_families(render(view)):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def view(**changes):
    base = MetricsView(node="gpu-a-001", version="0.3.0", driver_version="580.95.05", kernel_log_source="file",
                       up=True, verdict="fatal", gpu_states={0: "fatal", 1: "healthy"}, uuids={0: UUID, 1: ""},
                       xid_counts={(0, UUID, 79, "RESTART_BM"): 2}, errors={"kubernetes": 3},
                       snapshots=[
                           GpuSnapshot(index=0, uuid=UUID, temperature_c=91, power_w=412.5, ecc_dbe_volatile=1,
                                       ecc_sbe_volatile=4, ecc_sbe_aggregate=None, remapped_rows_failed=True,
                                       throttle_reasons=0x40,
                                       nvlinks=(NvLinkStatus(link=0, active=False, crc_flit_errors=7),)),
                           GpuSnapshot(index=1, lost=True),
                       ])
    for key, value in changes.items():
        setattr(base, key, value)
    return base


def test_names_units_and_labels_follow_the_conventions():
    found = samples(view())
    gpu0 = (("gpu", "0"), ("uuid", UUID))
    xid79 = (("action", "RESTART_BM"), ("gpu", "0"), ("uuid", UUID), ("xid", "79"))
    assert found[("gpufleet_gpu_xid_errors_total", xid79)] == 2
    assert found[("gpufleet_gpu_temperature_celsius", gpu0)] == 91
    assert found[("gpufleet_gpu_power_watts", gpu0)] == 412.5
    dbe = tuple(sorted((*gpu0, ("counter", "volatile"), ("type", "uncorrectable"))))
    assert found[("gpufleet_gpu_ecc_errors_total", dbe)] == 1
    assert found[("gpufleet_gpu_remapped_rows", tuple(sorted((*gpu0, ("kind", "failed")))))] == 1
    assert found[("gpufleet_gpu_nvlink_errors_total", tuple(sorted((*gpu0, ("kind", "crc_flit"), ("link", "0")))))] == 7
    assert found[("gpufleet_gpu_nvlink_active", tuple(sorted((*gpu0, ("link", "0")))))] == 0
    assert found[("gpufleet_gpu_throttle_reasons", tuple(sorted((*gpu0, ("reason", "hw_thermal_slowdown")))))] == 1
    assert found[("gpufleet_gpu_throttle_reasons", tuple(sorted((*gpu0, ("reason", "gpu_idle")))))] == 0
    assert found[("gpufleet_node_health_verdict", (("state", "fatal"),))] == 1
    assert found[("gpufleet_node_health_verdict", (("state", "healthy"),))] == 0
    assert found[("gpufleet_gpu_health", (("gpu", "0"), ("state", "fatal"), ("uuid", UUID)))] == 1
    assert found[("gpufleet_agent_errors_total", (("source", "kubernetes"),))] == 3
    assert found[("gpufleet_agent_errors_total", (("source", "slurm"),))] == 0
    assert found[("gpufleet_gpu_lost", (("gpu", "1"), ("uuid", "")))] == 1
    assert found[("gpufleet_agent_up", ())] == 1
    # No node name in any metric name; the node only in the info series.
    assert all("gpu-a-001" not in name for name, _labels in found)
    assert next(labels for name, labels in found if name == "gpufleet_agent_info")[2] == ("node", "gpu-a-001")


def test_fields_nvml_does_not_support_are_absent_not_zero():
    found = samples(view())
    assert not [key for key in found if key[0] == "gpufleet_gpu_ecc_errors_total"
                and ("counter", "aggregate") in key[1] and ("type", "correctable") in key[1]]
    # A lost GPU has only its lost flag.
    assert not [key for key in found if key[0] == "gpufleet_gpu_temperature_celsius" and ("gpu", "1") in key[1]]


def test_agent_down_reads_zero():
    assert samples(view(up=False))[("gpufleet_agent_up", ())] == 0


def test_a_light_snapshot_keeps_the_last_nvlink_counters():
    from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.loop import with_previous_counters

    full = [GpuSnapshot(index=0, nvlinks=(NvLinkStatus(link=0, active=True, crc_flit_errors=7, crc_data_errors=1,
                                                       replay_errors=2, recovery_errors=0),))]
    light = [GpuSnapshot(index=0, nvlinks=(NvLinkStatus(link=0, active=False),))]
    merged = with_previous_counters(light, full)
    assert merged[0].nvlinks[0].active is False and merged[0].nvlinks[0].crc_flit_errors == 7
    assert merged[0].nvlinks[0].replay_errors == 2
