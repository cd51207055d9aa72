# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

import json
import math

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import (
    ACTION_ORDER,
    ACTIONS,
    NO_ACTION,
    Fault,
    GpuSnapshot,
    HealthVerdict,
    NvLinkStatus,
    ThresholdError,
    Thresholds,
    normalize_pci_bus_id,
    throttle_reason_names,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("00000000:3B:00.0", "0000:3b:00.0"),  # NVML's busId
        ("0000:3b:00", "0000:3b:00.0"),  # kernel log, no function
        ("3b:00.0", "0000:3b:00.0"),  # no domain
        ("PCI:0000:3b:00", "0000:3b:00.0"),
        ("0018:01:00", "0018:01:00.0"),
        (" 0000:3B:00.1 ", "0000:3b:00.1"),
        ("0000:c5:1f.7", "0000:c5:1f.7"),
        (b"00000000:05:00.0", "0000:05:00.0"),
        ("0001:3b:00.0", "0001:3b:00.0"),
    ],
)
def test_normalize_pci_bus_id_accepts_every_spelling(text, expected):
    assert normalize_pci_bus_id(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "garbage", "0000:3b", "0000:3b:20.0", "0000:3b:00.8", "0000:3bb:00.0", "g000:3b:00.0",
     "000000000:3b:00.0", "0000:3b:00.0.0", None, 42, 3.5, ["0000:3b:00.0"], "0000:3b:00.0\n0000:3b:00.0"],
)
def test_normalize_pci_bus_id_rejects_garbage(text):
    assert normalize_pci_bus_id(text) is None


def test_action_order_covers_every_action():
    assert set(ACTION_ORDER) == set(ACTIONS) | {NO_ACTION}
    assert ACTION_ORDER[0] == NO_ACTION
    assert ACTION_ORDER[-1] == "RESTART_BM"
    # Human and decoder actions rank below every automated recovery.
    for human in ("CONTACT_SUPPORT", "DECODE"):
        for machine in ("RESET_GPU", "DRAIN_AND_RESET", "RESTART_VM", "RESTART_BM"):
            assert ACTION_ORDER.index(human) < ACTION_ORDER.index(machine)


def test_throttle_reason_names_decodes_bits_and_unknown_bits():
    assert throttle_reason_names(0x41) == ("gpu_idle", "hw_thermal_slowdown")
    assert throttle_reason_names(0) == ()
    assert throttle_reason_names(None) == ()
    assert throttle_reason_names(0x1000) == ("unknown_0x1000",)
    assert throttle_reason_names(True) == ()


def test_snapshot_to_dict_is_plain_json_with_throttle_names():
    snapshot = GpuSnapshot(index=2, uuid="GPU-1", pci_bus_id="0000:3b:00.0", throttle_reasons=0x28,
                           nvlinks=(NvLinkStatus(link=0, active=True, crc_flit_errors=1),))
    data = snapshot.to_dict()
    assert data["throttle_reason_names"] == ["hw_slowdown", "sw_thermal_slowdown"]
    assert data["nvlinks"] == [dict(link=0, active=True, crc_flit_errors=1, crc_data_errors=None,
                                    replay_errors=None, recovery_errors=None)]
    assert json.loads(json.dumps(data)) == data


def test_fault_and_verdict_to_dict_have_the_documented_keys():
    fault = Fault(name="X", severity="fatal", action="RESET_GPU", source="nvml", message="m", xid=48)
    data = fault.to_dict()
    for key in ("xid", "gpu_index", "gpu_uuid", "pci_bus_id", "name", "severity", "action", "message", "source"):
        assert key in data
    assert data["effective"] is True
    verdict = HealthVerdict(state="fatal", action="RESET_GPU", reason="r", faults=(fault,))
    out = verdict.to_dict()
    assert out["verdict"] == out["state"] == "fatal"
    assert out["faults"] == [data]
    assert json.loads(json.dumps(out)) == out


def test_default_thresholds_are_valid():
    Thresholds().validate()


@pytest.mark.parametrize(
    "field, value",
    [
        ("window_s", 0),
        ("window_s", -1.0),
        ("window_s", math.nan),
        ("window_s", math.inf),
        ("window_s", "3600"),
        ("burst_s", -1),
        ("burst_s", 3600.0),  # not shorter than the window
        ("repeat_escalation_count", 1),
        ("repeat_escalation_count", 2.5),
        ("repeat_escalation_count", True),
        ("app_repeat_escalation_count", 0),
        ("reset_escalation_count", None),
        ("temperature_max_c", 500),
        ("ecc_sbe_volatile_max", -1),
        ("nvlink_crc_flit_max", 1.5),
        ("nvlink_crc_data_max", -5),
        ("nvlink_replay_max", "x"),
        ("nvlink_recovery_max", -1),
        ("nvlink_inactive_is_fault", 1),
        ("throttle_fault_mask", -1),
        ("throttle_fault_mask", 2 ** 64),
    ],
)
def test_invalid_thresholds_raise_value_error_naming_the_field(field, value):
    with pytest.raises(ValueError) as caught:
        Thresholds(**{field: value})
    assert isinstance(caught.value, ThresholdError)
    assert caught.value.field == field
    assert "thresholds.%s" % field in str(caught.value)


def test_validate_catches_a_threshold_changed_after_construction():
    thresholds = Thresholds()
    object.__setattr__(thresholds, "window_s", -5)
    with pytest.raises(ValueError, match="window_s"):
        thresholds.validate()
