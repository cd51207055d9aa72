# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""NVIDIA's XID catalog rules as pure functions: events and snapshots in, faults out.

The catalog gives each XID an action, but some actions depend on context, and
these are the rules that read it (all "on the same GPU, in the window"):

* XID 45 (preemptive cleanup) counts only alone. With any other XID it is the
  consequence of that fault and is IGNOREd; alone it takes the catalog's
  RESTART_FM. It is never escalated by repetition: a job killed with Ctrl-C
  logs it on every GPU it held, and treating repeats as fatal once flagged 77
  nodes across 11 racks after a single job crash.
* XID 48 (double-bit ECC) is RESET_GPU alone and DRAIN_AND_RESET with 63 or 64.
* XID 154 says the recovery action itself ("... changed from 0x0 (None) to 0x1
  (GPU Reset Required)"). The latest 154 of a GPU wins: the driver moves it to
  0x0 once the GPU has recovered.
* XIDs 74 and 144-150 need their registers decoded. 144-150 are decoded with
  the catalog's NVLink5 table when the message carries IntrInfo and the error
  status; otherwise, and always for 74, the action is DECODE with the raw text.
* XIDs 144-150: the sheet has one IntrInfo column for drivers before R575 (V1)
  and one from R575 (V2). With the driver version (NVML gives it) the matching
  column decides; without it the line picks its own column (the subcode name or
  bits differ between columns), and when both columns fit with different outcomes
  the fault says ``decode="ambiguous"``, names both candidate rows and asks for
  DECODE rather than picking the stricter row: conservative both ways, a guess
  neither ignores the fault nor fences the node, and repeats make it fatal.
* A known XID whose catalog action is CONTACT_SUPPORT is fatal: the node is
  fenced and held for a human. An XID missing from the catalog is
  CONTACT_SUPPORT, non-fatal until repeated, reported with ``unknown=True`` and
  never dropped.
* NVSwitch SXids: the "Fatal"/"Non-fatal" word of the line decides, except where
  the Fabric Manager guide says more for a code (``SXID_RULES``): the table can
  make a printed "Non-fatal" stricter (12028 stalls NVLink traffic) or say what
  to do with it (single-bit ECC: IGNORE), but a line that says "Fatal" is always
  fatal. The ``Severity ...``/``Data {...}`` detail lines are not events (kernel_log).
* Action and severity agree everywhere: IGNORE is never fatal, and an action
  that takes the GPU out of service is always fatal.

Repeats (``Thresholds``) escalate: RESET_GPU/DRAIN_AND_RESET seen
``reset_escalation_count`` times means the reset did not hold (RESTART_BM); a
non-fatal CONTACT_SUPPORT/DECODE/unknown XID seen ``repeat_escalation_count``
times turns fatal; an application XID (RESTART_APP) seen
``app_repeat_escalation_count`` times on one GPU and on no other asks for
diagnostics (CONTACT_SUPPORT, still non-fatal), as the catalog's XID 13/31
workflows say. Repeats are grouped the way the driver reports them: XID 13 by
GPU, GPC and TPC (from "... on (GPC 1, TPC 2, SM 0)"), XID 31 by GPU and only
when no other GPU has it. IGNORE faults, XID 45, XID 154 and NVSwitch SXids
never escalate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import (
    ACTION_RANK,
    OUT_OF_SERVICE_ACTIONS,
    Fault,
    GpuInfo,
    GpuSnapshot,
    NvLink5DecodeRule,
    Thresholds,
    XidCatalogEntry,
    XidEvent,
    throttle_reason_names,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.xid_catalog import (
    NVLINK5_DECODE,
    XID_CATALOG,
)

XID_GR_EXCEPTION = 13
XID_MMU_FAULT = 31
XID_PREEMPTIVE_CLEANUP = 45
XID_DBE = 48
XID_ROW_REMAP_EVENT = 63
XID_ROW_REMAP_FAILURE = 64
XID_NVLINK = 74
XID_FALLEN_OFF_BUS = 79
XID_RECOVERY_ACTION = 154
NVLINK5_XIDS = frozenset(range(144, 151))
DECODE_XIDS = NVLINK5_XIDS | {XID_NVLINK}
NEVER_ESCALATED_XIDS = frozenset((XID_PREEMPTIVE_CLEANUP, XID_RECOVERY_ACTION))

# The NVLink5 decode sheet's IntrInfo columns: V1 for drivers before R575, V2 from R575.
NVLINK5_V2_DRIVER_MAJOR = 575
_DRIVER_MAJOR_RE = re.compile(r"^\s*[Rr]?(\d{2,4})(?:[.\s]|$)")

# NVSwitch SXids by code, where NVIDIA's Fabric Manager guide says more than the
# "Fatal"/"Non-fatal" word the driver prints. Source: "Fabric Manager for NVIDIA
# NVSwitch Systems" user guide (DU-09883-001 v1.3, October 2023), appendix D,
# section D.4 "Non-Fatal NVSwitch SXid Errors" (Impact and Recovery columns), as
# transcribed in GPUd (leptonai/gpud, pkg/nvidia-query/sxid/sxid.go). Codes the
# guide lists as fatal (D.5, D.6) print "Fatal" and are read from the text.
# code: (name, severity, action, why)
_SBE = ("single-bit ECC error", "non-fatal", "IGNORE",
        "corrected by the NVSwitch hardware, no impact (FM guide D.4) -> IGNORE")
SXID_RULES = {
    11004: ("ingress invalid ACL", "fatal", "RESTART_BM",
            "printed non-fatal, but the GPU's NVLink traffic stalls and later GPU access hangs"
            " (FM guide D.4); reset the GPUs and NVSwitches -> RESTART_BM"),
    12028: ("egress non-posted PRIV error", "fatal", "RESTART_BM",
            "printed non-fatal, but the GPU's NVLink traffic stalls and later GPU access hangs"
            " (FM guide D.4); reset the GPUs and NVSwitches -> RESTART_BM"),
    19084: ("AN1 heartbeat timeout", "fatal", "RESTART_BM",
            "printed non-fatal, but the guide's recovery is to reset all GPUs and NVSwitches"
            " (FM guide D.4) -> RESTART_BM"),
    20001: ("TX replay error", "non-fatal", "CONTACT_SUPPORT",
            "packets retransmitted, NVLink throughput may drop (FM guide D.4) -> CONTACT_SUPPORT"),
    20012: ("broken/inconsistent connection", "non-fatal", "CONTACT_SUPPORT",
            "unless an uncoordinated shutdown caused it, check the link's mechanical connections"
            " (FM guide D.4) -> CONTACT_SUPPORT"),
    22013: ("Minion link DLREQ interrupt", "non-fatal", "IGNORE",
            "can be safely ignored (FM guide D.4) -> IGNORE"),
}
SXID_RULES.update({code: _SBE for code in (
    11012, 11021, 11022, 11023, 12021, 12023, 15008, 15011, 19049, 19055, 19057, 19059,
    19062, 19065, 19068, 19071, 24001, 24002, 24003)})

# XID 13's message names the graphics unit: "Graphics SM Warp Exception on (GPC 1, TPC 2, SM 0)".
_GPC_TPC_RE = re.compile(r"\bGPC\s*(\d{1,3})\s*,\s*TPC\s*(\d{1,3})", re.IGNORECASE)

# XID 154's recovery action codes: nvml.h nvmlDeviceGpuRecoveryAction_t. The
# catalog names 0-4; 5-7 are newer NVML values, mapped to the nearest action.
RECOVERY_ACTIONS = {
    0: ("None", "IGNORE"),
    1: ("GPU Reset Required", "RESET_GPU"),
    2: ("Node Reboot Required", "RESTART_BM"),
    # "Drain P2P": stop peer traffic, then the driver asks for a reset.
    3: ("Drain P2P", "DRAIN_AND_RESET"),
    4: ("Drain and Reset", "DRAIN_AND_RESET"),
    # Recovering a multi-node IMEX domain is a fabric operation for a human.
    5: ("Recover IMEX Domain", "CONTACT_SUPPORT"),
    # No bus-reset action of our own; a reboot resets the bus for certain.
    6: ("Bus Reset", "RESTART_BM"),
    7: ("System Reboot", "RESTART_BM"),
}
_RECOVERY_BY_LABEL = {label.lower(): code for code, (label, _action) in RECOVERY_ACTIONS.items()}

# Decode actions ranked for picking the worst of several matching rows.
_DECODE_RANK = {"IGNORE": 0, "XID_154_EVAL": 1, "RESET_GPU": 2}

_RECOVERY_RE = re.compile(
    r"recovery action changed(?:\s+from\s+\S{1,12}(?:\s*\([^)]{0,64}\))?)?\s+to\s+"
    r"(0x[0-9a-fA-F]{1,8}|\d{1,8})?\s*(?:\(([^)]{0,64})\))?",
    re.IGNORECASE,
)
_PID_NAME_RE = re.compile(r"^\s*pid=(?:'?<unknown>'?|\d{1,12}),\s*name=[^,]{0,256},\s*")
_REGISTERS_RE = re.compile(r"\(\s*(0x[0-9a-fA-F]{1,8})\s+(0x[0-9a-fA-F]{1,8})")
_LINK_RE = re.compile(r"\bLink\s+(-?\d{1,3})\b")

DeviceRecord = Union[XidEvent, GpuSnapshot, GpuInfo]
# Thresholds are frozen, so one shared default instance is safe.
DEFAULT_THRESHOLDS = Thresholds()


def catalog_entry(xid: int) -> Optional[XidCatalogEntry]:
    return XID_CATALOG.get(xid)


def worse_action(first: str, second: str) -> str:
    return first if ACTION_RANK.get(first, 0) >= ACTION_RANK.get(second, 0) else second


def severity_of(action: str) -> str:
    return "fatal" if action in OUT_OF_SERVICE_ACTIONS else "non-fatal"


def consistent_severity(action: str, severity: str) -> str:
    """The severity that agrees with ``action``: IGNORE is never fatal, out-of-service always is."""
    if action == "IGNORE":
        return "non-fatal"
    if action in OUT_OF_SERVICE_ACTIONS:
        return "fatal"
    return severity


def nvlink5_table_version(driver_version: Optional[str]) -> Optional[str]:
    """"V1" for a driver before R575, "V2" from R575, None when the version is unknown or unreadable."""
    if not isinstance(driver_version, str):
        return None
    match = _DRIVER_MAJOR_RE.match(driver_version)
    if match is None:
        return None
    return "V2" if int(match.group(1)) >= NVLINK5_V2_DRIVER_MAJOR else "V1"


def sxid_printed_fatal(message: str) -> bool:
    """Whether an SXid headline says "Fatal" (the driver prints "Fatal, " or "Non-fatal, " first)."""
    return (message or "").lstrip().lower().startswith("fatal")


def xid13_location(message: str) -> Optional[str]:
    """"GPC g, TPC t" of an XID 13 message, or None when it does not say."""
    match = _GPC_TPC_RE.search(message or "")
    return "GPC %d, TPC %d" % (int(match.group(1)), int(match.group(2))) if match else None


# ------------------------------------------------------------------ XID 154

@dataclass(frozen=True)
class RecoveryAction:
    code: Optional[int]
    label: Optional[str]
    action: str
    severity: str
    detail: str


def recovery_action_from_text(message: str) -> RecoveryAction:
    """XID 154's "recovery action changed from 0x0 (None) to 0xN (...)" as an action.

    The code decides; the label is used when the code is missing or unknown.
    Anything unreadable asks a human (CONTACT_SUPPORT), never IGNORE.
    """
    match = _RECOVERY_RE.search(message or "")
    if match is None:
        return RecoveryAction(None, None, "CONTACT_SUPPORT", "non-fatal",
                              "XID 154 without a readable recovery action: CONTACT_SUPPORT")
    code_text, label = match.group(1), (match.group(2) or "").strip() or None
    code = int(code_text, 0) if code_text else None
    if code not in RECOVERY_ACTIONS and label is not None:
        code = _RECOVERY_BY_LABEL.get(label.lower(), code)
    if code not in RECOVERY_ACTIONS:
        return RecoveryAction(code, label, "CONTACT_SUPPORT", "non-fatal",
                              "XID 154 recovery action %s (%s) is not known: CONTACT_SUPPORT"
                              % ("?" if code is None else "0x%x" % code, label or "no label"))
    name, action = RECOVERY_ACTIONS[code]
    return RecoveryAction(code, label or name, action, severity_of(action),
                          "XID 154 recovery action 0x%x (%s) -> %s" % (code, label or name, action))


# ------------------------------------------------------------ NVLink5 decode

@dataclass(frozen=True)
class NvLink5Decode:
    action: str  # "IGNORE" | "RESET_GPU" | "XID_154_EVAL"
    severity: str
    investigatory_action: str
    subcode: str
    version: str  # "V1" (driver < R575), "V2" (>= R575) or "V1/V2"
    intr_info: int
    error_status: int
    link: Optional[int]
    # "ambiguous" rows: the V1 and V2 outcomes, named, when no driver version chose one.
    candidates: Tuple[str, ...] = ()

    @property
    def ambiguous(self) -> bool:
        return self.version == "ambiguous"

    @property
    def detail(self) -> str:
        where = "IntrInfo 0x%08x, ErrorStatus 0x%08x%s" % (
            self.intr_info, self.error_status, "" if self.link is None else ", link %d" % self.link)
        if self.ambiguous:
            return ("NVLink5 decode ambiguous without the driver version (%s): %s; pass driver_version"
                    " -> DECODE" % (where, " | ".join(self.candidates)))
        return "NVLink5 decode %s %s (%s) -> %s" % (self.subcode, self.version, where, self.action)


def strip_process(message: str) -> str:
    """The message without the leading ``pid=..., name=...,`` the driver adds."""
    return _PID_NAME_RE.sub("", message or "", count=1)


def _rule_matches(rule: NvLink5DecodeRule, token: Optional[str], intr: int, status: int,
                  table: Optional[str] = None):
    """Yield (version, action, severity) for each version of ``rule`` that fits (only ``table``'s when given)."""
    if rule.error_status and status not in rule.error_status:
        return
    versions = (
        ("V1", rule.subcode_v1, rule.v1_care, rule.v1_value, rule.action2_v1_care, rule.action2_v1_value),
        ("V2", rule.subcode_v2, rule.v2_care, rule.v2_value, rule.action2_v2_care, rule.action2_v2_value),
    )
    for version, name, care, value, alt_care, alt_value in versions:
        if (token is not None and token != name) or (table is not None and version != table):
            continue
        if rule.action2 and alt_care and (intr & alt_care) == alt_value:
            # The catalog's "promotable" rows: action 2 applies and the error is fatal.
            yield version, rule.action2, "fatal"
        elif (intr & care) == value:
            yield version, rule.action, rule.severity


def _decode_status(xid: int, token: Optional[str], intr: int, status: int,
                   table: Optional[str] = None) -> List[Tuple[NvLink5DecodeRule, str, str, str]]:
    found = []
    for rule in NVLINK5_DECODE:
        if rule.xid != xid:
            continue
        for version, action, severity in _rule_matches(rule, token, intr, status, table):
            found.append((rule, version, action, consistent_severity(action, severity)))
    return found


def _worst(found):
    return max(found, key=lambda item: (_DECODE_RANK[item[2]], item[3] == "fatal"))


def _candidate(item) -> str:
    rule, version, action, severity = item
    return "%s (%s) row %s -> %s %s" % (
        version, "driver < R575" if version == "V1" else "driver >= R575", rule.subcode, action, severity)


def decode_nvlink5(xid: int, message: str, driver_version: Optional[str] = None) -> Optional[NvLink5Decode]:
    """Decode an XID 144-150 message with the catalog's table; None when it cannot be placed.

    Message shape: ``<SUBCODE> <Fatal|Nonfatal> XC<n> i<n> Link <n> (<IntrInfo>
    <ErrorStatus> <debug data>...)``. The subcode text picks the table version
    (V1 names before R575, V2 after); when it matches no row name the bit
    patterns alone decide. An error status with several bits that no row lists
    as a whole is decoded bit by bit and only when every bit decodes. When
    several rows fit, the worst action wins.

    ``driver_version`` (e.g. "575.51.03") picks the sheet's column: V1 before R575,
    V2 from R575. Without it both columns are tried; when their outcomes differ the
    result is ``version="ambiguous"`` with action DECODE and both candidate rows
    named, rather than the stricter row.
    """
    if xid not in NVLINK5_XIDS:
        return None
    body = strip_process(message)
    registers = _REGISTERS_RE.search(body)
    if registers is None:
        return None
    intr, status = int(registers.group(1), 16), int(registers.group(2), 16)
    words = body.split(None, 1)
    token = words[0] if words else None
    names = {name for rule in NVLINK5_DECODE if rule.xid == xid for name in (rule.subcode_v1, rule.subcode_v2)}
    if token not in names:
        token = None
    table = nvlink5_table_version(driver_version)
    found = _decode_status(xid, token, intr, status, table)
    if not found and bin(status).count("1") > 1:
        for bit in range(32):
            if status & (1 << bit):
                per_bit = _decode_status(xid, token, intr, 1 << bit, table)
                if not per_bit:
                    return None
                found.extend(per_bit)
    if not found:
        return None
    link_match = _LINK_RE.search(body)
    link = int(link_match.group(1)) if link_match else None
    by_version = {version: _worst([item for item in found if item[1] == version])
                  for version in sorted({item[1] for item in found})}
    if table is None and len(by_version) > 1:
        outcomes = {(item[2], item[3]) for item in by_version.values()}
        if len(outcomes) > 1:
            first = by_version["V1"][0]
            return NvLink5Decode(
                action="DECODE", severity="non-fatal", investigatory_action=first.investigatory_action,
                subcode=first.subcode, version="ambiguous", intr_info=intr, error_status=status, link=link,
                candidates=tuple(_candidate(item) for item in by_version.values()),
            )
    rule, _version, action, severity = _worst(found)
    versions = sorted({item[1] for item in found if item[2] == action})
    return NvLink5Decode(
        action=action, severity=severity, investigatory_action=rule.investigatory_action,
        subcode=rule.subcode, version="/".join(versions), intr_info=intr, error_status=status, link=link,
    )


# ----------------------------------------------------------------- identity

class DeviceIdentities:
    """Which records name the same device, by any shared PCI bus id, UUID or NVML index.

    NVML events carry index, UUID and PCI id; kernel-log lines carry the PCI id
    (and a UUID when the driver printed the ``GPU at PCI:`` line); snapshots
    carry all three. Linking them lets one GPU's evidence meet in one place.
    """

    def __init__(self, records: Iterable[DeviceRecord] = ()) -> None:
        self._parent: Dict[Tuple[str, object], Tuple[str, object]] = {}
        self._identities: Optional[Dict[object, Tuple[Optional[int], Optional[str], Optional[str]]]] = None
        for record in records:
            self.add(record)

    @staticmethod
    def keys(record: DeviceRecord) -> List[Tuple[str, object]]:
        keys: List[Tuple[str, object]] = []
        if getattr(record, "kind", None) == "sxid":
            # An NVSwitch is not a GPU: never let its PCI id join a GPU's identity.
            return [("switch", record.pci_bus_id)] if record.pci_bus_id else []
        if record.pci_bus_id:
            keys.append(("pci", record.pci_bus_id))
        uuid = getattr(record, "gpu_uuid", None) if isinstance(record, XidEvent) else record.uuid
        if uuid:
            keys.append(("uuid", uuid))
        index = getattr(record, "gpu_index", None) if isinstance(record, XidEvent) else record.index
        if isinstance(index, int) and not isinstance(index, bool):
            keys.append(("index", index))
        return keys

    def _find(self, key):
        root = key
        while self._parent.get(root, root) != root:
            root = self._parent[root]
        while key != root:  # path compression
            key, self._parent[key] = self._parent[key], root
        return root

    def add(self, record: DeviceRecord) -> None:
        keys = self.keys(record)
        for key in keys:
            self._parent.setdefault(key, key)
        for key in keys[1:]:
            first, other = self._find(keys[0]), self._find(key)
            if first != other:
                self._parent[other] = first
        self._identities = None

    def device(self, record: DeviceRecord):
        """A hashable id of the record's device; None for a record that names none."""
        keys = self.keys(record)
        return self._find(keys[0]) if keys else None

    def identity(self, device) -> Tuple[Optional[int], Optional[str], Optional[str]]:
        """(index, uuid, pci_bus_id) known for a device from any of its records."""
        if device is None:
            return None, None, None
        if self._identities is None:
            found: Dict[object, List[Optional[object]]] = {}
            for key in sorted(self._parent, key=repr):  # sorted: the same answer whatever the input order
                kind, value = key
                slot = {"index": 0, "uuid": 1, "pci": 2, "switch": 2}[kind]
                known = found.setdefault(self._find(key), [None, None, None])
                if known[slot] is None:
                    known[slot] = value
            self._identities = {root: tuple(values) for root, values in found.items()}
        index, uuid, pci = self._identities.get(device, (None, None, None))
        return index, uuid, pci


# ---------------------------------------------------------- classification

@dataclass(frozen=True)
class _Judgement:
    """How one event is classified; events with equal judgements form one fault."""

    name: str
    severity: str
    action: str
    description: str
    detail: str
    investigatory_action: Optional[str]
    unknown: bool
    decode: Optional[str] = None
    decode_candidates: Tuple[str, ...] = ()


def _sort_time(event: XidEvent) -> float:
    if event.timestamp is not None:
        return event.timestamp
    return event.uptime_s if event.uptime_s is not None else float("-inf")


def _judge_catalog(event: XidEvent, xids_here: Sequence[int], recovery: Optional[RecoveryAction],
                   driver_version: Optional[str] = None) -> _Judgement:
    xid = event.xid
    entry = XID_CATALOG.get(xid)
    if event.kind == "sxid":
        fatal = sxid_printed_fatal(event.message)
        known = SXID_RULES.get(xid)
        # The guide's table may make a printed "Non-fatal" stricter, never a printed "Fatal" lighter.
        if known is not None and (not fatal or known[1] == "fatal"):
            name, severity, action, why = known
            return _Judgement(
                name="NVSWITCH_SXID_%d" % xid, severity=severity, action=action,
                description="NVSwitch SXid %d (%s)" % (xid, name), detail=why,
                investigatory_action="CONTACT_SUPPORT", unknown=False,
            )
        detail = ("fatal NVSwitch error: the baseboard's GPUs and NVSwitches need a reset -> RESTART_BM" if fatal
                  else "NVSwitch error outside the XID catalog: CONTACT_SUPPORT")
        if known is not None:
            detail = "printed Fatal, which the guide's %s row cannot lower; %s" % (known[0], detail)
        return _Judgement(
            name="NVSWITCH_SXID_%d" % xid, severity="fatal" if fatal else "non-fatal",
            action="RESTART_BM" if fatal else "CONTACT_SUPPORT",
            description="NVSwitch SXid %d (%s)" % (xid, "fatal" if fatal else "non-fatal or unstated severity"),
            detail=detail, investigatory_action="CONTACT_SUPPORT", unknown=known is None,
        )
    if entry is None:
        return _Judgement(
            name="UNKNOWN_XID_%d" % xid, severity="non-fatal", action="CONTACT_SUPPORT",
            description="XID %d is not in the catalog" % xid,
            detail="unknown XID: CONTACT_SUPPORT, fatal once repeated", investigatory_action="CONTACT_SUPPORT",
            unknown=True,
        )
    base = dict(name=entry.name, description=entry.description, investigatory_action=entry.investigatory_bucket or None,
                unknown=False)
    if xid == XID_PREEMPTIVE_CLEANUP:
        others = sorted(x for x in xids_here if x != XID_PREEMPTIVE_CLEANUP)
        if others:
            return _Judgement(severity="non-fatal", action="IGNORE",
                              detail="with XID %s on the same GPU: a consequence of that fault, IGNORE"
                                     " (catalog WORKFLOW_XID_45)" % ", ".join(map(str, others)), **base)
        return _Judgement(severity="non-fatal", action=entry.action,
                          detail="alone on its GPU: %s (catalog WORKFLOW_XID_45); never escalated" % entry.action,
                          **base)
    if xid == XID_DBE:
        partners = sorted(x for x in xids_here if x in (XID_ROW_REMAP_EVENT, XID_ROW_REMAP_FAILURE))
        if partners:
            return _Judgement(severity="fatal", action="DRAIN_AND_RESET",
                              detail="with XID %s on the same GPU: DRAIN_AND_RESET (catalog WORKFLOW_XID_48)"
                                     % ", ".join(map(str, partners)), **base)
        return _Judgement(severity="fatal", action="RESET_GPU",
                          detail="alone on its GPU: RESET_GPU (catalog WORKFLOW_XID_48)", **base)
    if xid == XID_RECOVERY_ACTION:
        result = recovery if recovery is not None else recovery_action_from_text(event.message)
        return _Judgement(severity=result.severity, action=result.action, detail=result.detail, **base)
    if xid in NVLINK5_XIDS:
        decoded = decode_nvlink5(xid, event.message, driver_version)
        if decoded is None:
            return _Judgement(severity="non-fatal", action="DECODE",
                              detail="IntrInfo/ErrorStatus not decodable with the NVLink5 table: DECODE the raw text",
                              **base)
        base["investigatory_action"] = decoded.investigatory_action or base["investigatory_action"]
        base["decode"] = decoded.version
        base["decode_candidates"] = decoded.candidates
        if decoded.ambiguous:
            return _Judgement(severity="non-fatal", action="DECODE", detail=decoded.detail, **base)
        if decoded.action == "XID_154_EVAL":
            if recovery is not None:
                return _Judgement(severity=recovery.severity, action=recovery.action,
                                  detail="%s; XID 154 on the same GPU decides: %s" % (decoded.detail, recovery.detail),
                                  **base)
            return _Judgement(severity="non-fatal", action="RESTART_APP",
                              detail="%s; no XID 154 on the same GPU: RESTART_APP" % decoded.detail, **base)
        return _Judgement(severity=decoded.severity, action=decoded.action, detail=decoded.detail, **base)
    if xid == XID_NVLINK:
        return _Judgement(severity="non-fatal", action="DECODE",
                          detail="decode the NVLink registers in the raw text (catalog WORKFLOW_NVLINK_ERR)", **base)
    if entry.action == "CONTACT_SUPPORT":
        # A catalog XID that asks for a human fences the node until one has looked;
        # only an XID outside the catalog waits for repeats (see the unknown branch).
        return _Judgement(severity="fatal", action="CONTACT_SUPPORT",
                          detail="catalog bucket %s: fence the node and hold it for a human"
                                 % (entry.immediate_bucket or "(none), the catalog's default CONTACT_SUPPORT"),
                          **base)
    return _Judgement(severity=consistent_severity(entry.action, entry.severity), action=entry.action,
                      detail="catalog bucket %s" % (entry.immediate_bucket or "(none)"), **base)


def _current_recovery(device_events: Sequence[XidEvent]) -> Optional[RecoveryAction]:
    """The recovery action of a GPU's latest XID 154 that says one.

    The latest wins because the driver moves the action on (to 0x0 once the GPU
    has recovered). A 154 without readable text (NVML's event API has none)
    cannot override one that has it; with no readable 154 at all, the latest
    unreadable one gives CONTACT_SUPPORT.
    """
    recoveries = [event for event in device_events if event.xid == XID_RECOVERY_ACTION and event.kind != "sxid"]
    if not recoveries:
        return None
    ordered = sorted(enumerate(recoveries), key=lambda item: (_sort_time(item[1]), item[0]))
    results = [recovery_action_from_text(event.message) for _position, event in ordered]
    readable = [result for result in results if result.code is not None]
    return readable[-1] if readable else results[-1]


def occurrences(events: Sequence[XidEvent], burst_s: float) -> int:
    """Distinct occurrences: events of one clock closer than ``burst_s`` to a burst's first count once.

    Events without any time stamp cannot be told apart, so each counts.
    """
    count = 0
    for clock in ("timestamp", "uptime_s"):
        times = sorted(
            getattr(event, clock) for event in events
            if getattr(event, clock) is not None and (clock == "timestamp" or event.timestamp is None)
        )
        start = None
        for moment in times:
            if start is None or moment - start > burst_s:
                count += 1
                start = moment
    count += sum(1 for event in events if event.timestamp is None and event.uptime_s is None)
    return count


def _escalate(judgement: _Judgement, xid: int, kind: str, count: int, seen_elsewhere: bool,
              thresholds: Thresholds, location: Optional[str] = None) -> Tuple[_Judgement, bool]:
    if judgement.action == "IGNORE" or xid in NEVER_ESCALATED_XIDS or kind == "sxid":
        return judgement, False
    if judgement.action in ("RESET_GPU", "DRAIN_AND_RESET") and count >= thresholds.reset_escalation_count:
        return replace(judgement, action="RESTART_BM", severity="fatal",
                       detail="%s; seen %d times in the window, so the reset did not hold -> RESTART_BM"
                              % (judgement.detail, count)), True
    if judgement.action == "RESTART_APP":
        # Repeats are grouped the way the driver reports them (classify): XID 13 by GPU and
        # (GPC, TPC) from its text, XID 31 (and the other application XIDs) by GPU. The
        # catalog's WORKFLOW_XID_13 calls a repeat on the same GPC and TPC a possible hardware
        # fault whatever other GPUs do; WORKFLOW_XID_31 calls MMU faults repeating on one GPU
        # hardware and on different GPUs the application. ``app_repeat_escalation_count``
        # (default 3): one fault is the application's, a second can be the same job
        # restarted onto the same GPU, a third distinct occurrence (``burst_s`` folds the
        # lines of one incident) is the "pattern established over multiple runs" the
        # catalog asks for before running diagnostics.
        if count < thresholds.app_repeat_escalation_count:
            return judgement, False
        if xid == XID_GR_EXCEPTION and location is not None:
            return replace(judgement, action="CONTACT_SUPPORT",
                           detail="%s; seen %d times on this GPU at %s: possible hardware fault, run"
                                  " diagnostics (catalog WORKFLOW_XID_13) -> CONTACT_SUPPORT"
                                  % (judgement.detail, count, location)), True
        if not seen_elsewhere:
            return replace(judgement, action="CONTACT_SUPPORT",
                           detail="%s; seen %d times on this GPU and on no other: possible hardware fault, run"
                                  " diagnostics (catalog WORKFLOW_XID_13/31) -> CONTACT_SUPPORT"
                                  % (judgement.detail, count)), True
        return judgement, False
    if judgement.severity == "non-fatal" and count >= thresholds.repeat_escalation_count:
        return replace(judgement, severity="fatal",
                       detail="%s; seen %d times in the window -> fatal" % (judgement.detail, count)), True
    return judgement, False


def fault_sort_key(fault: Fault):
    return (
        not (fault.effective and fault.severity == "fatal"),
        not fault.effective,
        -ACTION_RANK.get(fault.action, 0),
        fault.gpu_index if fault.gpu_index is not None else 1 << 30,
        fault.pci_bus_id or "",
        fault.xid if fault.xid is not None else -1,
        fault.name,
    )


def classify(events: Sequence[XidEvent], thresholds: Thresholds = DEFAULT_THRESHOLDS,
             gpus: Sequence[Union[GpuSnapshot, GpuInfo]] = (), driver_version: Optional[str] = None) -> List[Fault]:
    """Classify XID events with the catalog and its context rules: one fault per GPU, XID and outcome.

    ``events`` are taken as one window (the verdict engine windows them);
    ``gpus`` (snapshots or inventory) only link identities, so a kernel-log
    event known by PCI id gets its GPU's index and UUID. ``driver_version`` picks
    the NVLink5 decode column (XID 144-150); None leaves it to the message.
    """
    identities = DeviceIdentities(list(gpus) + list(events))
    by_device: Dict[object, List[XidEvent]] = {}
    for event in events:
        by_device.setdefault(identities.device(event), []).append(event)

    devices_by_xid: Dict[int, set] = {}
    for device, device_events in by_device.items():
        for event in device_events:
            devices_by_xid.setdefault(event.xid, set()).add(device)

    groups: Dict[Tuple[object, int, _Judgement, Optional[str]], List[XidEvent]] = {}
    for device, device_events in by_device.items():
        xids_here = sorted({event.xid for event in device_events if event.kind != "sxid"})
        recovery = _current_recovery(device_events)
        judged = [(event, _judge_catalog(event, xids_here, recovery, driver_version)) for event in device_events]
        # NVML's event API reports an NVLink5 XID without its registers. When the kernel
        # log has a decodable line of the same XID, the bare report is the same incident
        # and adds nothing: fold it into the decoded fault instead of a separate DECODE.
        decoded = {}
        for event, judgement in judged:
            if event.xid in NVLINK5_XIDS and judgement.decode is not None:
                decoded.setdefault(event.xid, judgement)
        for event, judgement in judged:
            if (event.xid in decoded and judgement.action == "DECODE" and judgement.decode is None
                    and _REGISTERS_RE.search(event.message or "") is None):
                judgement = decoded[event.xid]
            located = event.xid == XID_GR_EXCEPTION and event.kind == "xid"
            location = xid13_location(event.message) if located else None
            groups.setdefault((device, event.xid, judgement, location), []).append(event)

    faults = []
    for (device, xid, judgement, location), group in groups.items():
        count = occurrences(group, thresholds.burst_s)
        kind = group[-1].kind
        seen_elsewhere = len(devices_by_xid.get(xid, ())) > 1
        judgement, escalated = _escalate(judgement, xid, kind, count, seen_elsewhere, thresholds, location)
        index, uuid, pci = identities.identity(device)
        latest = max(enumerate(group), key=lambda item: (_sort_time(item[1]), item[0]))[1]
        stamps = [event.timestamp for event in group if event.timestamp is not None]
        faults.append(Fault(
            name=judgement.name, severity=consistent_severity(judgement.action, judgement.severity),
            action=judgement.action, decode=judgement.decode, decode_candidates=judgement.decode_candidates,
            location=location,
            source="+".join(sorted({event.source for event in group})),
            message=latest.message, xid=xid, gpu_index=index, gpu_uuid=uuid, pci_bus_id=pci,
            investigatory_action=judgement.investigatory_action, unknown=judgement.unknown, count=count,
            description=judgement.description, detail=judgement.detail, escalated=escalated,
            first_seen=min(stamps) if stamps else None, last_seen=max(stamps) if stamps else None,
            kind="sxid" if kind == "sxid" else ("fallen_off_bus" if all(e.kind == "fallen_off_bus" for e in group)
                                                else "xid"),
        ))
    return sorted(faults, key=fault_sort_key)


# ---------------------------------------------------------------- snapshots

def faults_from_snapshot(snapshot: GpuSnapshot, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> List[Fault]:
    """Faults read from one GPU's NVML counters.

    * lost (NVML_ERROR_GPU_IS_LOST) - fatal RESTART_BM, like XID 79; nothing else is read.
    * volatile double-bit ECC > 0 - fatal RESET_GPU (the volatile counter clears on reset).
    * remapped rows failed - fatal CONTACT_SUPPORT: NVIDIA's row-remapping guidance makes a
      failed remap a GPU to replace (RMA), which no reset or reboot fixes.
    * remapped rows or retired pages pending - degraded RESET_GPU: the remap applies at the next reset.
    * thermal/HW-slowdown throttling (``throttle_fault_mask``) or temperature above
      ``temperature_max_c`` - degraded CONTACT_SUPPORT: the fix is cooling or power, which no
      restart of the application or GPU provides.
    * NVLink: an inactive link - degraded RESET_GPU (links retrain on reset, as the catalog's
      XID 136 says); error counters above their maxima - degraded CONTACT_SUPPORT (cabling,
      signal integrity).
    * volatile single-bit ECC above ``ecc_sbe_volatile_max`` - degraded CONTACT_SUPPORT.
    """
    identity = dict(gpu_index=snapshot.index, gpu_uuid=snapshot.uuid, pci_bus_id=snapshot.pci_bus_id,
                    source="nvml", kind="nvml_counter")
    if snapshot.lost:
        return [Fault(name="GPU_FALLEN_OFF_BUS", severity="fatal", action="RESTART_BM",
                      message="NVML reports the GPU is lost (NVML_ERROR_GPU_IS_LOST)",
                      description="GPU has fallen off the bus", investigatory_action="CONTACT_SUPPORT",
                      detail="GPU lost, like XID 79: reboot or replace the node -> RESTART_BM", **identity)]
    faults = []

    def add(name: str, severity: str, action: str, message: str, description: str, detail: str,
            count: int = 1) -> None:
        faults.append(Fault(name=name, severity=severity, action=action, message=message, description=description,
                            detail=detail, count=count, **identity))

    if snapshot.ecc_dbe_volatile is not None and snapshot.ecc_dbe_volatile > 0:
        add("ECC_DBE_VOLATILE", "fatal", "RESET_GPU",
            "%d volatile double-bit ECC errors" % snapshot.ecc_dbe_volatile,
            "uncorrectable ECC errors since the last reset", "uncorrectable memory errors -> RESET_GPU")
    if snapshot.remapped_rows_failed:
        add("REMAPPED_ROWS_FAILED", "fatal", "CONTACT_SUPPORT",
            "row remapping failed (%s uncorrectable rows remapped)" % snapshot.remapped_rows_uncorrectable,
            "row remapping failure",
            "a failed row remap cannot be repaired in the field: replace the GPU (RMA) -> CONTACT_SUPPORT")
    if snapshot.remapped_rows_pending:
        add("REMAPPED_ROWS_PENDING", "non-fatal", "RESET_GPU", "row remapping pending",
            "row remap waits for a GPU reset", "the remap applies at the next reset -> RESET_GPU")
    if snapshot.retired_pages_pending:
        add("RETIRED_PAGES_PENDING", "non-fatal", "RESET_GPU", "page retirement pending",
            "page retirement waits for a GPU reset", "the retirement applies at the next reset -> RESET_GPU")
    throttled = (snapshot.throttle_reasons or 0) & thresholds.throttle_fault_mask
    if throttled:
        names = ", ".join(throttle_reason_names(throttled))
        add("THERMAL_THROTTLE", "non-fatal", "CONTACT_SUPPORT", "clocks throttled: %s" % names,
            "GPU clocks slowed by temperature or hardware brake",
            "cooling or power problem; no restart fixes it -> CONTACT_SUPPORT")
    if snapshot.temperature_c is not None and snapshot.temperature_c > thresholds.temperature_max_c:
        add("GPU_TEMPERATURE_HIGH", "non-fatal", "CONTACT_SUPPORT",
            "GPU at %s C, above %s C" % (snapshot.temperature_c, thresholds.temperature_max_c),
            "GPU temperature above its maximum operating temperature",
            "cooling problem; no restart fixes it -> CONTACT_SUPPORT")
    if snapshot.ecc_sbe_volatile is not None and snapshot.ecc_sbe_volatile > thresholds.ecc_sbe_volatile_max:
        add("ECC_SBE_VOLATILE_HIGH", "non-fatal", "CONTACT_SUPPORT",
            "%d volatile single-bit ECC errors, above %d"
            % (snapshot.ecc_sbe_volatile, thresholds.ecc_sbe_volatile_max),
            "high rate of corrected memory errors", "watch for row remaps; ask support -> CONTACT_SUPPORT")
    inactive = [link.link for link in snapshot.nvlinks if link.active is False]
    if inactive and thresholds.nvlink_inactive_is_fault:
        add("NVLINK_INACTIVE", "non-fatal", "RESET_GPU",
            "NVLink %s inactive" % ", ".join(map(str, inactive)), "NVLink down",
            "links retrain on a GPU reset -> RESET_GPU", count=len(inactive))
    limits = (
        ("crc_flit_errors", thresholds.nvlink_crc_flit_max),
        ("crc_data_errors", thresholds.nvlink_crc_data_max),
        ("replay_errors", thresholds.nvlink_replay_max),
        ("recovery_errors", thresholds.nvlink_recovery_max),
    )
    over = []
    for link in snapshot.nvlinks:
        for counter, limit in limits:
            value = getattr(link, counter)
            if value is not None and value > limit:
                over.append("link %d %s=%d>%d" % (link.link, counter, value, limit))
    if over:
        add("NVLINK_ERRORS", "non-fatal", "CONTACT_SUPPORT", "; ".join(over), "NVLink error counters above limits",
            "check cabling and signal integrity -> CONTACT_SUPPORT", count=len(over))
    return faults
