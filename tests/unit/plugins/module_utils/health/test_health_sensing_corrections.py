# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Issue 7, "Sensing corrections": real driver-format lines through parser, rules and verdict."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.health import xid_rules
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.kernel_log import (
    parse_kernel_log,
    parse_line,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import (
    OUT_OF_SERVICE_ACTIONS,
    NvLink5DecodeRule,
    Thresholds,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.sense import judge_node
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.verdict import evaluate
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.xid_catalog import (
    NVLINK5_DECODE,
    XID_CATALOG,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.xid_lookup import xid_info
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.xid_rules import (
    decode_nvlink5,
    nvlink5_table_version,
    xid13_location,
)

T0 = 1_795_000_000.0


def iso(offset):
    """An ISO 8601 kernel-log prefix ``offset`` seconds after T0."""
    from datetime import datetime, timezone

    return datetime.fromtimestamp(T0 + offset, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S+00:00 gpu-node-7 kernel: ")


def judge(lines, **kwargs):
    return evaluate(parse_kernel_log(lines), **kwargs)


def only(faults, xid):
    found = [fault for fault in faults if fault.xid == xid]
    assert len(found) == 1, faults
    return found[0]


# ------------------------------------------------ 1. fallen off the bus, no PCI domain

@pytest.mark.parametrize("line, pci", [
    ("NVRM: GPU 18:00.0: GPU has fallen off the bus.", "0000:18:00.0"),
    ("[ 5123.456789] NVRM: GPU 3b:00.0: GPU has fallen off the bus.", "0000:3b:00.0"),
    ("Nov 29 03:12:01 gpu-node-7 kernel: NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.", "0000:18:00.0"),
    ("NVRM: GPU 0008:01:00.0: GPU has fallen off the bus.", "0008:01:00.0"),
])
def test_one_line_fallen_off_the_bus_with_or_without_domain(line, pci):
    event = parse_line(line)
    assert (event.xid, event.kind, event.pci_bus_id) == (79, "fallen_off_bus", pci)


def test_one_line_fallen_off_the_bus_without_domain_meets_its_uuid_and_fences():
    verdict = judge(["NVRM: GPU at PCI:0000:18:00: GPU-3f1c2a9e-0b7d-4c61-9a55-2f0e8f6b1d01",
                     "NVRM: GPU 18:00.0: GPU has fallen off the bus."])
    fault = only(verdict.faults, 79)
    assert fault.gpu_uuid == "GPU-3f1c2a9e-0b7d-4c61-9a55-2f0e8f6b1d01"
    assert (verdict.state, verdict.action) == ("fatal", "RESTART_BM")


def test_three_line_fallen_off_the_bus_header_without_domain():
    events = parse_kernel_log(["NVRM: The NVIDIA GPU 18:00.0",
                               "NVRM: (PCI ID: 10de:2330) installed in this system has",
                               "NVRM: fallen off the bus and is not responding to commands."])
    assert [(event.xid, event.pci_bus_id) for event in events] == [(79, "0000:18:00.0")]


# ------------------------------------------------ 2. XID 144-150 decode by driver version

@pytest.mark.parametrize("version, table", [
    ("570.133.20", "V1"), ("565.57.01", "V1"), ("575.51.03", "V2"), ("580.65.06", "V2"), ("R575", "V2"),
    ("R570", "V1"), (None, None), ("", None), ("unknown", None),
])
def test_driver_version_picks_the_decode_column(version, table):
    assert nvlink5_table_version(version) == table


V1_LINE = ("NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 08 "
           "(0x004505c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)")
V2_LINE = ("NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_DOWN Fatal XC0 i0 Link 08 "
           "(0x00400011 0x00000000 0x0 0x0 0x0 0x0)")


def test_a_pre_r575_line_decodes_with_a_pre_r575_driver():
    fault = only(judge([V1_LINE], driver_version="570.133.20").faults, 149)
    assert (fault.action, fault.severity, fault.decode) == ("RESET_GPU", "fatal", "V1")


def test_an_r575_line_decodes_with_an_r575_driver():
    fault = only(judge([V2_LINE], driver_version="575.51.03").faults, 149)
    assert (fault.action, fault.severity, fault.decode) == ("RESET_GPU", "fatal", "V2")


def test_a_line_from_the_other_column_than_the_driver_is_not_decoded():
    # A V2 subcode from a driver that says it is pre-R575 fits no row of its column.
    fault = only(judge([V2_LINE], driver_version="570.133.20").faults, 149)
    assert (fault.action, fault.decode) == ("DECODE", None)


@pytest.fixture
def conflicting_columns(monkeypatch):
    """Two rows whose V1 and V2 patterns fit the same IntrInfo with different outcomes."""
    common = dict(xid=146, subcode_v1="TEST_SUB", subcode_v2="TEST_SUB", error_status=(0x1,),
                  investigatory_action="CONTACT_SUPPORT", hw_sw="HW", local_remote="")
    rules = (
        NvLink5DecodeRule(subcode="TEST_SUB", v1_care=0x3FF, v1_value=0x042, v2_care=0, v2_value=1,
                          action="IGNORE", severity="non-fatal", severity_raw="Non-fatal", **common),
        NvLink5DecodeRule(subcode="TEST_SUB", v1_care=0, v1_value=1, v2_care=0x7F, v2_value=0x042,
                          action="RESET_GPU", severity="fatal", severity_raw="Fatal", **common),
    )
    monkeypatch.setattr(xid_rules, "NVLINK5_DECODE", NVLINK5_DECODE + rules)
    return "NVRM: Xid (PCI:0018:01:00): 146, TEST_SUB Nonfatal XC0 i0 Link 04 (0x00000042 0x00000001 0x0 0x0 0x0 0x0)"


def test_without_a_driver_version_a_disagreeing_decode_is_ambiguous(conflicting_columns):
    decoded = decode_nvlink5(146, conflicting_columns.split("146, ", 1)[1])
    assert decoded.ambiguous and decoded.action == "DECODE"
    fault = only(judge([conflicting_columns]).faults, 146)
    assert (fault.decode, fault.action, fault.severity) == ("ambiguous", "DECODE", "non-fatal")
    assert len(fault.decode_candidates) == 2
    assert "V1 (driver < R575)" in fault.decode_candidates[0] and "IGNORE" in fault.decode_candidates[0]
    assert "V2 (driver >= R575)" in fault.decode_candidates[1] and "RESET_GPU" in fault.decode_candidates[1]
    assert "ambiguous" in fault.detail and fault.to_dict()["decode_candidates"] == list(fault.decode_candidates)


@pytest.mark.parametrize("driver, action, decode", [("570.133.20", "IGNORE", "V1"), ("575.51.03", "RESET_GPU", "V2")])
def test_the_driver_version_resolves_the_ambiguity(conflicting_columns, driver, action, decode):
    fault = only(judge([conflicting_columns], driver_version=driver).faults, 146)
    assert (fault.action, fault.decode, fault.decode_candidates) == (action, decode, ())


def test_judge_node_takes_a_driver_version_for_a_log_from_elsewhere(conflicting_columns):
    result = judge_node(kernel_log=[conflicting_columns], use_nvml=False, driver_version="575.51.03")
    assert result["driver_version"] == "575.51.03"
    assert result["action"] == "RESET_GPU" and result["faults"][0]["decode"] == "V2"
    result = judge_node(kernel_log=[conflicting_columns], use_nvml=False)
    assert result["driver_version"] is None and result["faults"][0]["decode"] == "ambiguous"


def test_judge_node_rejects_a_driver_version_it_cannot_read():
    from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import HealthError

    with pytest.raises(HealthError, match="driver_version"):
        judge_node(kernel_log=[], use_nvml=False, driver_version="latest")


# ------------------------------------------------ 3. IGNORE is never fatal

def test_no_decode_row_with_ignore_is_fatal():
    for rule in NVLINK5_DECODE:
        if rule.action == "IGNORE":
            assert rule.severity == "non-fatal", rule
    # The two XID 149 rows whose sheet says "Fatal"/"Link Fatal" next to IGNORE keep the word.
    assert {rule.severity_raw for rule in NVLINK5_DECODE if rule.action == "IGNORE"} >= {"Fatal", "Link Fatal"}


def test_ignore_faults_are_non_fatal_and_out_of_service_faults_fatal_everywhere():
    lines = [iso(0) + "NVRM: Xid (PCI:0000:3b:00): 43, pid=1234, name=python, Ch 00000010",
             iso(1) + "NVRM: Xid (PCI:0000:3b:00): 63, pid=1234, name=python, Row Remapper: New row marked",
             iso(2) + "NVRM: Xid (PCI:0000:5b:00): 48, pid=77, name=python, DBE (0x00000001)",
             iso(3) + "NVRM: Xid (PCI:0008:01:00): 154, GPU recovery action changed from 0x1 (GPU Reset Required)"
                      " to 0x0 (None)",
             iso(4) + "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 22013, Non-fatal, Link 32 Minion Link DLREQ"]
    for fault in judge(lines).faults:
        if fault.action == "IGNORE":
            assert fault.severity == "non-fatal", fault
        if fault.action in OUT_OF_SERVICE_ACTIONS:
            assert fault.severity == "fatal", fault


# ------------------------------------------------ 4. SXid by code from the Fabric Manager guide

def test_sxid_12028_stalls_nvlink_traffic_although_printed_non_fatal():
    verdict = judge([iso(0) + "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress"
                              " non-posted PRIV error (First)",
                     iso(0) + "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Severity 0 Engine instance 32"
                              " Sub-engine instance 00",
                     iso(0) + "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Data {0x000001c0, 0x00bd5c8a}"])
    fault = only(verdict.faults, 12028)
    assert (fault.kind, fault.severity, fault.action, fault.unknown) == ("sxid", "fatal", "RESTART_BM", False)
    assert "stalls" in fault.detail and verdict.state == "fatal"


@pytest.mark.parametrize("code, text, severity, action", [
    (11004, "Non-fatal, Link 12 ingress invalid ACL", "fatal", "RESTART_BM"),
    (19084, "Non-fatal, Link 29 AN1 Heartbeat Timeout Error (First)", "fatal", "RESTART_BM"),
    (11012, "Non-fatal, Link 03 single bit ECC error", "non-fatal", "IGNORE"),
    (22013, "Non-fatal, Link 07 Minion Link DLREQ interrupt", "non-fatal", "IGNORE"),
    (20001, "Non-fatal, Link 07 TX Replay Error", "non-fatal", "CONTACT_SUPPORT"),
    (20012, "Non-fatal, Link 07 broken/inconsistent connection", "non-fatal", "CONTACT_SUPPORT"),
    # Not in the table: the printed word decides.
    (20034, "Fatal, Link 28 LTSSM Fault Up", "fatal", "RESTART_BM"),
    (19083, "Non-fatal, Link 28 something new", "non-fatal", "CONTACT_SUPPORT"),
])
def test_sxid_table_with_the_text_as_fallback(code, text, severity, action):
    line = "nvidia-nvswitch0: SXid (PCI:0000:c2:00.0): %d, %s" % (code, text)
    fault = only(judge([line]).faults, code)
    assert (fault.severity, fault.action) == (severity, action)


# ------------------------------------------------ 5. catalog CONTACT_SUPPORT fences, unknown waits

def test_a_catalog_contact_support_xid_fences_the_node_at_once():
    codes = [code for code, entry in XID_CATALOG.items() if entry.action == "CONTACT_SUPPORT" and code != 154]
    assert 61 in codes
    verdict = judge([iso(0) + "NVRM: Xid (PCI:0000:3b:00): 61, pid=2188, name=python, Internal micro-controller"
                              " breakpoint/warning (0x0)"])
    fault = only(verdict.faults, 61)
    assert (fault.severity, fault.action, fault.unknown, fault.escalated) == ("fatal", "CONTACT_SUPPORT", False, False)
    assert verdict.state == "fatal" and "hold it for a human" in fault.detail
    assert xid_info(61)["severity"] == "fatal"


def test_an_unknown_xid_stays_non_fatal_until_repeated():
    line = "NVRM: Xid (PCI:0000:3b:00): 999, pid=1, name=python, something new"
    once = only(judge([iso(0) + line]).faults, 999)
    assert (once.severity, once.action, once.unknown) == ("non-fatal", "CONTACT_SUPPORT", True)
    repeated = only(judge([iso(300 * n) + line for n in range(3)]).faults, 999)
    assert (repeated.severity, repeated.escalated) == ("fatal", True)
    assert xid_info(999)["severity"] == "non-fatal"


# ------------------------------------------------ 6. XID 13 by GPC/TPC, XID 31 by GPU

XID13 = ("NVRM: Xid (PCI:0000:3b:00): 13, pid=2188, name=python, Graphics SM Warp Exception on "
         "(GPC %d, TPC %d, SM %d): Out Of Range Address")
XID31 = ("NVRM: Xid (PCI:0000:%s:00): 31, pid=2188, name=python, Ch 00000008, intr 00000000. MMU Fault: ENGINE"
         " GRAPHICS GPCCLIENT_T1_3 faulted @ 0x7f1c_2a000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ")


def test_xid13_location_reads_gpc_and_tpc():
    assert xid13_location("Graphics SM Warp Exception on (GPC 1, TPC 2, SM 0): Out Of Range Address") == "GPC 1, TPC 2"
    assert xid13_location("Graphics Exception: ESR 0x50c730=0x0") is None


def test_xid13_repeated_on_the_same_gpc_and_tpc_asks_for_diagnostics_even_with_different_sms():
    lines = [iso(300 * n) + XID13 % (1, 2, n % 2) for n in range(3)]
    fault = only(judge(lines).faults, 13)
    assert (fault.action, fault.escalated, fault.location, fault.count) == ("CONTACT_SUPPORT", True, "GPC 1, TPC 2", 3)
    assert "GPC 1, TPC 2" in fault.detail and "WORKFLOW_XID_13" in fault.detail


def test_xid13_on_different_tpcs_is_the_application():
    lines = [iso(300 * n) + XID13 % (1, n, 0) for n in range(3)]
    faults = [fault for fault in judge(lines).faults if fault.xid == 13]
    assert len(faults) == 3
    assert all(fault.action == "RESTART_APP" and not fault.escalated for fault in faults)


def test_xid13_same_tpc_counts_even_when_another_gpu_has_xid13_too():
    other = iso(5) + XID13.replace("3b:00", "5b:00") % (4, 0, 0)
    lines = [iso(300 * n) + XID13 % (1, 2, 0) for n in range(3)] + [other]
    faults = [fault for fault in judge(lines).faults if fault.xid == 13]
    by_pci = {fault.pci_bus_id: fault for fault in faults}
    assert by_pci["0000:3b:00.0"].action == "CONTACT_SUPPORT"
    assert by_pci["0000:5b:00.0"].action == "RESTART_APP"


def test_xid13_lines_of_one_burst_count_once():
    lines = [iso(n) + XID13 % (1, 2, n) for n in range(3)]  # three SMs in one incident
    fault = only(judge(lines).faults, 13)
    assert (fault.count, fault.action) == (1, "RESTART_APP")


def test_xid31_repeated_on_one_gpu_asks_for_diagnostics():
    fault = only(judge([iso(300 * n) + XID31 % "3b" for n in range(3)]).faults, 31)
    assert (fault.action, fault.escalated, fault.location) == ("CONTACT_SUPPORT", True, None)


def test_xid31_on_several_gpus_is_the_application():
    lines = [iso(300 * n) + XID31 % "3b" for n in range(3)] + [iso(10) + XID31 % "5b"]
    faults = [fault for fault in judge(lines).faults if fault.xid == 31]
    assert len(faults) == 2 and all(fault.action == "RESTART_APP" for fault in faults)


def test_app_threshold_is_the_app_repeat_escalation_count():
    lines = [iso(300 * n) + XID13 % (1, 2, 0) for n in range(2)]
    assert only(judge(lines).faults, 13).action == "RESTART_APP"
    stricter = Thresholds(app_repeat_escalation_count=2)
    assert only(judge(lines, thresholds=stricter).faults, 13).action == "CONTACT_SUPPORT"
