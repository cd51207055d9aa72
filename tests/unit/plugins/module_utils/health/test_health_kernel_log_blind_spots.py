# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Kernel-log lines peers read and we missed: PCI ids without a domain, XID 144-150 by driver
version, catalog IGNORE rows, NVSwitch SXid detail lines. Lines are in the driver's format."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.resilience.plugins.module_utils.health.kernel_log import (
    KernelLogParser,
    parse_kernel_log,
    parse_line,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import GpuSnapshot
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.verdict import evaluate
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.xid_catalog import (
    GUIDANCE,
    NVLINK5_DECODE,
    XID_CATALOG,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.xid_lookup import xid_info
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.xid_rules import (
    SXID_RULES,
    decode_nvlink5,
)

UUID = "GPU-3f1c2a9e-0b7d-4c61-9a55-2f0e8f6b1d01"


def only(faults, xid):
    found = [fault for fault in faults if fault.xid == xid]
    assert len(found) == 1, faults
    return found[0]


# ------------------------------------------------ 1. one canonical PCI id, whatever the line

@pytest.mark.parametrize("line", [
    "NVRM: GPU 18:00.0: GPU has fallen off the bus.",
    "NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.",
    "NVRM: Xid (PCI:0000:18:00): 79, pid=2231, name=python3, GPU has fallen off the bus.",
    "NVRM: Xid (PCI:18:00): 79, pid=2231, name=python3, GPU has fallen off the bus.",
    "NVRM: Xid (PCI:0000:18:00.0): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    "NVRM: Xid (18:00): 79, GPU has fallen off the bus.",
    "NVRM: Xid (PCI:00000000:18:00): 79, pid=2231, name=python3, GPU has fallen off the bus.",
])
def test_every_form_of_the_pci_id_names_the_same_gpu(line):
    event = parse_line(line)
    assert (event.xid, event.pci_bus_id) == (79, "0000:18:00.0")


@pytest.mark.parametrize("mapping", [
    "NVRM: GPU at PCI:0000:18:00: " + UUID,
    "NVRM: GPU at PCI:18:00: " + UUID,
    "NVRM: GPU at PCI:0000:18:00.0: " + UUID,
    "NVRM: GPU at PCI:00000000:18:00.0: " + UUID.upper(),
])
def test_the_uuid_line_in_any_pci_form_names_the_gpu_of_every_fault_line(mapping):
    events = parse_kernel_log([
        mapping,
        "NVRM: GPU 18:00.0: GPU has fallen off the bus.",
        "NVRM: Xid (PCI:18:00): 79, pid=2231, name=python3, GPU has fallen off the bus.",
        "NVRM: Xid (PCI:0000:18:00): 79, pid=2231, name=python3, GPU has fallen off the bus.",
    ])
    assert len(events) == 3
    assert {(event.pci_bus_id, event.gpu_uuid.upper()) for event in events} == {("0000:18:00.0", UUID.upper())}


def test_a_fault_reported_by_three_lines_and_nvml_is_one_gpu():
    # NVML prints the id with an 8-digit domain in upper case; the kernel log in three other forms.
    verdict = evaluate(
        parse_kernel_log(["NVRM: GPU at PCI:0000:18:00: " + UUID,
                          "NVRM: GPU 18:00.0: GPU has fallen off the bus.",
                          "NVRM: Xid (PCI:18:00): 79, pid=2231, name=python3, GPU has fallen off the bus."]),
        snapshots=[GpuSnapshot(index=2, uuid=UUID, pci_bus_id="0000:18:00.0")],
    )
    fault = only(verdict.faults, 79)
    assert (fault.gpu_index, fault.gpu_uuid, fault.pci_bus_id) == (2, UUID, "0000:18:00.0")
    assert (verdict.state, verdict.action) == ("fatal", "RESTART_BM")


PREFIXES = st.sampled_from([
    "", "[ 5123.456789] ", "<3>", "3,1234,5678901,-;", "kern  :err   : ",
    "Nov 29 03:12:01 gpu-node-7 kernel: ", "2026-11-29T03:12:01.123456+00:00 gpu-node-7 kernel: ",
])
FORMATS = st.sampled_from([
    ("NVRM: Xid (PCI:{pci}): 79, pid=2231, name=python3, GPU has fallen off the bus.", "xid"),
    ("NVRM: Xid ({pci}): 79, GPU has fallen off the bus.", "xid"),
    ("NVRM: Xid (PCI:{pci} GPU-I:01 GPU-CI:00): 31, pid=2188, name=pt_main_thread, Ch 00000008", "xid"),
    ("NVRM: GPU {pci}: GPU has fallen off the bus.", "fallen_off_bus"),
    ("nvidia-nvswitch2: SXid (PCI:{pci}): 20034, Fatal, Link 28 LTSSM Fault Up", "sxid"),
])


@st.composite
def pci_forms(draw):
    """A PCI id in any form the driver or NVML prints, and the canonical id it names."""
    domain, bus, device = draw(st.integers(0, 0xFFFF)), draw(st.integers(0, 255)), draw(st.integers(0, 31))
    function = draw(st.one_of(st.none(), st.integers(0, 7)))
    spelled = draw(st.sampled_from(["none", "4", "8"])) if domain == 0 else draw(st.sampled_from(["4", "8"]))
    text = "%02x:%02x" % (bus, device)
    if spelled != "none":
        text = ("%0" + spelled + "x:") % domain + text
    if function is not None:
        text += ".%d" % function
    text = text.upper() if draw(st.booleans()) else text
    return text, "%04x:%02x:%02x.%d" % (domain, bus, device, function or 0)


@settings(max_examples=300, deadline=None)
@given(PREFIXES, FORMATS, pci_forms())
def test_any_line_format_with_any_pci_form_gives_the_canonical_id(prefix, line_format, pci):
    template, kind = line_format
    text, canonical = pci
    event = parse_line(prefix + template.format(pci=text))
    assert event is not None and event.kind == kind
    assert event.pci_bus_id == canonical


# ------------------------------------------------ 2. XID 144-150 follow the driver version

V2_LINE = ("NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_DOWN Fatal XC0 i0 Link 08 "
           "(0x00400011 0x00000000 0x0 0x0 0x0 0x0)")


def decode_inputs():
    """(xid, subcode, IntrInfo, ErrorStatus, driver) for the pattern of every row and both columns."""
    for rule in NVLINK5_DECODE:
        statuses = rule.error_status or (0,)
        for driver, name, value in (("570.133.20", rule.subcode_v1, rule.v1_value),
                                    ("575.51.03", rule.subcode_v2, rule.v2_value)):
            for status in statuses:
                yield rule.xid, name, value, status, driver


def test_without_a_driver_version_a_decode_is_the_versions_or_asks_for_decode():
    # Conservative when the version is unknown: the line's own subcode name and bits pick the
    # column, and where they cannot (both columns fit with different outcomes) the fault says
    # "ambiguous" and asks for DECODE: never IGNORE and never a fence on a guess.
    checked = 0
    for xid, name, intr, status, driver in decode_inputs():
        message = "%s Nonfatal XC0 i0 Link 04 (0x%08x 0x%08x 0x0 0x0 0x0 0x0)" % (name, intr, status)
        known = decode_nvlink5(xid, message, driver)
        unknown = decode_nvlink5(xid, message)
        assert known is not None, (xid, message, driver)
        assert unknown is not None, (xid, message)
        if unknown.ambiguous:
            assert unknown.action == "DECODE" and unknown.severity == "non-fatal"
        else:
            assert (unknown.action, unknown.severity) == (known.action, known.severity), (xid, message, driver)
        checked += 1
    assert checked >= 2 * len(NVLINK5_DECODE)


@pytest.mark.parametrize("driver, action, decode", [
    ("575.51.03", "RESET_GPU", "V2"),  # the line's column: decoded, fatal
    ("580.65.06", "RESET_GPU", "V2"),
    ("570.133.20", "DECODE", None),    # a V2 line from a pre-R575 driver fits none of its rows
    (None, "RESET_GPU", "V2"),         # unknown: the subcode name NETIR_LINK_DOWN is V2's only
])
def test_the_verdict_follows_the_driver_version(driver, action, decode):
    fault = only(evaluate(parse_kernel_log([V2_LINE]), driver_version=driver).faults, 149)
    assert (fault.action, fault.decode) == (action, decode)


# ------------------------------------------------ 3. catalog IGNORE rows are never fatal

def no_action(bucket: str) -> bool:
    """A resolution bucket that says: nothing to do (the catalog's "IGNORE" and its variants)."""
    guidance = GUIDANCE.get(bucket, "")
    return bucket.upper().startswith("IGNORE") or guidance.strip().lower().startswith("no action")


# Buckets whose guidance offers IGNORE only as one branch, and the branch we take where it is
# not IGNORE. Every entry must still be needed (a stale entry fails the test).
DELIBERATE = {
    # CHECK_UVM: "If UVM/vGPU is being utilized, RESET_GPU; otherwise IGNORE". CUDA jobs use
    # unified memory (nvidia-uvm) and the agent cannot tell whether this one did, so we take the
    # branch that is safe for the job (tools/gen_xid_catalog.py).
    159: "RESET_GPU",
}


def test_the_no_action_bucket_is_read_from_the_guidance_sheet():
    assert no_action("IGNORE") and GUIDANCE["IGNORE"].startswith("No Action")
    assert not no_action("RESET_GPU") and not no_action("CHECK_UVM") and not no_action("")


def test_no_catalog_row_whose_resolution_is_ignore_is_fatal():
    """Walk the whole XID sheet: a row NVIDIA resolves with no action must come out IGNORE,
    non-fatal and healthy through the parser, the rules and the verdict."""
    contradictions, branch_rows = [], {}
    for code, entry in sorted(XID_CATALOG.items()):
        line = "NVRM: Xid (PCI:0000:3b:00): %d, pid=4242, name=python3, test line" % code
        verdict = evaluate(parse_kernel_log([line]))
        fault = only(verdict.faults, code)
        info = xid_info(code)
        if no_action(entry.immediate_bucket):
            if (fault.action, fault.severity, verdict.state) != ("IGNORE", "non-fatal", "healthy") or (
                    info["action"], info["severity"]) != ("IGNORE", "non-fatal") or entry.severity == "fatal":
                contradictions.append((code, entry.immediate_bucket, fault.action, fault.severity, info["action"]))
        elif "IGNORE" in GUIDANCE.get(entry.immediate_bucket, "") and fault.severity == "fatal":
            branch_rows[code] = fault.action
        elif fault.action == "IGNORE":
            contradictions.append((code, entry.immediate_bucket, "IGNORE without a no-action bucket"))
    assert contradictions == []
    assert branch_rows == DELIBERATE


def fitting_rows(xid, name, intr, status, driver):
    """The decode rows (and their action) that fit an input in the driver's column."""
    v2 = driver.startswith("575")
    found = []
    for rule in NVLINK5_DECODE:
        subcode, care, value = ((rule.subcode_v2, rule.v2_care, rule.v2_value) if v2
                                else (rule.subcode_v1, rule.v1_care, rule.v1_value))
        alt_care, alt_value = ((rule.action2_v2_care, rule.action2_v2_value) if v2
                               else (rule.action2_v1_care, rule.action2_v1_value))
        if rule.xid != xid or subcode != name or (rule.error_status and status not in rule.error_status):
            continue
        if rule.action2 and alt_care and intr & alt_care == alt_value:
            found.append(rule.action2)
        elif intr & care == value:
            found.append(rule.action)
    return found


def test_no_nvlink5_decode_row_whose_resolution_is_ignore_is_fatal():
    """Walk the decode sheet: an input that only rows resolved IGNORE fit comes out IGNORE and healthy."""
    ignored = 0
    for xid, name, intr, status, driver in decode_inputs():
        line = ("NVRM: Xid (PCI:0018:01:00): %d, %s Nonfatal XC0 i0 Link 04 (0x%08x 0x%08x 0x0 0x0 0x0 0x0)"
                % (xid, name, intr, status))
        verdict = evaluate(parse_kernel_log([line]), driver_version=driver)
        fault = only(verdict.faults, xid)
        if fault.action == "IGNORE":
            assert fault.severity == "non-fatal" and verdict.state == "healthy", (line, driver)
        if set(fitting_rows(xid, name, intr, status, driver)) == {"IGNORE"}:
            assert (fault.action, verdict.state) == ("IGNORE", "healthy"), (line, driver)
            ignored += 1
    assert ignored >= 2 * sum(1 for rule in NVLINK5_DECODE if rule.action == "IGNORE" and not rule.action2)


@pytest.mark.parametrize("code", sorted(code for code, rule in SXID_RULES.items() if rule[2] == "IGNORE"))
def test_sxids_the_guide_ignores_are_ignored_when_printed_non_fatal(code):
    line = "nvidia-nvswitch1: SXid (PCI:0000:c2:00.0): %d, Non-fatal, Link 03 single bit ECC error" % code
    verdict = evaluate(parse_kernel_log([line]))
    assert (only(verdict.faults, code).action, verdict.state) == ("IGNORE", "healthy")


# ------------------------------------------------ 4. NVSwitch SXid detail lines

SXID_12028 = [
    "[ 8123.101010] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV"
    " error (First)",
    "[ 8123.101012] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Severity 0 Engine instance 32 Sub-engine"
    " instance 00",
    "[ 8123.101014] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Data {0x00000000, 0x00000000, 0x00000000,"
    " 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000}",
]


def test_sxid_detail_lines_attach_to_their_event():
    events = parse_kernel_log(SXID_12028)
    assert len(events) == 1
    event = events[0]
    assert (event.kind, event.xid, event.pci_bus_id) == ("sxid", 12028, "0000:05:00.0")
    assert event.message == "Non-fatal, Link 32 egress non-posted PRIV error (First)"
    assert event.raw.split("\n") == SXID_12028


def test_sxid_detail_lines_attach_to_the_event_of_their_switch_and_code():
    other = [line.replace("nvswitch0", "nvswitch3").replace("0000:05:00.0", "0000:c5:00.0")
             .replace("12028, Non-fatal", "24007, Fatal").replace("12028, ", "24007, ") for line in SXID_12028]
    # Two switches' messages interleaved: each detail finds its own headline.
    events = parse_kernel_log([SXID_12028[0], other[0], other[1], SXID_12028[1], other[2], SXID_12028[2]])
    assert [(event.xid, event.pci_bus_id) for event in events] == [(12028, "0000:05:00.0"), (24007, "0000:c5:00.0")]
    assert [event.raw.count("\n") for event in events] == [2, 2]
    assert all("24007" in line for line in events[1].raw.split("\n"))


def test_a_detail_line_without_its_headline_is_not_an_event():
    assert parse_kernel_log(SXID_12028[1:]) == []
    assert parse_kernel_log([SXID_12028[0], SXID_12028[1].replace("12028", "12029")])[0].raw == SXID_12028[0]


def test_detail_lines_after_take_are_not_new_events():
    parser = KernelLogParser()
    parser.feed(SXID_12028[0])
    assert len(parser.take()) == 1
    for line in SXID_12028[1:]:
        parser.feed(line)
    assert parser.take() == []


@pytest.mark.parametrize("code, word, severity, action", [
    (20034, "Fatal", "fatal", "RESTART_BM"),
    (20034, "Non-fatal", "non-fatal", "CONTACT_SUPPORT"),
    # The guide's table may not lower a printed "Fatal": a corrected-ECC code printed Fatal is fatal.
    (11012, "Fatal", "fatal", "RESTART_BM"),
    (11012, "Non-fatal", "non-fatal", "IGNORE"),
    (22013, "Fatal", "fatal", "RESTART_BM"),
    # ... and may make a printed "Non-fatal" stricter (12028 stalls NVLink traffic).
    (12028, "Non-fatal", "fatal", "RESTART_BM"),
    (12028, "Fatal", "fatal", "RESTART_BM"),
])
def test_fatal_or_non_fatal_comes_from_the_headline(code, word, severity, action):
    lines = ["nvidia-nvswitch0: SXid (PCI:0000:05:00.0): %d, %s, Link 32 something happened (First)" % (code, word),
             # The detail line's "Severity 0" says nothing about fatal or not.
             "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): %d, Severity 0 Engine instance 32 Sub-engine instance 00"
             % code]
    fault = only(evaluate(parse_kernel_log(lines)).faults, code)
    assert (fault.severity, fault.action, fault.count) == (severity, action, 1)
