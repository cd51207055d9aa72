# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""One health check of a node: gather NVML and kernel-log evidence, then judge it.

This is the glue between the client (the NVML reader, a kernel-log file) and
the pure policy (parser, catalog rules, verdict engine). Modules and the agent
call it; it never calls fail_json.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import (
    check_file_path,
    check_number,
    optional_file_path,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.kernel_log import parse_kernel_log
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import (
    GpuInfo,
    GpuSnapshot,
    HealthError,
    HealthVerdict,
    Thresholds,
    XidEvent,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.nvml import NvmlReader
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.verdict import evaluate
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.xid_rules import nvlink5_table_version
from ansible_collections.gpufleet.resilience.plugins.module_utils.rfc3339 import epoch_seconds


@dataclass
class NodeHealth:
    verdict: HealthVerdict
    gpus: List[GpuInfo] = field(default_factory=list)
    snapshots: List[GpuSnapshot] = field(default_factory=list)
    events: List[XidEvent] = field(default_factory=list)
    driver_version: Optional[str] = None


def read_kernel_log(kernel_log: Union[str, Sequence[str], None]) -> List[str]:
    """Lines from a list, or from a file path (dmesg/journal export)."""
    if kernel_log is None:
        return []
    if isinstance(kernel_log, str):
        try:
            with open(kernel_log, "rb") as handle:
                return handle.read().decode("utf-8", errors="replace").splitlines()
        except OSError as exc:
            raise HealthError("kernel_log: cannot read %s: %s" % (kernel_log, exc)) from exc
    return [str(line) for line in kernel_log]


def host_boot_time() -> Optional[float]:
    """This host's boot time (``btime`` of /proc/stat), to date dmesg's seconds-since-boot."""
    try:
        with open("/proc/stat") as stat:
            for line in stat:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def keep_since(events: Iterable[XidEvent], since: Optional[float]) -> List[XidEvent]:
    """Drop events stamped before ``since``; keep those without a wall-clock stamp."""
    if since is None:
        return list(events)
    return [event for event in events if event.timestamp is None or event.timestamp >= since]


def gpu_facts(library_path: Optional[str] = None, snapshot: bool = True) -> Dict[str, Any]:
    """Inventory merged with the health snapshot of every GPU, as Ansible facts."""
    try:
        optional_file_path(library_path, "library_path")
    except FieldError as exc:
        raise HealthError(str(exc)) from exc
    with NvmlReader(library_path) as reader:
        gpus = reader.inventory()
        snapshots = reader.snapshot() if snapshot else []
        driver = reader.driver_version()
    return dict(
        gpufleet_driver_version=driver,
        gpufleet_gpu_count=len(gpus),
        gpufleet_gpus=[merge_gpu(gpu, snapshots) for gpu in gpus],
    )


def merge_gpu(gpu: GpuInfo, snapshots: Sequence[GpuSnapshot]) -> Dict[str, Any]:
    merged = asdict(gpu)
    for snap in snapshots:
        if snap.index == gpu.index:
            # The inventory wins on identity: a lost GPU's snapshot has none.
            merged.update({key: value for key, value in snap.to_dict().items()
                           if key not in merged or value is not None})
    return merged


def sense_node(
    kernel_log: Union[str, Sequence[str], None] = None,
    since: Optional[float] = None,
    wait_for_xid: float = 0,
    thresholds: Optional[Thresholds] = None,
    use_nvml: bool = True,
    library_path: Optional[str] = None,
    driver_version: Optional[str] = None,
) -> NodeHealth:
    """Sense and judge the node. ``driver_version`` is the driver that wrote the kernel log
    (for logs from elsewhere); by default the one NVML reports, when NVML is used."""
    thresholds = thresholds or Thresholds()
    # dmesg stamps count seconds since this host booted: the log is this host's.
    events = keep_since(parse_kernel_log(read_kernel_log(kernel_log), boot_time=host_boot_time()), since)
    gpus: List[GpuInfo] = []
    snapshots: List[GpuSnapshot] = []
    driver = None
    if use_nvml:
        with NvmlReader(library_path) as reader:
            gpus = reader.inventory()
            driver = reader.driver_version()
            if wait_for_xid > 0:
                events.extend(reader.wait_for_xid(wait_for_xid))
            snapshots = reader.snapshot()
        events = [with_identity(event, gpus) for event in events]
    if driver_version is None:
        driver_version = driver
    verdict = evaluate(events=events, snapshots=snapshots, thresholds=thresholds, driver_version=driver_version)
    return NodeHealth(verdict=verdict, gpus=gpus, snapshots=snapshots, events=events, driver_version=driver_version)


def with_identity(event: XidEvent, gpus: Sequence[GpuInfo]) -> XidEvent:
    """Fill a kernel-log event's GPU index/UUID from the NVML inventory by PCI bus id."""
    if event.gpu_index is not None or event.pci_bus_id is None:
        return event
    for gpu in gpus:
        if gpu.pci_bus_id == event.pci_bus_id:
            return replace(event, gpu_index=gpu.index, gpu_uuid=event.gpu_uuid or gpu.uuid)
    return event


def parse_since(value: Optional[str]) -> Optional[float]:
    """``since`` as epoch seconds: a number, or an ISO 8601 time (naive means UTC)."""
    if value is None or str(value).strip() == "":
        return None
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        pass
    found = epoch_seconds(text)
    if found is None:
        raise HealthError("since: %r is neither epoch seconds nor an ISO 8601 time" % (value,))
    return found


def build_thresholds(values: Optional[Dict[str, Any]]) -> Thresholds:
    """Thresholds from a user dict; bad keys or values name the field."""
    values = dict(values or {})
    known = set(Thresholds.__dataclass_fields__)
    unknown = sorted(set(values) - known)
    if unknown:
        raise HealthError("thresholds.%s: unknown threshold (known: %s)" % (unknown[0], ", ".join(sorted(known))))
    try:
        thresholds = Thresholds(**values)
        thresholds.validate()
    except (TypeError, ValueError) as exc:
        raise HealthError("thresholds: %s" % exc) from exc
    return thresholds


def judge_node(
    kernel_log: Any = None,
    since: Optional[str] = None,
    wait_for_xid: float = 0,
    use_nvml: bool = True,
    thresholds: Optional[Dict[str, Any]] = None,
    library_path: Optional[str] = None,
    driver_version: Optional[str] = None,
) -> Dict[str, Any]:
    """The gpu_health module's work: check the inputs, sense the node, return the verdict as a dict."""
    if kernel_log is not None and not isinstance(kernel_log, (str, list)):
        raise HealthError("kernel_log: must be a list of lines or a file path, got %s" % type(kernel_log).__name__)
    try:
        if isinstance(kernel_log, str):
            check_file_path(kernel_log, "kernel_log")
        optional_file_path(library_path, "library_path")
        wait_for_xid = check_number(wait_for_xid, "wait_for_xid", minimum=0)
    except FieldError as exc:
        raise HealthError(str(exc)) from exc
    if wait_for_xid > 0 and not use_nvml:
        raise HealthError("wait_for_xid: needs nvml=true (XID events come from NVML)")
    if driver_version is not None:
        driver_version = str(driver_version).strip() or None
    if driver_version is not None and nvlink5_table_version(driver_version) is None:
        raise HealthError("driver_version: %r is not a driver version such as 575.51.03" % (driver_version,))
    limits = build_thresholds(thresholds)
    health = sense_node(kernel_log=kernel_log, since=parse_since(since), wait_for_xid=wait_for_xid,
                        thresholds=limits, use_nvml=use_nvml, library_path=library_path,
                        driver_version=driver_version)
    result = health.verdict.to_dict()
    result.update(
        gpus=[snapshot.to_dict() for snapshot in health.snapshots],
        events=len(health.events),
        thresholds=asdict(limits),
        driver_version=health.driver_version,
    )
    return result
