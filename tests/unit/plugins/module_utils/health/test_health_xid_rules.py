# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.health.kernel_log import parse_kernel_log
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import (
    GpuInfo,
    GpuSnapshot,
    NvLinkStatus,
    Thresholds,
    XidEvent,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.xid_rules import (
    classify,
    decode_nvlink5,
    faults_from_snapshot,
    occurrences,
    recovery_action_from_text,
)

GPU_A = "0000:3b:00.0"
GPU_B = "0000:5b:00.0"
T0 = 1_795_000_000.0


def event(xid, pci=GPU_A, message="", timestamp=None, source="kernel_log", **extra):
    return XidEvent(xid=xid, source=source, pci_bus_id=pci, message=message, timestamp=timestamp, **extra)


def only(faults, xid):
    found = [fault for fault in faults if fault.xid == xid]
    assert len(found) == 1, faults
    return found[0]


# ------------------------------------------------------------------ XID 45

def test_xid45_alone_takes_the_catalog_action_and_is_non_fatal():
    fault = only(classify([event(45, message="pid=7, name=python, Ch 00000010")]), 45)
    assert fault.action == "RESTART_FM"
    assert fault.severity == "non-fatal"
    assert fault.effective


@pytest.mark.parametrize("other", [13, 31, 43, 48, 63, 79, 94, 95, 999])
def test_xid45_with_another_xid_on_the_same_gpu_is_ignored(other):
    faults = classify([event(other, timestamp=T0), event(45, timestamp=T0 + 1)])
    fault = only(faults, 45)
    assert fault.action == "IGNORE"
    assert not fault.effective
    assert str(other) in fault.detail


def test_xid45_with_another_xid_on_another_gpu_is_still_alone():
    faults = classify([event(48, pci=GPU_B), event(45, pci=GPU_A)])
    assert only(faults, 45).action == "RESTART_FM"


def test_repeated_xid45_is_never_escalated():
    # One job crash logs XID 45 on every GPU it held; a peer's "repeats are fatal" rule
    # flagged 77 nodes across 11 racks. However often it repeats, it stays non-fatal.
    events = [event(45, pci="0000:%02x:00.0" % gpu, timestamp=T0 + 60 * n) for gpu in range(8) for n in range(20)]
    faults = classify(events, Thresholds(repeat_escalation_count=2, app_repeat_escalation_count=2))
    assert len(faults) == 8
    for fault in faults:
        assert fault.count == 20
        assert fault.severity == "non-fatal" and fault.action == "RESTART_FM" and not fault.escalated


# ------------------------------------------------------------------ XID 48

def test_xid48_alone_resets_the_gpu():
    fault = only(classify([event(48, message="An uncorrectable double bit error (DBE) has been detected")]), 48)
    assert (fault.action, fault.severity) == ("RESET_GPU", "fatal")


@pytest.mark.parametrize("partner", [63, 64])
def test_xid48_with_63_or_64_drains_and_resets(partner):
    faults = classify([event(48, timestamp=T0), event(partner, timestamp=T0 + 2)])
    fault = only(faults, 48)
    assert (fault.action, fault.severity) == ("DRAIN_AND_RESET", "fatal")
    assert str(partner) in fault.detail


def test_xid48_with_63_on_another_gpu_is_a_plain_reset():
    faults = classify([event(48, pci=GPU_A), event(63, pci=GPU_B)])
    assert only(faults, 48).action == "RESET_GPU"
    assert only(faults, 63).action == "IGNORE"


# ----------------------------------------------------------------- XID 154

@pytest.mark.parametrize(
    "text, action, severity",
    [
        ("GPU recovery action changed from 0x0 (None) to 0x0 (None)", "IGNORE", "non-fatal"),
        ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", "RESET_GPU", "fatal"),
        ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", "RESTART_BM", "fatal"),
        ("GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)", "DRAIN_AND_RESET", "fatal"),
        ("GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)", "DRAIN_AND_RESET", "fatal"),
        ("GPU recovery action changed from 0x0 (None) to 0x5 (Recover IMEX Domain)", "CONTACT_SUPPORT", "non-fatal"),
        ("GPU recovery action changed from 0x4 (Drain and Reset) to 0x1 (GPU Reset Required)", "RESET_GPU", "fatal"),
        ("Xid 154 GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", "RESTART_BM", "fatal"),
        # The label alone decides when the code is missing, the code wins over a wrong label.
        ("GPU recovery action changed from None to (Node Reboot Required)", "RESTART_BM", "fatal"),
        ("GPU recovery action changed from 0x0 (None) to 0x1 (Drain and Reset)", "RESET_GPU", "fatal"),
        # Unknown code or no text: a human looks, it is never ignored.
        ("GPU recovery action changed from 0x0 (None) to 0x9 (Reticulate Splines)", "CONTACT_SUPPORT", "non-fatal"),
        ("GPU recovery action changed", "CONTACT_SUPPORT", "non-fatal"),
        ("", "CONTACT_SUPPORT", "non-fatal"),
    ],
)
def test_xid154_takes_its_action_from_the_text(text, action, severity):
    assert (recovery_action_from_text(text).action, recovery_action_from_text(text).severity) == (action, severity)
    fault = only(classify([event(154, message=text)]), 154)
    assert (fault.action, fault.severity) == (action, severity)
    assert fault.message == text


def test_latest_xid154_wins_so_a_recovered_gpu_is_healthy():
    faults = classify([
        event(154, message="GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", timestamp=T0),
        event(154, message="GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)",
              timestamp=T0 + 300),
    ])
    fault = only(faults, 154)
    assert fault.action == "IGNORE" and fault.count == 2


def test_xid154_is_never_escalated():
    text = "GPU recovery action changed from 0x0 (None) to 0x9 (Future Thing)"
    faults = classify([event(154, message=text, timestamp=T0 + 600 * n) for n in range(5)])
    assert only(faults, 154).severity == "non-fatal"


# ---------------------------------------------------------- XID 74, 144-150

def test_xid74_is_decode_with_the_raw_text_kept():
    text = "Link 13 (0x00000000 0x00000000 0x00800000 0x00000000 0x00000000 0x00000000 0x00000000)"
    fault = only(classify([event(74, message=text)]), 74)
    assert fault.action == "DECODE" and fault.message == text and fault.severity == "non-fatal"


@pytest.mark.parametrize("xid", range(144, 151))
def test_nvlink5_without_registers_is_decode_with_raw_text(xid):
    text = "pid=11, name=x, SOMETHING_NEW Nonfatal XC0 i0 Link 03"
    fault = only(classify([event(xid, message=text)]), xid)
    assert fault.action == "DECODE" and fault.message == text


@pytest.mark.parametrize(
    "xid, text, action, severity, version",
    [
        # Captured-style lines (see the catalog's 144-150 sheet for each row).
        (149, "NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 0x00000000 0x00000000 0x00000000 0x00000000 "
              "0x00000000 0x00000000)", "RESET_GPU", "fatal", "V1"),
        (149, "NETIR_BER_EVENT Nonfatal XC0 i0 Link 03 (0x00086226 0x00000001 0x00000000 0x00000000 0x00000000 "
              "0x00000000)", "IGNORE", "non-fatal", "V1"),
        (149, "NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
         "RESET_GPU", "fatal", "V1"),
        (145, "pid=876767, name=ray::WorkerDict, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 "
              "0x00000001 0x00000000 0x00100000 0x00000004)", "IGNORE", "non-fatal", "V1"),
        # Promotable row: the action-2 bit (IntrInfo[10]) set makes RLW_RXPIPE fatal.
        (145, "RLW_RXPIPE Fatal XC0 i0 Link 13 (0x000004c2 0x00000001 0x0 0x0 0x0 0x0)", "RESET_GPU", "fatal", "V1"),
        # V2 (driver >= R575) subcode name and bit layout.
        (149, "NETIR_LINK_DOWN Fatal XC0 i0 Link 08 (0x00400011 0x00000000 0x0 0x0 0x0 0x0)", "RESET_GPU", "fatal",
         "V2"),
        (144, "SAW_MVB Fatal XC0 i0 Link 02 (0x00000021 0x00000002 0x0 0x0 0x0 0x0)", "RESET_GPU", "fatal", "V1"),
        (150, "MSE_WATCHDOG Fatal XC0 i0 Link -1 (0x00000000 0x00000000 0x0 0x0 0x0 0x0)", "RESET_GPU", "fatal",
         "V1/V2"),
    ],
)
def test_nvlink5_decode(xid, text, action, severity, version):
    decoded = decode_nvlink5(xid, text)
    assert decoded is not None
    assert (decoded.action, decoded.severity, decoded.version) == (action, severity, version)
    fault = only(classify([event(xid, message=text)]), xid)
    assert (fault.action, fault.severity) == (action, severity)
    assert fault.message == text and "NVLink5 decode" in fault.detail


def test_nvlink5_decode_reads_the_link_and_registers():
    decoded = decode_nvlink5(149, "NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 0x00000000 0x0)")
    assert (decoded.link, decoded.intr_info, decoded.error_status) == (8, 0x004505C6, 0)
    assert decoded.subcode == "NETIR_LINK_EVT/NETIR_LINK_DOWN"
    assert decoded.investigatory_action == "INVESTIGATE_LINK_SI"


def test_nvlink5_multi_bit_status_decodes_bit_by_bit_and_takes_the_worst():
    # RLW_SRC_TRACK lists 0x1 (RESET_GPU) and 0x2 (IGNORE) but not 0x3.
    decoded = decode_nvlink5(145, "RLW_SRC_TRACK Nonfatal XC1 i0 Link 12 (0x000000e2 0x00000003 0x0)")
    assert decoded.action == "RESET_GPU"
    # A bit no row lists leaves the whole message undecoded.
    assert decode_nvlink5(145, "RLW_SRC_TRACK Nonfatal XC1 i0 Link 12 (0x000000e2 0x40000002 0x0)") is None
    assert decode_nvlink5(145, "RLW_SRC_TRACK Nonfatal XC1 i0 Link 12 (0x000000e2 0x12345678 0x0)") is None


def test_nvlink5_decode_rejects_non_nvlink5_and_truncated_lines():
    assert decode_nvlink5(79, "NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000)") is None
    assert decode_nvlink5(149, "NETIR Fatal XC0 i0 Link -1 (0x000fe406") is None
    # A subcode name that contradicts the bits is not forced onto a row.
    assert decode_nvlink5(149, "NETIR_BER_EVENT Fatal XC0 i0 Link 08 (0x004505c6 0x00000000 0x0)") is None


SRC_TRACK_154_EVAL = "RLW_SRC_TRACK Nonfatal XC1 i0 Link 12 (0x040988e2 0x00000008 0x0 0x0 0x0 0x0)"


def test_xid_154_eval_without_154_restarts_the_app():
    fault = only(classify([event(145, message=SRC_TRACK_154_EVAL)]), 145)
    assert (fault.action, fault.severity) == ("RESTART_APP", "non-fatal")


def test_xid_154_eval_follows_the_154_on_the_same_gpu():
    faults = classify([
        event(145, message=SRC_TRACK_154_EVAL, timestamp=T0),
        event(154, message="GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)", timestamp=T0),
        event(145, pci=GPU_B, message=SRC_TRACK_154_EVAL, timestamp=T0),
    ])
    on_a = next(f for f in faults if f.xid == 145 and f.pci_bus_id == GPU_A)
    on_b = next(f for f in faults if f.xid == 145 and f.pci_bus_id == GPU_B)
    assert (on_a.action, on_a.severity) == ("DRAIN_AND_RESET", "fatal")
    assert on_b.action == "RESTART_APP"


# ------------------------------------------------------------ unknown XIDs

def test_unknown_xid_is_reported_not_dropped():
    fault = only(classify([event(999, message="something new")]), 999)
    assert fault.unknown and fault.action == "CONTACT_SUPPORT" and fault.severity == "non-fatal"
    assert fault.name == "UNKNOWN_XID_999" and fault.message == "something new"


def test_unknown_xid_repeated_escalates_to_fatal():
    events = [event(999, timestamp=T0 + 120 * n) for n in range(3)]
    fault = only(classify(events), 999)
    assert (fault.count, fault.severity, fault.escalated) == (3, "fatal", True)
    assert fault.action == "CONTACT_SUPPORT"
    assert only(classify(events[:2]), 999).severity == "non-fatal"


def test_repeats_inside_one_burst_count_once():
    # The same incident from NVML and the kernel log, and the driver printing it twice.
    events = [event(999, timestamp=T0), event(999, timestamp=T0 + 1, source="nvml"), event(999, timestamp=T0 + 20)]
    fault = only(classify(events), 999)
    assert fault.count == 1 and fault.severity == "non-fatal"
    assert fault.source == "kernel_log+nvml"
    assert (fault.first_seen, fault.last_seen) == (T0, T0 + 20)


def test_occurrences_by_clock():
    assert occurrences([event(1, timestamp=T0), event(1, timestamp=T0 + 10)], burst_s=30) == 1
    # A steady stream is not one burst: each burst is measured from its first event.
    # 0-20, 40-60, 80-100, 120-140, 160-180 s: five bursts.
    assert occurrences([event(1, timestamp=T0 + 20 * n) for n in range(10)], burst_s=30) == 5
    assert occurrences([event(1, uptime_s=5.0), event(1, uptime_s=6.0), event(1, uptime_s=100.0)], burst_s=30) == 2
    assert occurrences([event(1), event(1)], burst_s=30) == 2  # unstamped: cannot tell apart
    assert occurrences([], burst_s=30) == 0


def test_reset_that_does_not_hold_escalates_to_reboot():
    events = [event(48, timestamp=T0), event(48, timestamp=T0 + 900)]
    fault = only(classify(events), 48)
    assert (fault.action, fault.severity, fault.escalated) == ("RESTART_BM", "fatal", True)
    fault = only(classify(events, Thresholds(reset_escalation_count=3)), 48)
    assert fault.action == "RESET_GPU" and not fault.escalated


def test_application_xid_repeated_on_one_gpu_only_asks_for_diagnostics():
    events = [event(13, timestamp=T0 + 300 * n) for n in range(3)]
    fault = only(classify(events), 13)
    assert (fault.action, fault.severity, fault.escalated) == ("CONTACT_SUPPORT", "non-fatal", True)
    # The same XID on another GPU points at the application, not the hardware.
    faults = classify([*events, event(13, pci=GPU_B, timestamp=T0)])
    assert {fault.action for fault in faults} == {"RESTART_APP"}


@pytest.mark.parametrize("xid", [43, 63, 92])
def test_ignored_xids_never_escalate(xid):
    fault = only(classify([event(xid, timestamp=T0 + 300 * n) for n in range(10)]), xid)
    assert fault.action == "IGNORE" and not fault.escalated


# ---------------------------------------------------------------- NVSwitch

def test_sxid_severity_comes_from_its_text_and_never_escalates():
    fatal = XidEvent(xid=20034, source="kernel_log", kind="sxid", pci_bus_id="0000:05:00.0",
                     message="Fatal, Link 28 LTSSM Fault Up")
    fault = only(classify([fatal]), 20034)
    assert (fault.action, fault.severity, fault.kind) == ("RESTART_BM", "fatal", "sxid")
    # An SXid the Fabric Manager guide table does not list: the printed word decides.
    non_fatal = [XidEvent(xid=19083, source="kernel_log", kind="sxid", pci_bus_id="0000:05:00.0",
                          message="Non-fatal, Link 32 some new error", timestamp=T0 + 300 * n)
                 for n in range(5)]
    fault = only(classify(non_fatal), 19083)
    assert (fault.action, fault.severity, fault.count) == ("CONTACT_SUPPORT", "non-fatal", 5)
    assert fault.unknown and fault.name == "NVSWITCH_SXID_19083"


def test_sxid_does_not_make_a_gpu_xid45_look_accompanied():
    switch = XidEvent(xid=12028, source="kernel_log", kind="sxid", pci_bus_id=GPU_A, message="Non-fatal, Link 1")
    assert only(classify([switch, event(45)]), 45).action == "RESTART_FM"


# ---------------------------------------------------------------- identity

def test_kernel_log_event_gets_index_and_uuid_from_the_snapshot():
    snapshot = GpuSnapshot(index=3, uuid="GPU-3f1c", pci_bus_id=GPU_A)
    fault = only(classify([event(79)], gpus=[snapshot]), 79)
    assert (fault.gpu_index, fault.gpu_uuid, fault.pci_bus_id) == (3, "GPU-3f1c", GPU_A)


def test_nvml_and_kernel_log_evidence_of_one_gpu_meet():
    nvml = XidEvent(xid=48, source="nvml", gpu_index=1, gpu_uuid="GPU-1", pci_bus_id=GPU_B, timestamp=T0)
    kernel = event(63, pci=GPU_B, timestamp=T0 + 1)
    info = GpuInfo(index=1, uuid="GPU-1", name="H100", pci_bus_id=GPU_B, serial=None, driver_version=None)
    faults = classify([nvml, kernel], gpus=[info])
    assert only(faults, 48).action == "DRAIN_AND_RESET"
    assert only(faults, 63).gpu_index == 1


def test_fallen_off_bus_lines_and_xid79_of_one_gpu_are_one_fault():
    log = [
        "2026-11-29T03:12:01.000000+00:00 node kernel: NVRM: GPU at PCI:0000:3b:00: GPU-aaaaaaaa-bbbb",
        "2026-11-29T03:12:01.100000+00:00 node kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=p, "
        "GPU has fallen off the bus.",
        "2026-11-29T03:12:01.200000+00:00 node kernel: NVRM: The NVIDIA GPU 0000:3b:00.0",
        "2026-11-29T03:12:01.200000+00:00 node kernel: NVRM: (PCI ID: 10de:2330) installed in this system has",
        "2026-11-29T03:12:01.200000+00:00 node kernel: NVRM: fallen off the bus and is not responding to commands.",
    ]
    faults = classify(parse_kernel_log(log))
    fault = only(faults, 79)
    assert (fault.count, fault.action, fault.gpu_uuid) == (1, "RESTART_BM", "GPU-aaaaaaaa-bbbb")


# --------------------------------------------------------------- snapshots

def names(faults):
    return sorted(fault.name for fault in faults)


def test_healthy_snapshot_has_no_fault():
    snapshot = GpuSnapshot(index=0, temperature_c=60, ecc_sbe_volatile=3, ecc_dbe_volatile=0,
                           remapped_rows_pending=False, remapped_rows_failed=False, retired_pages_pending=False,
                           throttle_reasons=0x1 | 0x4,  # idle and power cap are not faults
                           nvlinks=(NvLinkStatus(0, True, 0, 0, 0, 0),))
    assert faults_from_snapshot(snapshot) == []


def test_lost_gpu_is_fatal_reboot_and_nothing_else():
    faults = faults_from_snapshot(GpuSnapshot(index=2, pci_bus_id=GPU_A, lost=True, ecc_dbe_volatile=5))
    assert [(f.name, f.severity, f.action, f.gpu_index) for f in faults] == [
        ("GPU_FALLEN_OFF_BUS", "fatal", "RESTART_BM", 2)]


@pytest.mark.parametrize(
    "snapshot, name, severity, action",
    [
        (GpuSnapshot(index=0, ecc_dbe_volatile=1), "ECC_DBE_VOLATILE", "fatal", "RESET_GPU"),
        (GpuSnapshot(index=0, remapped_rows_failed=True), "REMAPPED_ROWS_FAILED", "fatal", "CONTACT_SUPPORT"),
        (GpuSnapshot(index=0, remapped_rows_pending=True), "REMAPPED_ROWS_PENDING", "non-fatal", "RESET_GPU"),
        (GpuSnapshot(index=0, retired_pages_pending=True), "RETIRED_PAGES_PENDING", "non-fatal", "RESET_GPU"),
        (GpuSnapshot(index=0, throttle_reasons=0x40), "THERMAL_THROTTLE", "non-fatal", "CONTACT_SUPPORT"),
        (GpuSnapshot(index=0, throttle_reasons=0x8), "THERMAL_THROTTLE", "non-fatal", "CONTACT_SUPPORT"),
        (GpuSnapshot(index=0, throttle_reasons=0x20), "THERMAL_THROTTLE", "non-fatal", "CONTACT_SUPPORT"),
        (GpuSnapshot(index=0, throttle_reasons=0x80), "THERMAL_THROTTLE", "non-fatal", "CONTACT_SUPPORT"),
        (GpuSnapshot(index=0, temperature_c=88), "GPU_TEMPERATURE_HIGH", "non-fatal", "CONTACT_SUPPORT"),
        (GpuSnapshot(index=0, ecc_sbe_volatile=1001), "ECC_SBE_VOLATILE_HIGH", "non-fatal", "CONTACT_SUPPORT"),
        (GpuSnapshot(index=0, nvlinks=(NvLinkStatus(3, False),)), "NVLINK_INACTIVE", "non-fatal", "RESET_GPU"),
        (GpuSnapshot(index=0, nvlinks=(NvLinkStatus(1, True, crc_flit_errors=101),)), "NVLINK_ERRORS", "non-fatal",
         "CONTACT_SUPPORT"),
        (GpuSnapshot(index=0, nvlinks=(NvLinkStatus(1, True, replay_errors=101),)), "NVLINK_ERRORS", "non-fatal",
         "CONTACT_SUPPORT"),
        (GpuSnapshot(index=0, nvlinks=(NvLinkStatus(1, True, recovery_errors=1),)), "NVLINK_ERRORS", "non-fatal",
         "CONTACT_SUPPORT"),
        (GpuSnapshot(index=0, nvlinks=(NvLinkStatus(1, True, crc_data_errors=101),)), "NVLINK_ERRORS", "non-fatal",
         "CONTACT_SUPPORT"),
    ],
)
def test_snapshot_faults(snapshot, name, severity, action):
    faults = faults_from_snapshot(snapshot)
    assert [(f.name, f.severity, f.action, f.source, f.xid) for f in faults] == [(name, severity, action, "nvml", None)]


def test_snapshot_limits_are_strictly_above_the_threshold():
    at_limit = GpuSnapshot(index=0, temperature_c=87, ecc_sbe_volatile=1000,
                           nvlinks=(NvLinkStatus(0, True, 100, 100, 100, 0),))
    assert faults_from_snapshot(at_limit) == []
    strict = Thresholds(temperature_max_c=80, ecc_sbe_volatile_max=10, nvlink_crc_flit_max=5)
    assert names(faults_from_snapshot(at_limit, strict)) == ["ECC_SBE_VOLATILE_HIGH", "GPU_TEMPERATURE_HIGH",
                                                             "NVLINK_ERRORS"]


def test_snapshot_knobs():
    snapshot = GpuSnapshot(index=0, throttle_reasons=0x20, nvlinks=(NvLinkStatus(0, False), NvLinkStatus(1, None)))
    assert names(faults_from_snapshot(snapshot)) == ["NVLINK_INACTIVE", "THERMAL_THROTTLE"]
    relaxed = Thresholds(nvlink_inactive_is_fault=False, throttle_fault_mask=0x40)
    assert faults_from_snapshot(snapshot, relaxed) == []
    inactive = [fault for fault in faults_from_snapshot(snapshot) if fault.name == "NVLINK_INACTIVE"]
    assert [(fault.message, fault.count) for fault in inactive] == [("NVLink 0 inactive", 1)]


# ------------------------------------------- NVML reports without driver text

NVML_TEXT = "XID %d reported by the NVML event API"


def test_nvml_154_without_text_does_not_override_the_kernel_log_text():
    kernel = event(154, message="GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
                   timestamp=T0)
    nvml = event(154, message=NVML_TEXT % 154, timestamp=T0 + 1, source="nvml")
    fault = only(classify([kernel, nvml]), 154)
    assert (fault.action, fault.count, fault.source) == ("RESTART_BM", 1, "kernel_log+nvml")
    assert only(classify([nvml]), 154).action == "CONTACT_SUPPORT"


def test_recovery_action_text_without_the_from_part():
    # A reader that fills the message from NVML's recovery-action field can say just this.
    assert recovery_action_from_text("GPU recovery action changed to 0x1").action == "RESET_GPU"


def test_bare_nvml_nvlink5_report_folds_into_the_decoded_kernel_line():
    kernel = event(149, message="NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 0x00000000 0x0 0x0 0x0 0x0)",
                   timestamp=T0)
    nvml = event(149, message=NVML_TEXT % 149, timestamp=T0 + 2, source="nvml")
    fault = only(classify([kernel, nvml]), 149)
    assert (fault.action, fault.count, fault.source) == ("RESET_GPU", 1, "kernel_log+nvml")
    # A second message with registers that do not decode is a different report: kept as DECODE.
    odd = event(149, message="NETIR_NEW_THING Fatal XC0 i0 Link 01 (0x03f00000 0x00000000 0x0)", timestamp=T0 + 3)
    actions = sorted(f.action for f in classify([kernel, nvml, odd]))
    assert actions == ["DECODE", "RESET_GPU"]
