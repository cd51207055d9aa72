# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.metrics import (
    Exposition,
    MetricsView,
    render,
    serve,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.network import NetworkWatch
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.infiniband import IbThresholds
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import GpuSnapshot, NvLinkStatus
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_ib

UUID = "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd"
T0 = 1_800_000_000.0


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


# ---- the exposition: NVLink text kept until the links change; the endpoint ----------------------


def links(errors: int = 0, active: bool = True):
    return tuple(NvLinkStatus(link=link, active=active, crc_flit_errors=errors, crc_data_errors=0, replay_errors=0,
                              recovery_errors=0) for link in range(18))


def eight_gpus(**changes):
    snapshots = [GpuSnapshot(index=index, uuid="GPU-%d" % index, temperature_c=40, nvlinks=links())
                 for index in range(8)]
    for index, nvlinks in changes.items():
        snapshots[int(index[1:])] = GpuSnapshot(index=int(index[1:]), uuid="GPU-%s" % index[1:], temperature_c=40,
                                                nvlinks=nvlinks)
    return view(snapshots=snapshots, uuids={index: "GPU-%d" % index for index in range(8)})


def test_the_nvlink_text_is_rendered_again_only_when_a_link_changes():
    current = [eight_gpus()]
    exposition = Exposition(lambda: current[0])
    first = exposition.render()
    kept = exposition._nvlink._text
    current[0] = eight_gpus()  # a new snapshot with the same links (equal, not the same objects)
    current[0].loop_lag = 0.25
    second = exposition.render()
    assert exposition._nvlink._text is kept  # not rendered again
    assert b"gpufleet_agent_loop_lag_seconds 0.25" in second and second != first
    current[0] = eight_gpus(g3=links(errors=12))
    third = exposition.render()
    assert exposition._nvlink._text is not kept
    found = {(s.name, tuple(sorted(s.labels.items()))): s.value
             for f in text_string_to_metric_families(third.decode()) for s in f.samples}
    assert found[("gpufleet_gpu_nvlink_errors_total",
                  (("gpu", "3"), ("kind", "crc_flit"), ("link", "17"), ("uuid", "GPU-3")))] == 12
    current[0] = eight_gpus(g5=links(active=False))
    assert b'gpufleet_gpu_nvlink_active{gpu="5",link="0",uuid="GPU-5"} 0.0' in exposition.render()


def test_the_infiniband_text_is_rendered_again_only_when_a_port_changes(tmp_path):
    root = str(tmp_path)
    fake_ib.create_tree(root, ["mlx5_0", "mlx5_1"])
    network = NetworkWatch("gpu-a-001", root, IbThresholds())
    network.tick(T0)
    exposition = Exposition(lambda: view(network=network.view))
    exposition.render()
    kept = exposition._network._text
    fake_ib.bump_counter(root, "mlx5_1", 1, "symbol_error", 9)
    network.tick(T0 + 1)  # light: the states only, so the same ports
    exposition.render()
    assert exposition._network._text is kept
    network.tick(T0 + 60)  # full: the counter changed
    text = exposition.render()
    assert exposition._network._text is not kept
    assert samples_of(text)[("gpufleet_ib_port_symbol_error_total",
                             (("hca", "mlx5_1"), ("link_layer", "InfiniBand"), ("port", "1")))] == 9
    assert samples_of(text) == samples_of(Exposition(lambda: view(network=network.view)).render())


def test_the_cached_text_is_what_a_whole_render_gives():
    """Every series of a view, cached or not, is the one the view has: 8 GPUs x 18 links x 5 NVLink
    series, and the rest."""
    exposition = Exposition(lambda: eight_gpus(g1=links(errors=3)))
    exposition.render()
    again = samples_of(exposition.render())
    fresh = samples_of(Exposition(lambda: eight_gpus(g1=links(errors=3))).render())
    assert again == fresh
    assert sum(1 for name, _labels in fresh if name.startswith("gpufleet_gpu_nvlink_")) == 8 * 18 * 5
    assert fresh[("gpufleet_gpu_nvlink_errors_total",
                  (("gpu", "1"), ("kind", "crc_flit"), ("link", "0"), ("uuid", "GPU-1")))] == 3


def samples_of(text: bytes):
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text.decode()) for s in f.samples}


def test_the_endpoint_serves_the_text_format_on_metrics_only_and_stops():
    server = serve(eight_gpus, "127.0.0.1", 0)
    base = "http://127.0.0.1:%d" % server.server_port
    try:
        with urllib.request.urlopen(base + "/metrics", timeout=5) as answer:
            assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            body = answer.read()
        assert ("gpufleet_agent_up", ()) in samples_of(body)
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(base + "/other", timeout=5)
        assert missing.value.code == 404
        assert server._thread.is_alive()
    finally:
        server.shutdown()
        server.server_close()
    assert not server._thread.is_alive()
    with pytest.raises(OSError):
        urllib.request.urlopen(base + "/metrics", timeout=2)


def test_the_endpoint_thread_sleeps_between_scrapes():
    """Unscraped, the serving thread does not wake: its CPU time stays flat over a second."""
    server = serve(eight_gpus, "127.0.0.1", 0)
    try:
        time.sleep(0.2)
        clock = time.pthread_getcpuclockid(server._thread.ident)
        before = time.clock_gettime(clock)
        time.sleep(1.0)
        spent = time.clock_gettime(clock) - before
    finally:
        server.shutdown()
        server.server_close()
    # serve_forever's two polls a second spent about 60 µs of it here; a sleeping thread spends nothing.
    assert spent < 0.00001, spent
