# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The NVML reader: the only code in the collection that imports pynvml.

It turns NVML's answers into the domain objects of ``health.model``:
``GpuInfo`` (inventory), ``GpuSnapshot`` (health counters) and ``XidEvent``
(from the event API). NVML's error codes become domain results here:

* ``NVML_ERROR_GPU_IS_LOST`` means the GPU has fallen off the bus: the
  snapshot says ``lost=True`` and the verdict engine treats it as fatal.
* ``NVML_ERROR_NOT_SUPPORTED`` (and a function the driver lacks) means the
  field is absent on this GPU: it stays ``None``, it is not an error.
* A missing ``libnvidia-ml.so.1`` or ``pynvml`` raises ``NvmlUnavailable``
  with a message that says what to install.
"""

from __future__ import annotations

import ctypes
import time
from typing import Callable, Dict, List, Optional, Tuple, TypeVar

from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import (
    GpuInfo,
    GpuSnapshot,
    HealthError,
    NvLinkStatus,
    XidEvent,
    normalize_pci_bus_id,
)

try:
    import pynvml
except ImportError:  # pragma: no cover - exercised through NvmlUnavailable
    pynvml = None

T = TypeVar("T")

# NVML return codes (nvml.h); kept here so the mapping below reads without pynvml.
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15

XID_CRITICAL_ERROR_EVENT = 0x8
NVML_TEMPERATURE_GPU = 0
NVLINK_MAX_LINKS = 18  # NVLink4/5 GPUs expose 18 links; NVML answers INVALID_ARGUMENT past the last.
# nvmlDeviceGetNvLinkErrorCounter counters, in nvml.h order.
NVLINK_COUNTERS = ("replay_errors", "recovery_errors", "crc_flit_errors", "crc_data_errors")


class NvmlUnavailable(HealthError):
    """NVML cannot be used on this host (no driver library, no pynvml)."""


class NvmlError(HealthError):
    """NVML answered with an unexpected error."""


class GpuLost(Exception):
    """Internal: a call answered NVML_ERROR_GPU_IS_LOST."""


def error_code(exc: BaseException) -> Optional[int]:
    return getattr(exc, "value", None)


def field_or_absent(call: Callable[[], T]) -> Optional[T]:
    """Run one NVML getter; map NOT_SUPPORTED to None and GPU_IS_LOST to GpuLost.

    The mapping is the heart of the reader: a field that a GPU does not have
    is simply absent, while a lost GPU must never read as "no data".
    """
    try:
        return call()
    except Exception as exc:  # pynvml raises NVMLError subclasses built at run time
        code = error_code(exc)
        if code == NVML_ERROR_GPU_IS_LOST:
            raise GpuLost() from exc
        if code in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND):
            return None
        if code is None:
            raise
        raise NvmlError("NVML error %s in %s: %s" % (code, getattr(call, "__name__", "call"), exc)) from exc


def _text(value) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def _handle_key(handle) -> int:
    return ctypes.cast(handle, ctypes.c_void_p).value or 0


class NvmlReader:
    """A session with NVML. Use as a context manager; one per process.

    ``library_path`` preloads a specific ``libnvidia-ml.so.1`` (the lab's fake
    one, or a driver outside the loader path) before pynvml's first call:
    pynvml opens the soname ``libnvidia-ml.so.1``, which the dynamic loader
    then resolves to the already-loaded library.
    """

    def __init__(self, library_path: Optional[str] = None) -> None:
        self.library_path = library_path
        self._handles: List[object] = []
        self._index_by_handle: Dict[int, int] = {}
        # Per GPU index: (uuid, pci_bus_id), read once (a handle is one physical GPU for the whole
        # NVML session), and the slow fields of its last full read (see ``snapshot``).
        self._identity: Dict[int, Tuple[Optional[str], Optional[str]]] = {}
        self._slow: Dict[int, Tuple[Optional[int], Optional[int], tuple]] = {}
        self._event_set = None
        self._open = False

    def __enter__(self) -> "NvmlReader":
        self.open()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def open(self) -> None:
        if pynvml is None:
            raise NvmlUnavailable("the Python package nvidia-ml-py (module pynvml) is not installed on this host")
        if self.library_path:
            try:
                ctypes.CDLL(self.library_path, mode=ctypes.RTLD_GLOBAL)
            except OSError as exc:
                raise NvmlUnavailable("cannot load NVML library %s: %s" % (self.library_path, exc)) from exc
        try:
            pynvml.nvmlInit()
        except Exception as exc:
            code = error_code(exc)
            if code == NVML_ERROR_LIBRARY_NOT_FOUND:
                raise NvmlUnavailable(
                    "libnvidia-ml.so.1 not found: install the NVIDIA driver, or point library_path / "
                    "LD_LIBRARY_PATH at it") from exc
            if code == NVML_ERROR_DRIVER_NOT_LOADED:
                raise NvmlUnavailable("NVML is present but the NVIDIA kernel driver is not loaded") from exc
            raise NvmlError("nvmlInit failed: %s" % exc) from exc
        self._open = True
        count = pynvml.nvmlDeviceGetCount()
        self._handles = []
        for index in range(count):
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            except Exception as exc:
                if error_code(exc) != NVML_ERROR_GPU_IS_LOST:
                    raise NvmlError("cannot get a handle for GPU %d: %s" % (index, exc)) from exc
                handle = None
            self._handles.append(handle)
            if handle is not None:
                self._index_by_handle[_handle_key(handle)] = index

    def close(self) -> None:
        if not self._open:
            return
        if self._event_set is not None:
            field_or_absent(lambda: pynvml.nvmlEventSetFree(self._event_set))
            self._event_set = None
        pynvml.nvmlShutdown()
        self._open = False

    @property
    def gpu_count(self) -> int:
        return len(self._handles)

    def driver_version(self) -> Optional[str]:
        value = field_or_absent(pynvml.nvmlSystemGetDriverVersion)
        return None if value is None else _text(value)

    def inventory(self) -> List[GpuInfo]:
        driver = self.driver_version()
        gpus = []
        for index, handle in enumerate(self._handles):
            try:
                gpus.append(self._info(index, handle, driver))
            except GpuLost:
                gpus.append(GpuInfo(index=index, uuid=None, name=None, pci_bus_id=None, serial=None,
                                    driver_version=driver))
        return gpus

    def _info(self, index: int, handle, driver: Optional[str]) -> GpuInfo:
        if handle is None:
            raise GpuLost()
        uuid, pci_bus_id = self._read_identity(handle)
        name = field_or_absent(lambda: pynvml.nvmlDeviceGetName(handle))
        serial = field_or_absent(lambda: pynvml.nvmlDeviceGetSerial(handle))
        return GpuInfo(
            index=index, uuid=uuid, name=None if name is None else _text(name), pci_bus_id=pci_bus_id,
            serial=None if serial is None else _text(serial), driver_version=driver,
        )

    def snapshot(self, full: bool = True) -> List[GpuSnapshot]:
        """Every GPU's health counters.

        ``full=False`` reads only what the verdict needs every second and carries the slow fields
        (aggregate ECC counts and the NVLinks: 5 calls per link, 18 links a GPU, most of a full
        read's NVML calls) over from that GPU's last full read; a GPU without one is read in full.
        """
        return [self._snapshot(index, handle, full) for index, handle in enumerate(self._handles)]

    def _snapshot(self, index: int, handle, full: bool = True) -> GpuSnapshot:
        uuid, pci_bus_id = self._identity.get(index, (None, None))
        try:
            if handle is None:
                raise GpuLost()
            if index not in self._identity:
                uuid, pci_bus_id = self._read_identity(handle)
                self._identity[index] = (uuid, pci_bus_id)
            slow = None if full else self._slow.get(index)
            if slow is None:
                slow = (self._ecc(handle, corrected=True, volatile=False),
                        self._ecc(handle, corrected=False, volatile=False), self._nvlinks(handle))
                self._slow[index] = slow
            power_mw = field_or_absent(lambda: pynvml.nvmlDeviceGetPowerUsage(handle))
            remapped = field_or_absent(lambda: pynvml.nvmlDeviceGetRemappedRows(handle))
            retired = field_or_absent(lambda: pynvml.nvmlDeviceGetRetiredPagesPendingStatus(handle))
            return GpuSnapshot(
                index=index, uuid=uuid, pci_bus_id=pci_bus_id,
                temperature_c=field_or_absent(lambda: pynvml.nvmlDeviceGetTemperature(handle, NVML_TEMPERATURE_GPU)),
                power_w=None if power_mw is None else power_mw / 1000.0,
                ecc_sbe_volatile=self._ecc(handle, corrected=True, volatile=True),
                ecc_dbe_volatile=self._ecc(handle, corrected=False, volatile=True),
                ecc_sbe_aggregate=slow[0],
                ecc_dbe_aggregate=slow[1],
                retired_pages_pending=None if retired is None else bool(retired),
                remapped_rows_correctable=None if remapped is None else remapped[0],
                remapped_rows_uncorrectable=None if remapped is None else remapped[1],
                remapped_rows_pending=None if remapped is None else bool(remapped[2]),
                remapped_rows_failed=None if remapped is None else bool(remapped[3]),
                throttle_reasons=self._throttle_reasons(handle),
                nvlinks=slow[2],
            )
        except GpuLost:
            # A lost GPU keeps the identity read before it was lost (the fault names the GPU); its
            # slow fields are read afresh if it comes back.
            self._slow.pop(index, None)
            return GpuSnapshot(index=index, uuid=uuid, pci_bus_id=pci_bus_id, lost=True)

    @staticmethod
    def _read_identity(handle) -> Tuple[Optional[str], Optional[str]]:
        raw_uuid = field_or_absent(lambda: pynvml.nvmlDeviceGetUUID(handle))
        pci = field_or_absent(lambda: pynvml.nvmlDeviceGetPciInfo(handle))
        return (None if raw_uuid is None else _text(raw_uuid),
                None if pci is None else normalize_pci_bus_id(_text(pci.busId)))

    @staticmethod
    def _ecc(handle, corrected: bool, volatile: bool) -> Optional[int]:
        error_type = 0 if corrected else 1  # NVML_MEMORY_ERROR_TYPE_CORRECTED / _UNCORRECTED
        counter = 0 if volatile else 1  # NVML_VOLATILE_ECC / NVML_AGGREGATE_ECC
        return field_or_absent(lambda: pynvml.nvmlDeviceGetTotalEccErrors(handle, error_type, counter))

    @staticmethod
    def _throttle_reasons(handle) -> Optional[int]:
        # Newer drivers renamed throttle reasons to "clock event reasons".
        reasons = field_or_absent(lambda: pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle))
        if reasons is None:
            reasons = field_or_absent(lambda: pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))
        return reasons

    @staticmethod
    def _nvlinks(handle) -> tuple:
        links = []
        for link in range(NVLINK_MAX_LINKS):
            try:
                state = pynvml.nvmlDeviceGetNvLinkState(handle, link)
            except Exception as exc:
                code = error_code(exc)
                if code == NVML_ERROR_GPU_IS_LOST:
                    raise GpuLost() from exc
                if code in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_FUNCTION_NOT_FOUND):
                    break  # no NVLink on this GPU, or past its last link
                raise NvmlError("NVML error %s reading NVLink %d state: %s" % (code, link, exc)) from exc
            values = {
                name: field_or_absent(
                    lambda link=link, counter=counter: pynvml.nvmlDeviceGetNvLinkErrorCounter(handle, link, counter))
                for counter, name in enumerate(NVLINK_COUNTERS)
            }
            links.append(NvLinkStatus(link=link, active=bool(state), **values))
        return tuple(links)

    def _ensure_event_set(self) -> None:
        if self._event_set is not None:
            return
        self._event_set = pynvml.nvmlEventSetCreate()
        registered = 0
        for handle in self._handles:
            if handle is None:
                continue
            try:
                field_or_absent(lambda handle=handle: pynvml.nvmlDeviceRegisterEvents(
                    handle, XID_CRITICAL_ERROR_EVENT, self._event_set))
                registered += 1
            except GpuLost:
                continue
        if self._handles and not registered:
            raise NvmlUnavailable("no GPU accepts XID event registration")

    def watch_xids(self) -> None:
        """Start listening now: NVML only delivers events raised after registration."""
        self._ensure_event_set()

    def wait_for_xid(self, timeout: float) -> List[XidEvent]:
        """Block up to ``timeout`` seconds for XID events; return those that came.

        Returns as soon as one event arrives, together with any others already
        queued, so a burst (48 then 63) is seen as one window.
        """
        self._ensure_event_set()
        events: List[XidEvent] = []
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            remaining_ms = 0 if events else int(max(0.0, deadline - time.monotonic()) * 1000)
            try:
                data = pynvml.nvmlEventSetWait_v2(self._event_set, remaining_ms)
            except Exception as exc:
                code = error_code(exc)
                if code == NVML_ERROR_TIMEOUT:
                    return events
                if code == NVML_ERROR_GPU_IS_LOST:
                    # The driver reports a lost GPU through the wait itself.
                    events.append(XidEvent(xid=79, source="nvml", kind="fallen_off_bus",
                                           message="NVML_ERROR_GPU_IS_LOST while waiting for events",
                                           timestamp=time.time()))
                    return events
                raise NvmlError("nvmlEventSetWait_v2 failed: %s" % exc) from exc
            if data.eventType & XID_CRITICAL_ERROR_EVENT:
                events.append(self._xid_event(data))
            if not events and time.monotonic() >= deadline:
                return events

    def _xid_event(self, data) -> XidEvent:
        index = self._index_by_handle.get(_handle_key(data.device))
        gpu = None
        if index is not None:
            try:
                gpu = self._info(index, self._handles[index], None)
            except GpuLost:
                gpu = None
        mig = {}
        # 0xFFFFFFFF means "not a MIG instance".
        if data.gpuInstanceId != 0xFFFFFFFF:
            mig = dict(gpu_instance=int(data.gpuInstanceId), compute_instance=int(data.computeInstanceId))
        return XidEvent(
            xid=int(data.eventData), source="nvml", kind="xid",
            gpu_index=index,
            gpu_uuid=None if gpu is None else gpu.uuid,
            pci_bus_id=None if gpu is None else gpu.pci_bus_id,
            message="XID %d reported by the NVML event API" % int(data.eventData),
            timestamp=time.time(),
            **mig,
        )
