# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""InfiniBand and RoCE port health: read the ports from sysfs, judge them over time.

A flapping or erroring IB port kills a multi-node NCCL job as surely as a GPU XID, and NVML sees
none of it (GPUd and NVSentinel watch these links for the same reason).

* ``read_ports``: one ``IbPort`` per ``<sysfs>/class/infiniband/<hca>/ports/<n>/``, read as Linux
  writes the files. No ``class/infiniband`` is a node without IB (no port), not an error; a bad file
  marks its own port (``error``) and the other ports still read.
* ``IbWatch``: one per agent. It keeps only what its windows need of each port's history and says
  which ports are down, flapping, erroring, missing or unreadable. A finding is sticky: it clears
  only once the port has been up and quiet for ``recover_after_s``, so a node does not bounce
  between healthy and unhealthy on a link that comes and goes.
* ``ib_verdict`` and ``port_metrics``: the node's IB verdict and the exporter's samples.

Reads files only: no threads, no network, no clock (the judge takes ``now``).
"""

from __future__ import annotations

import errno
import os
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, FrozenSet, List, Mapping, Optional, Sequence, Set, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import check_int, check_mapping, check_number
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import HealthError
from ansible_collections.gpufleet.resilience.plugins.module_utils.ib_sysfs import (
    ACTIVE,
    CODED,
    COUNTERS,
    LINK_UP,
    RATE,
)

# Per minute, over error_window_s. Discards are congestion more than a bad link: not judged by default.
DEFAULT_ERROR_RATES = {"symbol_error": 10.0, "link_error_recovery": 3.0, "port_rcv_errors": 100.0,
                       "local_link_integrity_errors": 3.0, "excessive_buffer_overrun_errors": 10.0}

KINDS = ("missing", "down", "flapping", "errors_rising", "unreadable")  # worst first
SEVERITY = {"missing": "fatal", "down": "fatal", "flapping": "fatal", "errors_rising": "degraded",
            "unreadable": "degraded"}
REASON_MAX_FINDINGS = 4  # the findings list has them all; a one-line reason does not need them

_IGNORE = re.compile(r"[A-Za-z0-9_]+(/[0-9]+)?")
_MAX_READ = 4096  # sysfs attributes are one page at most
_MAX_SAMPLES = 4096  # a guard only: equal samples collapse, so a window holds about two per change


def parse_coded(text: str) -> Tuple[int, str]:
    """``"4: ACTIVE"`` -> ``(4, "ACTIVE")``; ValueError for anything else."""
    match = CODED.fullmatch(text.strip())
    if not match:
        raise ValueError("expected '<code>: <name>', got %r" % text.strip()[:80])
    return int(match.group(1)), match.group(2).strip()


def parse_rate(text: str) -> float:
    """``"400 Gb/sec (4X NDR)"`` -> ``400.0``; ValueError for anything else."""
    match = RATE.fullmatch(text.strip())
    if not match:
        raise ValueError("expected '<number> Gb/sec (...)', got %r" % text.strip()[:80])
    return float(match.group(1))


# ---------------------------------------------------------------- reading


def port_name(hca: str, port: int) -> str:
    """``mlx5_0/1``: how the findings, the metrics' readers and ``ignore`` name a port."""
    return "%s/%d" % (hca, port)


@dataclass(frozen=True)
class IbPort:
    """One HCA port as sysfs showed it; fields not read (see ``error``) keep their defaults."""

    hca: str
    port: int
    state: str = "UNKNOWN"
    state_code: int = 0
    phys_state: str = "UNKNOWN"
    phys_state_code: int = 0
    rate_gbps: Optional[float] = None
    link_layer: str = "Unknown"  # the kernel's word when it does not know either
    counters: Mapping[str, int] = field(default_factory=dict)  # a counter not there is absent, not 0
    error: Optional[str] = None

    @property
    def name(self) -> str:
        return port_name(self.hca, self.port)

    @property
    def up(self) -> bool:
        """Usable by NCCL: logically ACTIVE and physically LinkUp."""
        return self.state_code == ACTIVE and self.phys_state_code == LINK_UP


def _read(path: str, problems: List[str], required: bool = True, tolerated: Tuple[int, ...] = ()) -> Optional[str]:
    # os.open and os.read, not open(): half the CPU per file, and the agent reads these every second.
    descriptor = None
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        return os.read(descriptor, _MAX_READ).decode("ascii", errors="replace").strip()
    except FileNotFoundError:
        if required:
            problems.append("%s: missing" % path)
    except OSError as exc:
        if exc.errno not in tolerated:
            problems.append("%s: cannot read: %s" % (path, exc.strerror or exc))
    finally:
        if descriptor is not None:
            os.close(descriptor)
    return None


def read_port(port_dir: str, hca: str, port: int, carry: Optional[IbPort] = None) -> IbPort:
    """One port directory; every problem goes to ``error`` (file and why), none is raised.

    With ``carry`` (this port's last reading), only the two state files are read: when both states
    are the carried ones and neither reading had a problem, ``carry`` itself is the answer (its rate,
    link layer and counters as they were). Otherwise the port is read in full."""
    problems: List[str] = []
    values: Dict[str, Any] = {}
    for name in ("state", "phys_state"):
        text = _read(os.path.join(port_dir, name), problems)
        if text is not None:
            try:
                values[name + "_code"], values[name] = parse_coded(text)
            except ValueError as exc:
                problems.append("%s: %s" % (os.path.join(port_dir, name), exc))
    if (carry is not None and not problems and carry.error is None
            and values["state_code"] == carry.state_code and values["phys_state_code"] == carry.phys_state_code):
        return carry
    # The kernel answers EINVAL for the rate of a port with no speed yet (a link still training).
    rate = _read(os.path.join(port_dir, "rate"), problems, required=False, tolerated=(errno.EINVAL,))
    if rate is not None:
        try:
            values["rate_gbps"] = parse_rate(rate)
        except ValueError as exc:
            problems.append("%s: %s" % (os.path.join(port_dir, "rate"), exc))
    link_layer = _read(os.path.join(port_dir, "link_layer"), problems, required=False)
    if link_layer:
        values["link_layer"] = link_layer
    counters: Dict[str, int] = {}
    for name in COUNTERS:
        path = os.path.join(port_dir, "counters", name)
        text = _read(path, problems, required=False)
        if text is None:
            continue
        if not text.isdigit():
            problems.append("%s: expected a non-negative integer, got %r" % (path, text[:80]))
            continue
        counters[name] = int(text)
    return IbPort(hca=hca, port=port, counters=counters, error="; ".join(problems) or None, **values)


def read_ports(sysfs_root: str, carry: Optional[Mapping[str, IbPort]] = None) -> List[IbPort]:
    """Every port of every HCA under ``<sysfs_root>/class/infiniband``, sorted by HCA then port.

    ``carry`` (the last reading, by port name) makes it a light reading: each port in it is read as
    ``read_port`` reads with a carried port, a port not in it in full. The HCAs and ports are listed
    either way, so a port that went away is missing at once."""
    base = os.path.join(sysfs_root, "class", "infiniband")
    try:
        hcas = sorted(os.listdir(base))
    except FileNotFoundError:
        return []  # no HCA, or no IB driver: a node without IB
    except OSError as exc:
        raise HealthError("%s: cannot list: %s" % (base, exc.strerror or exc)) from exc
    carried = carry or {}
    ports: List[IbPort] = []
    for hca in hcas:
        if hca.startswith("."):  # the lab's lock file and an HCA it is removing; the kernel names none so
            continue
        ports_dir = os.path.join(base, hca, "ports")
        try:
            names = [name for name in os.listdir(ports_dir) if name.isascii() and name.isdigit()]
        except OSError:
            continue  # an HCA without readable ports has nothing to judge; the watch calls them missing
        for name in sorted(names, key=int):
            last = carried.get(port_name(hca, int(name)))
            ports.append(read_port(os.path.join(ports_dir, name), hca, int(name), last))
    return ports


def port_metrics(ports: Sequence[IbPort]) -> List[Tuple[str, Dict[str, str], float]]:
    """(metric, labels, value) samples for the exporter: state codes are 0 when not read, the rate
    and each counter only when read."""
    samples: List[Tuple[str, Dict[str, str], float]] = []
    for port in ports:
        labels = {"hca": port.hca, "port": str(port.port), "link_layer": port.link_layer}
        values = [("up", 1.0 if port.up else 0.0), ("state", port.state_code), ("phys_state", port.phys_state_code)]
        if port.rate_gbps is not None:
            values.append(("rate_gbps", port.rate_gbps))
        values.extend(("%s_total" % name, port.counters[name]) for name in COUNTERS if name in port.counters)
        samples.extend(("gpufleet_ib_port_" + name, dict(labels), float(value)) for name, value in values)
    return samples


# ---------------------------------------------------------------- judging


@dataclass(frozen=True)
class IbThresholds:
    """How IbWatch judges ports; checked on creation, a bad value raises FieldError (``ib.<name>``).

    ``error_rate_per_min`` is merged over ``DEFAULT_ERROR_RATES``: a counter not named keeps its
    default, ``None`` turns its check off. ``ignore`` holds ``"hca/port"`` or ``"hca"`` strings.
    """

    down_after_s: float = 10.0
    flap_count: int = 3
    flap_window_s: float = 300.0
    error_rate_per_min: Mapping[str, Optional[float]] = field(default_factory=dict, hash=False)
    error_window_s: float = 300.0
    recover_after_s: float = 60.0
    ignore: FrozenSet[str] = frozenset()

    def __post_init__(self) -> None:
        def store(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        for name in ("down_after_s", "recover_after_s"):
            store(name, check_number(getattr(self, name), "ib." + name, minimum=0))
        for name in ("flap_window_s", "error_window_s"):
            store(name, check_number(getattr(self, name), "ib." + name, above=0))
        store("flap_count", check_int(self.flap_count, "ib.flap_count", minimum=1))
        limits: Dict[str, Optional[float]] = dict(DEFAULT_ERROR_RATES)
        for counter, limit in check_mapping(self.error_rate_per_min, "ib.error_rate_per_min").items():
            where = "ib.error_rate_per_min.%s" % (counter,)
            if counter not in COUNTERS:
                raise FieldError(where, "is not a port counter (one of %s)" % ", ".join(COUNTERS))
            limits[counter] = None if limit is None else check_number(limit, where, minimum=0)
        # A plain dict (the dataclass is frozen, nobody writes it): the agent's --check-config prints it.
        store("error_rate_per_min", {k: v for k, v in limits.items() if v is not None})
        if isinstance(self.ignore, (str, bytes)) or not hasattr(self.ignore, "__iter__"):
            raise FieldError("ib.ignore", "must be a list of 'hca/port' or 'hca', got %r" % (self.ignore,))
        for index, item in enumerate(sorted(self.ignore, key=str)):
            if not isinstance(item, str) or not _IGNORE.fullmatch(item):
                raise FieldError("ib.ignore[%d]" % index, "must be 'hca/port' or 'hca' (e.g. mlx5_2/1), got %r"
                                 % (item,))
        store("ignore", frozenset(self.ignore))

    @classmethod
    def from_mapping(cls, settings: Mapping[str, Any]) -> "IbThresholds":
        """From agent settings; an unknown key is a FieldError, not a TypeError."""
        known = set(cls.__dataclass_fields__)
        for key in check_mapping(settings, "ib"):
            if key not in known:
                raise FieldError("ib.%s" % (key,), "is not a setting (one of %s)" % ", ".join(sorted(known)))
        return cls(**settings)

    def ignores(self, hca: str, port: int) -> bool:
        return hca in self.ignore or "%s/%d" % (hca, port) in self.ignore


@dataclass(frozen=True)
class IbFinding:
    """Something wrong with one port; ``since`` is when the condition started."""

    hca: str
    port: int
    kind: str
    detail: str
    since: float
    severity: str = field(init=False)

    def __post_init__(self) -> None:
        if self.kind not in SEVERITY:
            raise FieldError("kind", "must be one of %s, got %r" % (", ".join(KINDS), self.kind))
        object.__setattr__(self, "severity", SEVERITY[self.kind])


def finding_sort_key(finding: IbFinding) -> Tuple[int, int, str, int]:
    return (finding.severity != "fatal", KINDS.index(finding.kind), finding.hca, finding.port)


def ib_verdict(findings: Sequence[IbFinding]) -> Tuple[str, str]:
    """(``healthy``|``degraded``|``fatal``, the findings' details worst first; empty when healthy)."""
    ordered = sorted(findings, key=finding_sort_key)
    if not ordered:
        return "healthy", ""
    parts = [finding.detail for finding in ordered[:REASON_MAX_FINDINGS]]
    if len(ordered) > REASON_MAX_FINDINGS:
        parts.append("and %d more" % (len(ordered) - REASON_MAX_FINDINGS))
    return ("fatal" if ordered[0].severity == "fatal" else "degraded"), "; ".join(parts)


def _num(value: float) -> str:
    return ("%.1f" % value).rstrip("0").rstrip(".")


def _window_rise(samples: Deque[Tuple[float, int]], now: float, window: float) -> int:
    """The rise since the oldest reading inside the window: a rise older than the window never counts."""
    start = now - window
    anchor = next((value for stamp, value in samples if stamp >= start), samples[-1][1])
    return samples[-1][1] - anchor


@dataclass
class _Track:
    """What IbWatch keeps of one port."""

    was_up: Optional[bool] = None
    not_up_since: Optional[float] = None
    missing_since: Optional[float] = None
    quiet_since: Optional[float] = None  # up, no new flap, no counter over its rate
    went_down: Deque[float] = field(default_factory=deque)  # up -> not up, within flap_window_s
    samples: Dict[str, Deque[Tuple[float, int]]] = field(default_factory=dict)
    active: Dict[str, Tuple[float, str]] = field(default_factory=dict)  # kind -> (since, last current detail)
    current: Set[str] = field(default_factory=set)  # the kinds this reading found, not only remembered


class IbWatch:
    """Judges an agent's IB ports over time; feed it ``read_ports`` with the time of the reading."""

    def __init__(self, thresholds: Optional[IbThresholds] = None) -> None:
        self._tracks: Dict[Tuple[str, int], _Track] = {}
        self.reconfigure(thresholds or IbThresholds())

    def reconfigure(self, thresholds: IbThresholds) -> None:
        """New thresholds (an agent's SIGHUP): the ports' history stays, a port now ignored is forgotten
        (it is not missing)."""
        self.thresholds = thresholds
        self._history_s = max(thresholds.flap_window_s, thresholds.error_window_s)
        self._tracks = {key: track for key, track in self._tracks.items() if not thresholds.ignores(*key)}

    def observe(self, ports: Sequence[IbPort], now: float) -> List[IbFinding]:
        """Take one reading of every port; the findings now, worst first."""
        now = check_number(now, "now")
        seen = set()
        for port in ports:
            if self.thresholds.ignores(port.hca, port.port):
                continue
            seen.add((port.hca, port.port))
            self._judge(self._tracks.setdefault((port.hca, port.port), _Track()), port, now)
        for (hca, number), track in self._tracks.items():
            if (hca, number) not in seen:
                self._missing(track, "%s/%d" % (hca, number), now)
        findings = [IbFinding(hca, number, kind, self._detail(track, kind, now), since)
                    for (hca, number), track in self._tracks.items()
                    for kind, (since, _detail) in track.active.items()]
        return sorted(findings, key=finding_sort_key)

    def _detail(self, track: _Track, kind: str, now: float) -> str:
        detail = track.active[kind][1]
        if kind in track.current:
            return detail
        quiet = "" if track.quiet_since is None else ", %s s so far" % _num(now - track.quiet_since)
        return "%s (earlier; clears after %s s up and quiet%s)" % (detail, _num(self.thresholds.recover_after_s),
                                                                   quiet)

    def _raise(self, track: _Track, kind: str, since: float, detail: str) -> None:
        track.current.add(kind)
        track.active[kind] = (track.active.get(kind, (since, ""))[0], detail)

    def _missing(self, track: _Track, name: str, now: float) -> None:
        track.current = set()
        if track.missing_since is None:
            track.missing_since = now
        track.quiet_since = track.was_up = track.not_up_since = None
        self._raise(track, "missing", track.missing_since, "%s missing from sysfs for %s s (HCA off the bus or "
                    "driver unloaded)" % (name, _num(now - track.missing_since)))

    def _sample(self, track: _Track, counter: str, value: int, now: float) -> int:
        """Record a reading; the rise since the last one (a counter gone back is a new baseline)."""
        samples = track.samples.setdefault(counter, deque(maxlen=_MAX_SAMPLES))
        if samples and value < samples[-1][1]:
            samples.clear()  # driver reload or counters reset: never a negative rise
        step = value - samples[-1][1] if samples else 0
        if len(samples) >= 2 and samples[-1][1] == samples[-2][1] == value:
            samples[-1] = (now, value)  # the middle of a plateau changes no window's rise
        else:
            samples.append((now, value))
        while samples[0][0] < now - self._history_s:
            samples.popleft()
        return step

    def _judge(self, track: _Track, port: IbPort, now: float) -> None:
        limits = self.thresholds
        track.current = set()
        if track.missing_since is not None:  # back after falling off: its counters started over
            track.missing_since = None
            track.samples.clear()
        if port.error:
            track.quiet_since = None
            self._raise(track, "unreadable", now, "%s unreadable: %s" % (port.name, port.error))
            return
        new_flap = track.was_up is True and not port.up
        if new_flap:
            track.went_down.append(now)
        while track.went_down and track.went_down[0] < now - limits.flap_window_s:
            track.went_down.popleft()
        track.was_up = port.up
        if port.up:
            track.not_up_since = None
        else:
            if track.not_up_since is None:
                track.not_up_since = now
            if now - track.not_up_since >= limits.down_after_s:
                self._raise(track, "down", track.not_up_since, "%s %s/%s for %s s" % (
                    port.name, port.state, port.phys_state, _num(now - track.not_up_since)))
        for counter in sorted(port.counters):
            if self._sample(track, counter, port.counters[counter], now) and counter == "link_downed":
                new_flap = True  # a flap between two readings shows in the counter only
        downed = _window_rise(track.samples["link_downed"], now, limits.flap_window_s) \
            if "link_downed" in port.counters else 0
        if max(downed, len(track.went_down)) >= limits.flap_count:
            what = ("link_downed +%d" % downed) if downed >= len(track.went_down) \
                else "went down %d times" % len(track.went_down)
            self._raise(track, "flapping", now, "%s %s in %s s" % (port.name, what, _num(limits.flap_window_s)))
        over = []
        for counter, limit in sorted(limits.error_rate_per_min.items()):
            if counter in port.counters:
                rate = _window_rise(track.samples[counter], now, limits.error_window_s) * 60.0 / limits.error_window_s
                if rate > limit:
                    over.append("%s %s/min over %s s (limit %s/min)" % (
                        counter, _num(rate), _num(limits.error_window_s), _num(limit)))
        if over:
            self._raise(track, "errors_rising", now, "%s %s" % (port.name, ", ".join(over)))
        if not port.up or new_flap or over:
            track.quiet_since = None
        elif track.quiet_since is None:
            track.quiet_since = now
        if track.active and track.quiet_since is not None and now - track.quiet_since >= limits.recover_after_s:
            # Recovered: the flaps that raised the finding are spent, or it would come straight back.
            track.active.clear()
            track.current = set()
            track.went_down.clear()
            if "link_downed" in port.counters:
                track.samples["link_downed"] = deque([(now, port.counters["link_downed"])], maxlen=_MAX_SAMPLES)
