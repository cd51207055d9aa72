# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Domain objects of GPU health, shared by the reader, the parser, the rules and the verdict.

Pure data: no I/O. The NVML reader (``health.nvml``) and the kernel-log parser
(``health.kernel_log``) produce ``GpuInfo``, ``GpuSnapshot`` and ``XidEvent``;
the rules (``health.xid_rules``) turn them into ``Fault``; the verdict engine
(``health.verdict``) folds faults into one ``HealthVerdict`` per node.

Actions
-------
``ACTIONS`` are NVIDIA's XID catalog resolution buckets that a machine can act
on, plus two that need a human or a decoder:

* ``RESTART_FM`` - restart the NVIDIA Fabric Manager. The catalog's only use of
  it is XID 45 when it comes alone ("WORKFLOW_XID_45: Solo: RESTART_FM"). It is
  never fatal and never escalated; on hosts without Fabric Manager the
  remediation layer treats it as ``IGNORE``.
* ``DECODE`` - the XID's registers must be decoded before acting (XID 74, and
  144-150 when the NVLink5 decode table cannot place the message).
* ``CONTACT_SUPPORT`` - a human must look (also the default for unknown XIDs).

``ACTION_ORDER`` ranks them, least to most disruptive. The verdict takes the
most severe action of its effective faults, comparing fatal faults first, so a
fatal ``RESET_GPU`` beats a non-fatal ``CONTACT_SUPPORT`` while the latter is
still listed. Human and decoder actions rank below every automated recovery:
an automated reset of one GPU must not wait for a human looking at another.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, fields
from typing import Any, Dict, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError, GpufleetError

ACTIONS = (
    "IGNORE",
    "RESTART_APP",
    "RESTART_FM",
    "RESET_GPU",
    "DRAIN_AND_RESET",
    "RESTART_BM",
    "RESTART_VM",
    "CONTACT_SUPPORT",
    "DECODE",
)

# The verdict's action when there is no fault at all (not a catalog bucket).
NO_ACTION = "NONE"

# Least to most disruptive. RESTART_VM sits below RESTART_BM: restarting the VM
# that owns a GPU is the catalog's lighter alternative to a bare-metal reboot.
ACTION_ORDER = (
    NO_ACTION,
    "IGNORE",
    "RESTART_APP",
    "RESTART_FM",
    "DECODE",
    "CONTACT_SUPPORT",
    "RESET_GPU",
    "DRAIN_AND_RESET",
    "RESTART_VM",
    "RESTART_BM",
)
ACTION_RANK = {name: rank for rank, name in enumerate(ACTION_ORDER)}

# Actions that take the GPU out of service until they are done: a fault whose
# catalog action is one of these is fatal.
OUT_OF_SERVICE_ACTIONS = frozenset(("RESET_GPU", "DRAIN_AND_RESET", "RESTART_BM", "RESTART_VM"))

SEVERITIES = ("fatal", "non-fatal")
STATES = ("healthy", "degraded", "fatal")

# Clock event (throttle) reasons, nvml.h nvmlClocksEventReason* bits.
THROTTLE_REASONS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
)
THROTTLE_HW_SLOWDOWN = 0x8
THROTTLE_SW_THERMAL = 0x20
THROTTLE_HW_THERMAL = 0x40
THROTTLE_HW_POWER_BRAKE = 0x80
# Throttling that means the GPU is too hot or its board pulled the brake, as
# opposed to idling or honouring a power cap somebody set on purpose.
DEFAULT_THROTTLE_FAULT_MASK = THROTTLE_HW_SLOWDOWN | THROTTLE_SW_THERMAL | THROTTLE_HW_THERMAL | THROTTLE_HW_POWER_BRAKE


class HealthError(GpufleetError):
    """Base of the health package's errors; modules turn it into fail_json."""


class ThresholdError(HealthError, FieldError):
    """A threshold has a bad value; ``field`` names it (without the ``thresholds.`` prefix)."""

    def __init__(self, field_name: str, message: str) -> None:
        FieldError.__init__(self, "thresholds." + field_name, message)
        self.field = field_name


def throttle_reason_names(mask: int | None) -> Tuple[str, ...]:
    """Names of the bits set in an NVML clocks-event bitmask; unknown bits as hex."""
    if mask is None or isinstance(mask, bool) or not isinstance(mask, int) or mask < 0:
        return ()
    names = []
    known = 0
    for bit, name in THROTTLE_REASONS:
        known |= bit
        if mask & bit:
            names.append(name)
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            names.append("unknown_0x%x" % bit)
            rest &= ~bit
        bit <<= 1
    return tuple(names)


_PCI_RE = re.compile(
    r"^(?:PCI:)?(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):(?P<device>[0-9a-fA-F]{1,2})"
    r"(?:\.(?P<function>[0-7]))?$"
)


def normalize_pci_bus_id(text: Any) -> str | None:
    """Canonical ``dddd:bb:dd.f`` (lower case, 4-digit domain) or None for garbage.

    NVML says ``00000000:3B:00.0``, the kernel log ``0000:3b:00`` or ``3b:00.0``;
    all three name the same device, and events from both sources must meet.
    """
    if isinstance(text, bytes):
        text = text.decode("ascii", errors="replace")
    if not isinstance(text, str):
        return None
    match = _PCI_RE.match(text.strip())
    if match is None:
        return None
    domain = int(match.group("domain") or "0", 16)
    device = int(match.group("device"), 16)
    if device > 0x1F:  # PCI has 32 device numbers per bus
        return None
    function = int(match.group("function") or "0")
    return "%04x:%02x:%02x.%d" % (domain, int(match.group("bus"), 16), device, function)


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str | None
    name: str | None
    pci_bus_id: str | None
    serial: str | None
    driver_version: str | None


@dataclass(frozen=True)
class NvLinkStatus:
    link: int
    active: bool | None
    crc_flit_errors: int | None = None
    crc_data_errors: int | None = None
    replay_errors: int | None = None
    recovery_errors: int | None = None


@dataclass(frozen=True)
class GpuSnapshot:
    index: int
    uuid: str | None = None
    pci_bus_id: str | None = None
    lost: bool = False  # NVML_ERROR_GPU_IS_LOST: fallen off the bus
    temperature_c: int | None = None
    power_w: float | None = None
    ecc_sbe_volatile: int | None = None
    ecc_dbe_volatile: int | None = None
    ecc_sbe_aggregate: int | None = None
    ecc_dbe_aggregate: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failed: bool | None = None
    throttle_reasons: int | None = None  # NVML clocks-event bitmask
    nvlinks: Tuple[NvLinkStatus, ...] = ()

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data["nvlinks"] = [asdict(link) for link in self.nvlinks]
        data["throttle_reason_names"] = list(throttle_reason_names(self.throttle_reasons))
        return data


@dataclass(frozen=True)
class XidEvent:
    """One raw occurrence of an XID, from the kernel log or from NVML events.

    ``timestamp`` is wall-clock epoch seconds, or None when the source did not
    say. Kernel-log lines that only carry seconds since boot (dmesg's
    ``[ 1234.5]``, ``/dev/kmsg``, ``short-monotonic``) keep that value in
    ``uptime_s``; the parser turns it into ``timestamp`` when it is given the
    boot time. Keeping the two clocks apart means a wall-clock filter such as
    "since 03:00" never mistakes 1234 s after boot for 1970.
    """

    xid: int
    source: str  # "kernel_log" | "nvml"
    kind: str = "xid"  # "xid" | "sxid" (NVSwitch) | "fallen_off_bus"
    pci_bus_id: str | None = None  # normalized, see normalize_pci_bus_id
    gpu_index: int | None = None
    gpu_uuid: str | None = None
    message: str = ""  # the raw text after "<xid>, " (kept for DECODE)
    timestamp: float | None = None
    pid: int | None = None
    process_name: str | None = None
    gpu_instance: int | None = None  # MIG
    compute_instance: int | None = None  # MIG
    uptime_s: float | None = None  # seconds since boot, when the line had only that
    raw: str = ""  # the whole log line, for the audit trail

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Fault:
    """A classified problem of one GPU (or NVSwitch, or the node when unattributed)."""

    name: str
    severity: str  # "fatal" | "non-fatal"
    action: str  # one of ACTIONS
    source: str
    message: str
    xid: int | None = None
    gpu_index: int | None = None
    gpu_uuid: str | None = None
    pci_bus_id: str | None = None
    investigatory_action: str | None = None
    unknown: bool = False
    count: int = 1
    description: str = ""  # catalog description, for the verdict's sentence
    detail: str = ""  # why this action: the rule or decode that chose it
    escalated: bool = False  # repeats raised its severity or action
    first_seen: float | None = None
    last_seen: float | None = None
    kind: str = "xid"  # "xid" | "sxid" | "fallen_off_bus" | "nvml_counter"
    # XID 144-150 only: which column of the NVLink5 decode sheet placed the message -
    # "V1" (driver < R575), "V2" (>= R575), "V1/V2" (both agree) or "ambiguous" (no
    # driver version and the two columns disagree; ``decode_candidates`` names both rows).
    decode: str | None = None
    decode_candidates: Tuple[str, ...] = ()
    # XID 13 only: the "(GPC g, TPC t)" its repeats were grouped by, e.g. "GPC 1, TPC 2".
    location: str | None = None

    @property
    def effective(self) -> bool:
        """Whether the fault counts towards the verdict (IGNORE faults are only listed)."""
        return self.action != "IGNORE"

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data["decode_candidates"] = list(self.decode_candidates)
        data["effective"] = self.effective
        return data


@dataclass(frozen=True)
class Thresholds:
    """Knobs of the rules and the verdict; every default is the safe one.

    Repeats are counted per GPU and XID inside ``window_s``; events of one
    GPU and XID closer than ``burst_s`` count once, so one incident seen by
    both NVML and the kernel log (or printed twice by the driver) is not a
    repeat.
    """

    window_s: float = 3600.0
    burst_s: float = 30.0
    # A non-fatal XID (an unknown one, DECODE, a non-fatal CONTACT_SUPPORT) seen this often turns fatal.
    repeat_escalation_count: int = 3
    # An application XID (RESTART_APP) seen this often on one GPU, and on no other
    # GPU, asks for diagnostics (CONTACT_SUPPORT), as the catalog's 13/31 workflows do.
    app_repeat_escalation_count: int = 3
    # A RESET_GPU / DRAIN_AND_RESET XID seen this often: the reset did not hold, reboot.
    reset_escalation_count: int = 2
    temperature_max_c: float = 87.0  # H100 SXM "GPU Max Operating Temp"
    ecc_sbe_volatile_max: int = 1000
    nvlink_crc_flit_max: int = 100
    nvlink_crc_data_max: int = 100
    nvlink_replay_max: int = 100
    nvlink_recovery_max: int = 0
    nvlink_inactive_is_fault: bool = True
    throttle_fault_mask: int = DEFAULT_THROTTLE_FAULT_MASK

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ThresholdError (a ValueError) naming the first bad field."""
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name == "nvlink_inactive_is_fault":
                if not isinstance(value, bool):
                    raise ThresholdError(item.name, "must be true or false, got %r" % (value,))
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ThresholdError(item.name, "must be a number, got %r" % (value,))
            if not math.isfinite(value):
                raise ThresholdError(item.name, "must be finite, got %r" % (value,))
        for name in ("repeat_escalation_count", "app_repeat_escalation_count", "reset_escalation_count",
                     "ecc_sbe_volatile_max", "nvlink_crc_flit_max", "nvlink_crc_data_max",
                     "nvlink_replay_max", "nvlink_recovery_max", "throttle_fault_mask"):
            if not isinstance(getattr(self, name), int):
                raise ThresholdError(name, "must be an integer, got %r" % (getattr(self, name),))
        if self.window_s <= 0:
            raise ThresholdError("window_s", "must be > 0 seconds, got %r" % (self.window_s,))
        if self.burst_s < 0:
            raise ThresholdError("burst_s", "must be >= 0 seconds, got %r" % (self.burst_s,))
        if self.burst_s >= self.window_s:
            raise ThresholdError("burst_s", "must be shorter than window_s (%r), got %r"
                                 % (self.window_s, self.burst_s))
        for name in ("repeat_escalation_count", "app_repeat_escalation_count", "reset_escalation_count"):
            if getattr(self, name) < 2:
                raise ThresholdError(name, "must be >= 2 (one occurrence is not a repeat), got %r"
                                     % (getattr(self, name),))
        if not -50 <= self.temperature_max_c <= 150:
            raise ThresholdError("temperature_max_c", "must be between -50 and 150 C, got %r"
                                 % (self.temperature_max_c,))
        for name in ("ecc_sbe_volatile_max", "nvlink_crc_flit_max", "nvlink_crc_data_max",
                     "nvlink_replay_max", "nvlink_recovery_max"):
            if getattr(self, name) < 0:
                raise ThresholdError(name, "must be >= 0, got %r" % (getattr(self, name),))
        if not 0 <= self.throttle_fault_mask < 2 ** 64:
            raise ThresholdError("throttle_fault_mask", "must be a 64-bit mask, got %r" % (self.throttle_fault_mask,))


@dataclass(frozen=True)
class HealthVerdict:
    state: str  # "healthy" | "degraded" | "fatal"
    action: str  # NO_ACTION or one of ACTIONS
    reason: str
    faults: Tuple[Fault, ...] = ()
    evaluated_at: float | None = None  # the "now" the window ended at, when known
    events_considered: int = 0  # events inside the window
    catalog_version: str = ""

    def to_dict(self) -> Dict[str, Any]:
        return {
            # "verdict" is the name modules return; "state" the field's own name.
            "verdict": self.state,
            "state": self.state,
            "action": self.action,
            "reason": self.reason,
            "faults": [fault.to_dict() for fault in self.faults],
            "evaluated_at": self.evaluated_at,
            "events_considered": self.events_considered,
            "catalog_version": self.catalog_version,
        }


@dataclass(frozen=True)
class XidCatalogEntry:
    """One row of NVIDIA's XID catalog, as generated into ``xid_catalog``."""

    code: int
    mnemonic: str
    name: str  # the mnemonic's first alternative: "A / B" -> "A"
    description: str
    severity: str  # derived, see tools/gen_xid_catalog.py
    action: str  # one of ACTIONS, derived from immediate_bucket
    immediate_bucket: str  # the catalog's own words
    investigatory_bucket: str
    applies_to: Tuple[str, ...]  # products, e.g. ("A100", "H100")
    xid_154_linkage: str
    trigger_conditions: str
    unused: bool


@dataclass(frozen=True)
class NvLink5DecodeRule:
    """One row of the catalog's "XID 144-150 Decode" sheet.

    A row matches when IntrInfo matches the V1 (driver < R575) or V2 (>= R575)
    bit pattern - ``(intr & care) == value`` - and the error status is one of
    ``error_status`` (empty: any). When the action-2 pattern of the same
    version matches too, ``action2`` applies (the catalog's "promotable" rows).
    """

    xid: int
    subcode: str
    subcode_v1: str
    subcode_v2: str
    v1_care: int
    v1_value: int
    v2_care: int
    v2_value: int
    error_status: Tuple[int, ...]
    action: str  # "IGNORE" | "RESET_GPU" | "XID_154_EVAL"
    investigatory_action: str
    severity: str  # derived: "fatal" | "non-fatal"
    severity_raw: str
    hw_sw: str
    local_remote: str
    action2: str = ""
    action2_v1_care: int = 0
    action2_v1_value: int = 0
    action2_v2_care: int = 0
    action2_v2_value: int = 0
