# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""State of the lab's simulated GPUs, as read by the fake libnvidia-ml.so.1 (tools/fake-nvml).

One directory per simulated node (the library finds it through GPUFLEET_FAKE_NVML_DIR):

    node.state      key=value lines: count, node, driver_version, nvml_version, cuda_driver_version
    gpu<N>.state    key=value lines, the fields of GpuState
    events/         one empty file per pending XID event:
                    <time_ns, 20 digits>-<8 hex>-gpu<N>-xid<X>.event
                    A waiter in nvmlEventSetWait_v2 claims it with rename() and deletes it, so each
                    event is delivered once, to one waiter, across processes.

Every state file is written to a temporary name and renamed into place, so the C side never reads
a torn file. Writers serialise read-modify-write cycles with flock() on <dir>/.lock.
Standard library only: the chaos backend and the CLI use it without pynvml.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import time
import uuid
from contextlib import contextmanager
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from typing import Any, Dict, Iterator, List, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError as _FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.files import flocked, replace_text
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_ib

MAX_GPUS = 32  # FAKE_NVML_MAX_GPUS in fake_nvml.c
# Every lab node's HCAs, one port each: two rails, as a small HGX node has (a real one has up to eight).
LAB_HCAS = ("mlx5_0", "mlx5_1")
MAX_NVLINKS = 36  # NVML_NVLINK_MAX_LINKS
_U32 = 2**32 - 1
_U64 = 2**64 - 1
_GIB = 1024**3

# PCI device ids (upper 16 bits of nvmlPciInfo_t.pciDeviceId; NVIDIA's vendor id is the lower half).
_PCI_DEVICE_IDS = {"A100": 0x20B2, "H100": 0x2330, "H200": 0x2335}
_EVENT_NAME = re.compile(r"(?P<stamp>\d{20})-[0-9a-f]{8}-gpu(?P<gpu>\d+)-xid(?P<xid>\d+)\.event")


class FakeGpuStateError(GpufleetError):
    """The state directory or a request about it is not valid."""


class FieldError(FakeGpuStateError, _FieldError):
    """A field name or value that the state format does not accept."""

    def __init__(self, name: str, message: str) -> None:
        _FieldError.__init__(self, name, message)
        # Keep the state format's own wording: "field 'temperature_c': ...".
        self.args = (f"field {name!r}: {message}",)


@dataclass(frozen=True)
class NodeState:
    count: int = field(metadata={"max": MAX_GPUS})
    node: str
    driver_version: str = "580.95.05"
    nvml_version: str = "13.580.95.05"
    cuda_driver_version: int = field(default=13000, metadata={"max": _U32})


@dataclass(frozen=True)
class GpuState:
    """One simulated GPU; the field names are the keys of gpu<N>.state that fake_nvml.c reads."""

    # Identity: written by init(), kept by clear(), never settable.
    uuid: str
    serial: str
    pci_bus_id: str
    product: str  # Kubernetes label form: NVIDIA-H100-80GB-HBM3
    name: str  # NVML form: NVIDIA H100 80GB HBM3
    # Capabilities: settable, kept by clear().
    pci_device_id: int = field(default=0x233010DE, metadata={"max": _U32})
    memory_total: int = field(default=80 * _GIB, metadata={"max": _U64})
    nvlink_supported: bool = True
    nvlink_links: int = field(default=18, metadata={"max": MAX_NVLINKS})
    retired_pages_supported: bool = True
    # Health: settable, reset to these defaults by clear().
    temperature: int = field(default=35, metadata={"max": _U32})  # degrees C
    power_mw: int = field(default=70000, metadata={"max": _U32})
    memory_used: int = field(default=0, metadata={"max": _U64})
    utilization_gpu: int = field(default=0, metadata={"max": 100})
    utilization_memory: int = field(default=0, metadata={"max": 100})
    ecc_sbe_volatile: int = field(default=0, metadata={"max": _U64})
    ecc_dbe_volatile: int = field(default=0, metadata={"max": _U64})
    ecc_sbe_aggregate: int = field(default=0, metadata={"max": _U64})
    ecc_dbe_aggregate: int = field(default=0, metadata={"max": _U64})
    retired_pages_pending: bool = False
    remapped_rows_corrected: int = field(default=0, metadata={"max": _U32})
    remapped_rows_uncorrected: int = field(default=0, metadata={"max": _U32})
    remapped_rows_pending: bool = False
    remapped_rows_failure: bool = False
    throttle_reasons: int = field(default=0, metadata={"max": _U64})  # nvmlClocksEventReason* bitmask
    nvlink_down: int = field(default=0, metadata={"max": 2**MAX_NVLINKS - 1})  # bitmask of inactive links
    # NVLink error counters are reported on link 0; every other link reads 0.
    nvlink_replay_errors: int = field(default=0, metadata={"max": _U64})
    nvlink_recovery_errors: int = field(default=0, metadata={"max": _U64})
    nvlink_crc_flit_errors: int = field(default=0, metadata={"max": _U64})
    nvlink_crc_data_errors: int = field(default=0, metadata={"max": _U64})
    nvlink_ecc_data_errors: int = field(default=0, metadata={"max": _U64})
    lost: bool = False  # fallen off the bus: every per-device call returns NVML_ERROR_GPU_IS_LOST
    # Simulated sustained throughput in per mille of the product's nominal (1000 = nominal), the
    # figure the variability baseline reads (docs/scheduling.md). 0 means "not simulated yet":
    # init() then writes simulated_perf_permille(), so a rerun never changes a figure once written.
    # fake_nvml.c skips keys it does not know, so NVML never sees it.
    perf_permille: int = field(default=0, metadata={"max": 10000})


IDENTITY_FIELDS = ("uuid", "serial", "pci_bus_id", "product", "name")
CAPABILITY_FIELDS = ("pci_device_id", "memory_total", "nvlink_supported", "nvlink_links", "retired_pages_supported",
                     "perf_permille")
SETTABLE_FIELDS = tuple(f.name for f in fields(GpuState) if f.name not in IDENTITY_FIELDS)
HEALTH_FIELDS = tuple(name for name in SETTABLE_FIELDS if name not in CAPABILITY_FIELDS)
_HEALTHY = {f.name: f.default for f in fields(GpuState) if f.name in HEALTH_FIELDS}


# ---------------------------------------------------------------- encoding


def _encode(state: Any) -> str:
    lines = []
    for f in fields(state):
        value = getattr(state, f.name)
        if isinstance(value, bool):
            value = int(value)
        lines.append(f"{f.name}={value}\n")
    return "".join(lines)


def _decode(cls: Any, text: str, origin: str) -> Any:
    raw: Dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            raw[key.strip()] = value.strip()
    values: Dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in raw:
            if f.default is MISSING:
                raise FakeGpuStateError(f"{origin}: missing key {f.name!r}")
            continue
        try:
            values[f.name] = _convert(f, raw[f.name])
        except FieldError as exc:
            raise FakeGpuStateError(f"{origin}: {exc}") from None
    return cls(**values)


def _convert(f: Any, value: Any) -> Any:
    """Turn a CLI string or a Python value into the field's type, checking its range."""
    if f.type == "str":
        text = str(value)
        if not text or "\n" in text or "=" in text:
            raise FieldError(f.name, "must be a non-empty single line without '='")
        return text
    if f.type == "bool":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise FieldError(f.name, f"expected a boolean (0/1/true/false), got {value!r}")
    if isinstance(value, bool):
        raise FieldError(f.name, f"expected an integer, got {value!r}")
    if isinstance(value, int):
        number = value
    else:
        try:
            number = int(str(value).strip(), 0)  # base 0: accepts 0x40 for bitmasks
        except ValueError:
            raise FieldError(f.name, f"expected an integer (decimal or 0x hex), got {value!r}") from None
    if not 0 <= number <= f.metadata["max"]:
        raise FieldError(f.name, f"{number} is outside 0..{f.metadata['max']}")
    return number


# ---------------------------------------------------------------- files


def _node_path(state_dir: str) -> str:
    return os.path.join(state_dir, "node.state")


def _gpu_path(state_dir: str, gpu: int) -> str:
    return os.path.join(state_dir, f"gpu{gpu}.state")


def _events_dir(state_dir: str) -> str:
    return os.path.join(state_dir, "events")


def _write_atomic(path: str, text: str) -> bool:
    """Replace path with text unless it already holds exactly that; True when it wrote."""
    # No fsync: the lab's state does not need to survive a host crash, only a torn read.
    return replace_text(path, text, sync=False)


@contextmanager
def _locked(state_dir: str) -> Iterator[None]:
    with flocked(os.path.join(state_dir, ".lock")):
        yield


def _load_node(state_dir: str) -> NodeState:
    path = _node_path(state_dir)
    try:
        with open(path, encoding="ascii") as fh:
            return _decode(NodeState, fh.read(), path)
    except FileNotFoundError:
        raise FakeGpuStateError(f"{state_dir} is not a fake GPU state directory (no node.state); run init") from None


def _load_gpu(state_dir: str, gpu: int) -> GpuState:
    node = _load_node(state_dir)
    if isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu < node.count:
        raise FakeGpuStateError(f"gpu {gpu!r} does not exist on {node.node} (count {node.count})")
    path = _gpu_path(state_dir, gpu)
    with open(path, encoding="ascii") as fh:
        return _decode(GpuState, fh.read(), path)


def _store_gpu(state_dir: str, gpu: int, state: GpuState) -> bool:
    return _write_atomic(_gpu_path(state_dir, gpu), _encode(state))


def _pending_event_names(state_dir: str) -> List[str]:
    try:
        names = os.listdir(_events_dir(state_dir))
    except FileNotFoundError:
        return []
    return sorted(name for name in names if _EVENT_NAME.fullmatch(name))


# ---------------------------------------------------------------- identity


def _pci_bus_id(gpu: int) -> str:
    # Distinct bus per GPU (0x18, 0x1f, ... 0xf1 for 32 GPUs), in NVML's busId format.
    return f"00000000:{0x18 + 7 * gpu:02X}:00.0"


def _product_identity(product: str) -> Dict[str, Any]:
    """NVML name, PCI device id and memory size implied by a gpu.product label."""
    device_id = next((pid for model, pid in _PCI_DEVICE_IDS.items() if model in product), 0x2330)
    size = re.search(r"(\d+)GB", product)
    return {
        "product": product,
        "name": product.replace("-", " "),
        "pci_device_id": (device_id << 16) | 0x10DE,
        "memory_total": (int(size.group(1)) if size else 80) * _GIB,
    }


# ---------------------------------------------------------------- simulated performance

# How much slower than nominal a node's weakest GPU is, in per mille, by the node's hash: most
# nodes are uniform, some have one GPU a little or a lot slower (the spread PAL measured on real
# clusters: a few percent, with a tail beyond ten).
_SLOW_GPU_PERMILLE = (0, 0, 55, 120)
_PERF_SALT = "gpufleet-perf-v19"  # chosen so the lab pool shows all three classes


def _hash(text: str) -> bytes:
    return hashlib.sha256(f"{_PERF_SALT}/{text}".encode()).digest()


def simulated_perf_permille(node: str, gpu: int) -> int:
    """A deterministic per-GPU figure from the node name and index: reruns and tests reproduce it.

    Every GPU gets up to 1.9 % of jitter; a node's hash may also make one of its GPUs slower.
    """
    node_hash = _hash(node)
    slow = _SLOW_GPU_PERMILLE[node_hash[0] % len(_SLOW_GPU_PERMILLE)] if gpu == node_hash[1] % 8 else 0
    return 1000 - _hash(f"{node}/gpu{gpu}")[0] % 20 - slow


def _with_perf(state: GpuState, node: str, gpu: int) -> GpuState:
    # Only where absent (0): a figure a test or an operator set is kept.
    return state if state.perf_permille else replace(state, perf_permille=simulated_perf_permille(node, gpu))


def fill_simulated_perf(state_dir: str) -> bool:
    """Give every GPU that has no perf_permille its simulated one; True when a file changed."""
    with _locked(state_dir):
        node = _load_node(state_dir)
        changed = False
        for gpu in range(node.count):
            current = _load_gpu(state_dir, gpu)
            wanted = _with_perf(current, node.node, gpu)
            if wanted != current:
                changed |= _store_gpu(state_dir, gpu, wanted)
        return changed


# ---------------------------------------------------------------- API


def init(state_dir: str, count: int, node: str, product: str) -> bool:
    """Create or update a node's state directory; keeps the identity and health of existing GPUs.

    Returns True when a file changed. GPUs beyond count are removed.
    """
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_GPUS:
        raise FakeGpuStateError(f"count must be an integer in 1..{MAX_GPUS}, got {count!r}")
    identity = _product_identity(product)
    for name in ("node", "product"):
        value = node if name == "node" else product
        if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9._-]+", value):
            raise FieldError(name, f"must match [A-Za-z0-9._-]+, got {value!r}")
    os.makedirs(_events_dir(state_dir), exist_ok=True)
    with _locked(state_dir):
        changed = False
        try:
            previous: Optional[NodeState] = _load_node(state_dir)
        except FakeGpuStateError:
            previous = None
        node_state = replace(previous, count=count, node=node) if previous else NodeState(count=count, node=node)
        # GPU files first, node.state last: a reader never sees a count whose files are missing.
        for gpu in range(count):
            path = _gpu_path(state_dir, gpu)
            if os.path.exists(path):
                with open(path, encoding="ascii") as fh:
                    existing = _decode(GpuState, fh.read(), path)
                state = existing if existing.product == product else replace(existing, **identity)
                state = _with_perf(state, node, gpu)
            else:
                state = GpuState(
                    uuid=f"GPU-{uuid.uuid4()}",
                    serial=str(1650000000000 + secrets.randbelow(10**10)),
                    pci_bus_id=_pci_bus_id(gpu),
                    perf_permille=simulated_perf_permille(node, gpu),
                    **identity,
                )
            changed |= _store_gpu(state_dir, gpu, state)
        changed |= _write_atomic(_node_path(state_dir), _encode(node_state))
        for gpu in range(count, MAX_GPUS):
            if os.path.exists(_gpu_path(state_dir, gpu)):
                os.unlink(_gpu_path(state_dir, gpu))
                changed = True
    # The node's HCAs too (its own lock): the agent reads them as its sysfs (docs/agent.md, "Network health").
    return fake_ib.create_tree(ib_root(state_dir), LAB_HCAS) or changed


def set_fields(state_dir: str, gpu: int, **values: Any) -> bool:
    """Set settable fields of one GPU (see SETTABLE_FIELDS); True when the state changed."""
    by_name = {f.name: f for f in fields(GpuState)}
    converted: Dict[str, Any] = {}
    for name, value in values.items():
        if name not in SETTABLE_FIELDS:
            reason = "is identity, set by init" if name in IDENTITY_FIELDS else "is unknown"
            raise FieldError(name, f"{reason}; settable fields: {', '.join(SETTABLE_FIELDS)}")
        converted[name] = _convert(by_name[name], value)
    with _locked(state_dir):
        current = _load_gpu(state_dir, gpu)
        return _store_gpu(state_dir, gpu, replace(current, **converted))


def set_lost(state_dir: str, gpu: int, lost: bool = True) -> bool:
    """Make a GPU fall off the bus (or come back): NVML_ERROR_GPU_IS_LOST on every per-device call."""
    return set_fields(state_dir, gpu, lost=lost)


def inject_xid(state_dir: str, gpu: int, xid: int) -> str:
    """Queue one XID event for nvmlEventSetWait_v2; returns the event's file name."""
    if isinstance(xid, bool) or not isinstance(xid, int) or not 0 < xid <= _U32:
        raise FakeGpuStateError(f"xid must be a positive integer, got {xid!r}")
    _load_gpu(state_dir, gpu)  # validates the index
    name = f"{time.time_ns():020d}-{secrets.token_hex(4)}-gpu{gpu}-xid{xid}.event"
    # An empty file appears atomically; its name carries the whole event.
    with open(os.path.join(_events_dir(state_dir), name), "x", encoding="ascii"):
        pass
    return name


def ib_root(state_dir: str) -> str:
    """The node's fake sysfs (``<state_dir>/sys/class/infiniband/...``, lab/fake_ib.py)."""
    return os.path.join(state_dir, "sys")


def clear(state_dir: str) -> bool:
    """Every GPU back to healthy, no pending events, every IB port up; identity and capabilities are kept."""
    return _clear_gpus(state_dir) | fake_ib.clear(ib_root(state_dir))


def _clear_gpus(state_dir: str) -> bool:
    with _locked(state_dir):
        node = _load_node(state_dir)
        changed = False
        for gpu in range(node.count):
            changed |= _store_gpu(state_dir, gpu, replace(_load_gpu(state_dir, gpu), **_HEALTHY))
        events = _events_dir(state_dir)
        # Also removes ".claimed-*" files left by a waiter that died between rename and unlink.
        for name in os.listdir(events) if os.path.isdir(events) else []:
            try:
                os.unlink(os.path.join(events, name))
            except FileNotFoundError:
                continue  # a waiter claimed it meanwhile
            changed = True
        return changed


def read(state_dir: str) -> Dict[str, Any]:
    """The whole node: {"node": {...}, "gpus": [{"index": N, ...}], "pending_events": [...]}."""
    node = _load_node(state_dir)
    gpus = [dict(index=gpu, **asdict(_load_gpu(state_dir, gpu))) for gpu in range(node.count)]
    pending = []
    for name in _pending_event_names(state_dir):
        match = _EVENT_NAME.fullmatch(name)
        if match is None:  # _pending_event_names already filters; be safe on races
            continue
        pending.append({"gpu": int(match["gpu"]), "xid": int(match["xid"]), "file": name})
    return {"node": asdict(node), "gpus": gpus, "pending_events": pending}
