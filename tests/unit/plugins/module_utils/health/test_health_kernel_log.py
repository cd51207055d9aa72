# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.resilience.plugins.module_utils.health.kernel_log import (
    MAX_LINE,
    parse_kernel_log,
    parse_line,
    split_prefix,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import XidEvent

# 2026-11-29T03:12:01Z
EPOCH = 1795921921.0


# ---------------------------------------------------------------- one line

@pytest.mark.parametrize(
    "line, expected",
    [
        # Classic, with a process.
        ("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
         dict(xid=79, pci_bus_id="0000:3b:00.0", pid=1234, process_name="python",
              message="pid=1234, name=python, GPU has fallen off the bus.")),
        # Unknown process.
        ("NVRM: Xid (PCI:0000:3b:00): 43, pid='<unknown>', name=<unknown>, Ch 00000008",
         dict(xid=43, pid=None, process_name=None, message="pid='<unknown>', name=<unknown>, Ch 00000008")),
        # MIG instance ids.
        ("NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:00): 31, pid=2188, name=pt_main_thread, Ch 00000008, "
         "intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_3 faulted @ 0x7f1c_2a000000.",
         dict(xid=31, gpu_instance=1, compute_instance=0, pid=2188, process_name="pt_main_thread")),
        ("NVRM: Xid (PCI:0000:3b:00 GPU-I:12 GPU-CI:3): 13, Graphics SM Warp Exception on (GPC 1, TPC 0, SM 1)",
         dict(xid=13, gpu_instance=12, compute_instance=3)),
        # Old style, no "PCI:".
        ("NVRM: Xid (0000:03:00): 14, Channel 00000001",
         dict(xid=14, pci_bus_id="0000:03:00.0", message="Channel 00000001")),
        # NVLink5.
        ("NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 0x00000000 "
         "0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
         dict(xid=149, pci_bus_id="0018:01:00.0",
              message="NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 0x00000000 0x00000000 0x00000000 "
                      "0x00000000 0x00000000 0x00000000)")),
        ("NVRM: Xid (PCI:0018:01:00): 145, pid=876767, name=ray::WorkerDict, RLW_RXPIPE Nonfatal XC0 i0 Link 13 "
         "(0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)",
         dict(xid=145, pid=876767, process_name="ray::WorkerDict")),
        # Recovery action.
        ("NVRM: Xid (PCI:0008:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
         dict(xid=154, pci_bus_id="0008:01:00.0",
              message="GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)")),
        # DBE with a longer message.
        ("NVRM: Xid (PCI:0000:b7:00): 48, pid=9140, name=python3, An uncorrectable double bit error (DBE) has been "
         "detected on GPU in the framebuffer at partition 3, subpartition 1.", dict(xid=48, process_name="python3")),
        # NVSwitch.
        ("nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)",
         dict(xid=12028, kind="sxid", pci_bus_id="0000:05:00.0",
              message="Non-fatal, Link 32 egress non-posted PRIV error (First)")),
        ("nvidia-nvswitch0: SXid (PCI:0000:c5:00.0): 20034, Fatal, Link 28 LTSSM Fault Up",
         dict(xid=20034, kind="sxid", pci_bus_id="0000:c5:00.0")),
        # One-line "fallen off the bus" of newer drivers.
        ("NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
         dict(xid=79, kind="fallen_off_bus", pci_bus_id="0000:3b:00.0")),
    ],
)
def test_driver_formats(line, expected):
    parsed = parse_line(line)
    assert parsed is not None
    assert parsed.source == "kernel_log" and parsed.raw == line
    for key, value in expected.items():
        assert getattr(parsed, key) == value, key
    if "kind" not in expected:
        assert parsed.kind == "xid"


XID_LINE = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


@pytest.mark.parametrize(
    "prefix, timestamp, uptime",
    [
        ("", None, None),
        ("[ 1234.567890] ", None, 1234.56789),  # dmesg
        ("[1234.5] ", None, 1234.5),
        ("kern  :err   : [ 1234.567890] ", None, 1234.56789),  # dmesg -x
        ("kern  :warn  : ", None, None),
        ("<3>", None, None),
        ("<4>[   12.000001] ", None, 12.000001),
        ("3,1234,5678901234,-;", None, 5678.901234),  # /dev/kmsg record
        ("Nov 29 03:12:01 gpu-a-003 kernel: ", None, None),  # syslog: no year, local time
        ("Nov  9 03:12:01 gpu-a-003 kernel: [ 1234.567890] ", None, 1234.56789),
        ("2026-11-29T03:12:01.123456+00:00 gpu-a-003 kernel: ", EPOCH + 0.123456, None),  # rsyslog
        ("2026-11-29T03:12:01+0000 gpu-a-003 kernel: ", EPOCH, None),  # journalctl -o short-iso
        ("2026-11-29T04:12:01+01:00 gpu-a-003 kernel: ", EPOCH, None),
        ("2026-11-29T03:12:01.5Z gpu-a-003 kernel: ", EPOCH + 0.5, None),
        ("2026-11-29T03:12:01,000000+00:00 ", EPOCH, None),  # dmesg --time-format iso
        ("2026-11-29T03:12:01 gpu-a-003 kernel: ", None, None),  # no offset: not guessed
        ("[ 1234.567890] gpu-a-003 kernel: ", None, 1234.56789),  # journalctl -o short-monotonic
        ("[Sun Nov 29 03:12:01 2026] ", None, None),  # dmesg -T: local time
        ("Sun 2026-11-29 03:12:01 UTC gpu-a-003 kernel: ", None, None),  # unknown prefix: still parsed
    ],
)
def test_every_prefix(prefix, timestamp, uptime):
    parsed = parse_line(prefix + XID_LINE)
    assert parsed is not None
    assert (parsed.xid, parsed.pci_bus_id, parsed.pid) == (79, "0000:3b:00.0", 1234)
    assert parsed.timestamp == pytest.approx(timestamp) if timestamp is not None else parsed.timestamp is None
    assert parsed.uptime_s == pytest.approx(uptime) if uptime is not None else parsed.uptime_s is None


def test_split_prefix_strips_nested_prefixes():
    body, timestamp, uptime = split_prefix("<3>kern  :err   : [  42.000100] NVRM: hello")
    assert (body, timestamp, uptime) == ("NVRM: hello", None, pytest.approx(42.0001))


def test_boot_time_turns_uptime_into_a_timestamp():
    events = parse_kernel_log(["[ 100.5] " + XID_LINE, "2026-11-29T03:12:01+00:00 h kernel: " + XID_LINE],
                              boot_time=EPOCH - 1000)
    assert events[0].timestamp == pytest.approx(EPOCH - 899.5) and events[0].uptime_s == 100.5
    assert events[1].timestamp == EPOCH  # a wall-clock stamp wins


# -------------------------------------------------------------- multi-line

FALLEN = [
    "NVRM: The NVIDIA GPU 0000:3b:00.0",
    "NVRM: (PCI ID: 10de:2330) installed in this system has",
    "NVRM: fallen off the bus and is not responding to commands.",
]


def test_multi_line_fallen_off_the_bus_is_one_event():
    events = parse_kernel_log(["[ 50.1] " + line for line in FALLEN])
    assert len(events) == 1
    assert (events[0].xid, events[0].kind, events[0].pci_bus_id, events[0].uptime_s) == (
        79, "fallen_off_bus", "0000:3b:00.0", 50.1)
    assert "The NVIDIA GPU 0000:3b:00.0" in events[0].raw


def test_fallen_off_the_bus_with_interleaved_noise_and_journal_prefixes():
    lines = [
        "Nov 29 03:12:01 gpu-a-003 kernel: " + FALLEN[0],
        "Nov 29 03:12:01 gpu-a-003 kernel: mlx5_core 0000:17:00.0: mlx5_pcie_event: Detected insufficient power",
        "Nov 29 03:12:01 gpu-a-003 kernel: " + FALLEN[1],
        "Nov 29 03:12:01 gpu-a-003 kernel: " + FALLEN[2],
    ]
    events = parse_kernel_log(lines)
    assert [(e.kind, e.pci_bus_id) for e in events] == [("fallen_off_bus", "0000:3b:00.0")]


def test_fallen_off_the_bus_without_its_header_is_kept_unattributed():
    events = parse_kernel_log([FALLEN[2]])
    assert [(e.xid, e.kind, e.pci_bus_id) for e in events] == [(79, "fallen_off_bus", None)]
    far = [FALLEN[0]] + ["noise %d" % n for n in range(40)] + [FALLEN[2]]
    assert parse_kernel_log(far)[0].pci_bus_id is None


def test_two_gpus_falling_off_are_two_events():
    lines = FALLEN + [line.replace("3b", "5b") for line in FALLEN]
    assert [e.pci_bus_id for e in parse_kernel_log(lines)] == ["0000:3b:00.0", "0000:5b:00.0"]


@pytest.mark.parametrize("mapping_first", [True, False])
def test_uuid_mapping_before_or_after_applies_to_every_event_of_that_gpu(mapping_first):
    mapping = "NVRM: GPU at PCI:0000:3b:00: GPU-3f1c2a9e-0b7d-4c61-9a55-2f0e8f6b1d01"
    body = [XID_LINE, "NVRM: Xid (PCI:0000:5b:00): 31, pid=1, name=x, Ch 1", FALLEN[0], FALLEN[2],
            "nvidia-nvswitch0: SXid (PCI:0000:3b:00.0): 12028, Non-fatal, Link 1"]
    events = parse_kernel_log([mapping, *body] if mapping_first else [*body, mapping])
    uuids = {(e.kind, e.pci_bus_id): e.gpu_uuid for e in events}
    assert uuids == {
        ("xid", "0000:3b:00.0"): "GPU-3f1c2a9e-0b7d-4c61-9a55-2f0e8f6b1d01",
        ("xid", "0000:5b:00.0"): None,
        ("fallen_off_bus", "0000:3b:00.0"): "GPU-3f1c2a9e-0b7d-4c61-9a55-2f0e8f6b1d01",
        ("sxid", "0000:3b:00.0"): None,  # an NVSwitch is not that GPU
    }


def test_sxid_detail_lines_do_not_repeat_the_event():
    lines = [
        "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)",
        "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Severity 0 Engine instance 32 Sub-engine instance 00",
        "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Data {0x00000000, 0x00000000, 0x00000000}",
    ]
    assert len(parse_kernel_log(lines)) == 1


# ---------------------------------------------------------------- garbage

@pytest.mark.parametrize(
    "lines",
    [
        None,
        [],
        [None, 42, 3.5, object(), ["nested"], {"a": 1}],
        ["", " ", "\x00\x01\x02", "NVRM:", "NVRM: Xid", "NVRM: Xid (", "NVRM: Xid (PCI:", "NVRM: Xid (PCI:zz:zz:zz): 1",
         "NVRM: Xid (PCI:0000:3b:00): ", "NVRM: Xid (PCI:0000:3b:00): x, y", "SXid", "SXid (PCI:0000:05:00.0):",
         "NVRM: GPU at PCI:0000:3b:00: not-a-uuid", "[ 99999999999999999999.1] NVRM: Xid (PCI:0000:3b:00) 79",
         "2026-13-45T99:99:99+99:99 h kernel: NVRM: junk", "0001-01-01T00:00:00-23:59 NVRM: junk",
         "<999999>", "[", "[ ", "3,4,5,;", "NVRM: The NVIDIA GPU garbage"],
        12345,
        object(),
    ],
)
def test_garbage_yields_no_event_and_no_exception(lines):
    assert parse_kernel_log(lines) == []


def test_bytes_and_invalid_utf8_are_decoded_with_replacement():
    events = parse_kernel_log([XID_LINE.encode() + b"\xff\xfe", bytearray(b"\x80\x81 nothing"), b""])
    assert len(events) == 1 and events[0].message.endswith("\ufffd\ufffd")
    assert len(parse_kernel_log((XID_LINE + "\n" + XID_LINE).encode())) == 2  # one blob


def test_huge_lines_are_cut_not_choked_on():
    huge = XID_LINE + " " + "A" * (10 * 1024 * 1024)
    events = parse_kernel_log([huge, "NVRM: " + "(" * 1_000_000, "x" * 5_000_000])
    assert len(events) == 1 and len(events[0].raw) == MAX_LINE


def test_a_string_blob_is_split_into_lines():
    blob = "\n".join(["[ 1.0] boot noise", "[ 2.0] " + XID_LINE, "[ 3.0] " + XID_LINE.replace(": 79,", ": 13,")])
    assert [e.xid for e in parse_kernel_log(blob)] == [79, 13]
    assert [e.xid for e in parse_kernel_log([blob])] == [79, 13]  # an element holding several lines


# ------------------------------------------------------------------- fuzz

PREFIXES = st.sampled_from([
    "", "[ 1234.567890] ", "kern  :err   : ", "<3>", "3,1,2,-;", "Nov 29 03:12:01 h kernel: ",
    "2026-11-29T03:12:01.1+00:00 h kernel: ", "[Sun Nov 29 03:12:01 2026] ", "[", "<", "2026-",
])
FRAGMENTS = st.sampled_from([
    "NVRM: Xid (PCI:0000:3b:00): ", "NVRM: Xid (", "(PCI:", "0000:3b:00", " GPU-I:01 GPU-CI:00", "): ", "79, ",
    "154, ", "149, ", "pid=", "'<unknown>'", ", name=", "<unknown>", "GPU recovery action changed from 0x0 (None) to ",
    "0x1 (GPU Reset Required)", "NETIR_LINK_EVT Fatal XC0 i0 Link 08 (", "0x004505c6 0x00000000", ")",
    "SXid (PCI:0000:05:00.0): ", "12028, Non-fatal, ", "NVRM: The NVIDIA GPU ", "0000:3b:00.0",
    "fallen off the bus and is not responding", "NVRM: GPU at PCI:", ": GPU-", "3f1c2a9e-0b7d", "\x00", "\ufffd",
    "\t", " ", ",", ":", "\n", "\r",
])
FUZZ_LINE = st.one_of(
    st.text(max_size=300),
    st.binary(max_size=300),
    st.builds(lambda p, parts, tail: p + "".join(parts) + tail, PREFIXES, st.lists(FRAGMENTS, max_size=12),
              st.text(max_size=40)),
    st.none(),
    st.integers(),
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(FUZZ_LINE, min_size=17, max_size=40))
def test_fuzz_parse_kernel_log_never_raises(lines):
    # 600 examples of 17 to 40 lines: at least 10,200 fuzzed lines per run.
    events = parse_kernel_log(lines)
    for parsed in events:
        assert isinstance(parsed, XidEvent)
        assert parsed.kind in ("xid", "sxid", "fallen_off_bus")
        assert isinstance(parsed.xid, int) and parsed.xid >= 0
        assert parsed.pci_bus_id is None or len(parsed.pci_bus_id) >= 12


@settings(max_examples=1000, deadline=None)
@given(FUZZ_LINE, st.one_of(st.none(), st.floats(allow_nan=True), st.integers(-10**12, 10**12)))
def test_fuzz_parse_line_never_raises(line, boot_time):
    parsed = parse_line(line, boot_time=boot_time if isinstance(boot_time, (int, float)) else None)
    assert parsed is None or isinstance(parsed, XidEvent)


def generated_log(seed: int, lines: int, xid_every: int):
    """A kernel log of mostly other drivers' noise with XID lines in between; returns (lines, expected)."""
    rng = random.Random(seed)
    noise = [
        "mlx5_core 0000:17:00.0: mlx5_pcie_event:301:(pid 1234): Detected insufficient power on the PCIe slot",
        "EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode. Quota mode: none.",
        "audit: type=1400 audit(1795921921.123:42): apparmor=\"DENIED\" operation=\"open\"",
        "nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  550.54.15",
        "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024",
        "IPv6: ADDRCONF(NETDEV_CHANGE): ib0: link becomes ready",
        "perf: interrupt took too long (2504 > 2500), lowering kernel.perf_event_max_sample_rate to 79750",
        "\x00\xff garbage \ufffd",
        "NVRM: Xid (PCI:zz): junk",
        "",
    ]
    xids = [13, 31, 43, 45, 48, 63, 64, 74, 79, 94, 95, 119, 149, 154, 999]
    out, expected = [], []
    for number in range(lines):
        stamp = "[%6d.%06d] " % (number // 10, number % 1_000_000)
        if number % xid_every == 0:
            xid = rng.choice(xids)
            bus = rng.randrange(256)
            out.append("%sNVRM: Xid (PCI:0000:%02x:00): %d, pid=%d, name=python, payload %d"
                       % (stamp, bus, xid, number, number))
            expected.append((xid, "0000:%02x:00.0" % bus, number))
        else:
            out.append(stamp + rng.choice(noise))
    return out, expected


def test_ten_thousand_line_log_mixing_valid_and_junk_lines():
    lines, expected = generated_log(seed=7, lines=10_000, xid_every=37)
    events = parse_kernel_log(lines)
    assert [(e.xid, e.pci_bus_id, e.pid) for e in events] == expected
    assert len(expected) == 271
