# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Parse the NVIDIA driver's kernel-log messages into XidEvent. Pure: lines in, events out.

Recognised messages (the driver's own format strings):

* ``NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.``
  (also ``PCI:0000:3b:00.0``, and ``PCI:3b:00`` without the domain), with
  ``pid='<unknown>', name=<unknown>``, with MIG ``(PCI:0000:3b:00 GPU-I:01 GPU-CI:00)``, and the
  old style without ``PCI:``: ``NVRM: Xid (0000:03:00): 14, Channel 00000001``;
  NVLink5 (144-150) and recovery-action (154) messages are this shape too;
* NVSwitch: ``nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 ...``
  (kind ``sxid``; its "Fatal"/"Non-fatal" word stays first in ``message``; the ``Severity ...``
  and ``Data {...}`` detail lines that follow with the same switch and code are not events:
  they are appended to that event's ``raw``);
* "fallen off the bus" without an Xid: the three-line ``NVRM: The NVIDIA GPU 0000:3b:00.0`` /
  ``NVRM: (PCI ID: 10de:2330) installed in this system has`` / ``NVRM: fallen off the bus and
  is not responding to commands.``, and the one-line ``NVRM: GPU 0000:3b:00.0: GPU has fallen
  off the bus.`` (also without the PCI domain: ``NVRM: GPU 18:00.0: ...``, read as
  ``0000:18:00.0``) (kind ``fallen_off_bus``, XID 79);
* ``NVRM: GPU at PCI:0000:3b:00: GPU-<uuid>`` (any PCI form): not an event, but every event of
  that PCI id, before or after it, gets the UUID.

Every PCI id is normalized (``normalize_pci_bus_id``: ``dddd:bb:dd.f``, lower case, domain 0000
when the line has none), so the events of one GPU meet whichever line or NVML reported them.

Line prefixes, in any combination: dmesg ``[ 1234.567890] ``, ``dmesg -x`` ``kern  :err   : ``,
``dmesg -T`` ``[Sun Nov 29 03:12:01 2026] ``, ``<3>`` priorities, ``/dev/kmsg`` records
``3,1234,5678901,-;``, syslog ``Nov 29 03:12:01 host kernel: ``, ISO 8601
``2026-11-29T03:12:01.123456+00:00 host kernel: `` and ``journalctl -o short-monotonic``
``[ 1234.567890] host kernel: ``.

Time: an ISO stamp with a UTC offset gives ``timestamp`` (epoch seconds). Seconds since boot
go to ``uptime_s``, and to ``timestamp`` as well when the caller passes ``boot_time`` (epoch
seconds of boot, ``btime`` in /proc/stat). Local times without a year or an offset (syslog,
``dmesg -T``) are not guessed: they leave ``timestamp`` None.

The parser never raises: bytes are decoded with errors="replace", None and non-text items are
skipped, and over-long lines are cut to ``MAX_LINE`` characters before matching.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import (
    XidEvent,
    normalize_pci_bus_id,
)

SOURCE = "kernel_log"
XID_FALLEN_OFF_BUS = 79
# Long enough for any driver message (NVLink5 lines are ~150 characters); bounds the work.
MAX_LINE = 4096
# The three "fallen off the bus" lines come together; further apart they are not one message.
FALLEN_HEADER_MAX_LINES = 16

# A PCI id as the driver prints it: ``0000:18:00``, ``0000:18:00.0``, ``00000000:18:00.0`` and,
# in some messages and drivers, without the domain (``18:00.0``, ``18:00``). The domain is
# optional everywhere so that a fault maps to the same GPU whichever line reported it:
# normalize_pci_bus_id makes every form ``dddd:bb:dd.f`` (lower case, domain 0000 when absent),
# the form NVML's ids are normalized to as well.
_PCI = r"(?:[0-9A-Fa-f]{1,8}:)?[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}(?:\.[0-7])?"

# Prefixes, each anchored at the start of what is left of the line.
_KMSG = re.compile(r"(\d{1,3}),\d{1,20},(\d{1,20}),[^;]{0,16};")
_PRIORITY = re.compile(r"<(\d{1,3})>")
_DMESG_X = re.compile(r"[a-z]{2,8}\s{0,8}:[a-z]{2,8}\s{0,8}:\s?")
_MONOTONIC = re.compile(r"\[\s{0,12}(\d{1,12})\.(\d{1,9})\]\s?")
_DMESG_T = re.compile(r"\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4}\]\s?")
_ISO = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?"
    r"(Z|[+-]\d{2}:?\d{2})?\s+"
)
_SYSLOG = re.compile(r"[A-Z][a-z]{2} [ \d]?\d \d{2}:\d{2}:\d{2}\s+")
_HOST_KERNEL = re.compile(r"(?:[^\s:\[]{1,255}\s+)?kernel(?:\[\d{1,10}\])?:\s?")

_XID = re.compile(
    r"NVRM:\s{0,4}Xid\s{0,4}\((?:PCI:)?(" + _PCI + r")([^)]{0,128})\):\s{0,4}(\d{1,9})(?:,\s?|\s|$)(.*)"
)
_SXID = re.compile(r"SXid\s{0,4}\((?:PCI:)?(" + _PCI + r")\):\s{0,4}(\d{1,9})(?:,\s?|\s|$)(.*)")
_MIG_GI = re.compile(r"GPU-I:\s?([0-9A-Fa-f]{1,8})")
_MIG_CI = re.compile(r"GPU-CI:\s?([0-9A-Fa-f]{1,8})")
_PID_NAME = re.compile(r"pid=('?<unknown>'?|\d{1,12}),\s{0,4}name=([^,]{0,256}),\s?")
_UUID_MAP = re.compile(r"NVRM:\s{0,4}GPU at PCI:(" + _PCI + r"):\s{0,4}(GPU-[0-9A-Fa-f-]{8,64})")
_FALLEN_HEADER = re.compile(r"NVRM:\s{0,4}The NVIDIA GPU (" + _PCI + r")")
_FALLEN_TAIL = re.compile(r"NVRM:.{0,64}fallen off the bus and is not responding")
_FALLEN_ONE_LINE = re.compile(
    r"NVRM:\s{0,4}GPU (?:PCI:)?(" + _PCI + r"):\s{0,4}GPU has fallen off the bus"
)

_SXID_CONTINUATION = ("Severity ", "Data {")


def _int(text: str) -> Optional[int]:
    # MIG ids print as small decimal numbers; hex digits only appear in junk.
    try:
        return int(text, 10)
    except ValueError:
        try:
            return int(text, 16)
        except ValueError:
            return None


def _iso_epoch(match) -> Optional[float]:
    """Epoch seconds of an ISO 8601 prefix; None without a UTC offset or for an impossible date."""
    year, month, day, hour, minute, second, fraction, offset = match.groups()
    if offset is None:
        return None
    try:
        if offset == "Z":
            zone = timezone.utc
        else:
            sign = -1 if offset[0] == "-" else 1
            digits = offset[1:].replace(":", "")
            zone = timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))
        moment = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), tzinfo=zone)
        epoch = moment.timestamp()
    except (ValueError, OverflowError):  # month 13, offset +99:99, year 1 shifted below datetime.min
        return None
    return epoch + (float("0." + fraction) if fraction else 0.0)


def split_prefix(line: str) -> Tuple[str, Optional[float], Optional[float]]:
    """Strip log prefixes; return (message, epoch timestamp or None, seconds since boot or None)."""
    timestamp = uptime = None
    position = 0
    for _attempt in range(8):  # prefixes nest a few deep at most; bounded whatever the input
        rest = line[position:]
        match = _KMSG.match(rest)
        if match:
            uptime = int(match.group(2)) / 1e6
        else:
            match = _MONOTONIC.match(rest)
            if match:
                uptime = float(match.group(1) + "." + match.group(2))
            else:
                match = _ISO.match(rest)
                if match:
                    timestamp = _iso_epoch(match)
                else:
                    match = (_PRIORITY.match(rest) or _DMESG_X.match(rest) or _DMESG_T.match(rest)
                             or _SYSLOG.match(rest) or _HOST_KERNEL.match(rest))
        if not match or match.end() == 0:
            break
        position += match.end()
    return line[position:], timestamp, uptime


def _text(line: Any) -> Optional[str]:
    if isinstance(line, str):
        text = line
    elif isinstance(line, (bytes, bytearray)):
        text = bytes(line).decode("utf-8", errors="replace")
    else:
        return None
    if len(text) > MAX_LINE:
        text = text[:MAX_LINE]
    return text.rstrip("\r\n")


def _process(message: str) -> Tuple[Optional[int], Optional[str]]:
    match = _PID_NAME.match(message)
    if match is None:
        return None, None
    pid_text, name = match.group(1), match.group(2).strip()
    pid = int(pid_text) if pid_text.isdigit() else None
    return pid, (None if name in ("", "<unknown>", "'<unknown>'") else name)


class KernelLogParser:
    """Stateful parser for one log: joins multi-line messages and maps PCI ids to UUIDs.

    ``feed`` lines in order, then ``finish`` for the events (with UUIDs applied); a follower of a
    live log calls ``take`` after each read instead, and the parser keeps its PCI-to-UUID map and
    any half-read multi-line message between reads.
    """

    def __init__(self, boot_time: Optional[float] = None) -> None:
        self.boot_time = boot_time
        self.events: List[XidEvent] = []
        self.uuid_by_pci: Dict[str, str] = {}
        self._fallen_header: Optional[Tuple[Optional[str], Optional[float], Optional[float], str, int]] = None
        # Index in ``events`` of the last SXid headline of each (switch PCI id, code), for its
        # detail lines: two switches' messages can interleave.
        self._sxid_headlines: Dict[Tuple[Optional[str], int], int] = {}
        self._line_number = 0

    def _stamp(self, timestamp: Optional[float], uptime: Optional[float]) -> Optional[float]:
        if timestamp is None and uptime is not None and self.boot_time is not None:
            return self.boot_time + uptime
        return timestamp

    def feed(self, line: Any) -> None:
        text = _text(line)
        if text is None:
            return
        self._line_number += 1
        # Fast path: almost every kernel line is somebody else's.
        if "NVRM" not in text and "SXid" not in text:
            return
        for piece in text.split("\n") if "\n" in text else (text,):
            self._feed_one(piece)

    def _feed_one(self, text: str) -> None:
        body, timestamp, uptime = split_prefix(text)
        nvrm = body.find("NVRM:")
        if nvrm < 0:
            sxid = body.find("SXid")
            if sxid >= 0:
                self._sxid(body[sxid:], text, timestamp, uptime)
            return
        body = body[nvrm:]
        match = _XID.match(body)
        if match:
            self._xid(match, text, timestamp, uptime)
            return
        match = _UUID_MAP.match(body)
        if match:
            pci = normalize_pci_bus_id(match.group(1))
            if pci is not None:
                self.uuid_by_pci[pci] = match.group(2)
            return
        match = _FALLEN_HEADER.match(body)
        if match:
            self._fallen_header = (normalize_pci_bus_id(match.group(1)), timestamp, uptime, text, self._line_number)
            if _FALLEN_TAIL.search(body):  # some drivers print it all on one line
                self._fallen(text, timestamp, uptime)
            return
        if _FALLEN_TAIL.match(body):
            self._fallen(text, timestamp, uptime)
            return
        match = _FALLEN_ONE_LINE.match(body)
        if match:
            self._fallen_header = (normalize_pci_bus_id(match.group(1)), timestamp, uptime, text, self._line_number)
            self._fallen(text, timestamp, uptime)

    def _xid(self, match, text: str, timestamp: Optional[float], uptime: Optional[float]) -> None:
        pci = normalize_pci_bus_id(match.group(1))
        instance = match.group(2)
        gpu_instance = compute_instance = None
        if instance:
            found = _MIG_GI.search(instance)
            gpu_instance = _int(found.group(1)) if found else None
            found = _MIG_CI.search(instance)
            compute_instance = _int(found.group(1)) if found else None
        message = match.group(4).strip()
        pid, process_name = _process(message)
        self.events.append(XidEvent(
            xid=int(match.group(3)), source=SOURCE, kind="xid", pci_bus_id=pci, message=message,
            timestamp=self._stamp(timestamp, uptime), uptime_s=uptime, pid=pid, process_name=process_name,
            gpu_instance=gpu_instance, compute_instance=compute_instance, raw=text,
        ))

    def _sxid(self, body: str, text: str, timestamp: Optional[float], uptime: Optional[float]) -> None:
        match = _SXID.match(body)
        if match is None:
            return
        switch, code = normalize_pci_bus_id(match.group(1)), int(match.group(2))
        message = match.group(3).strip()
        if message.startswith(_SXID_CONTINUATION):
            self._sxid_detail(switch, code, text)
            return
        # The "Fatal"/"Non-fatal" word stays first in ``message``: xid_rules reads the severity from it.
        self.events.append(XidEvent(
            xid=code, source=SOURCE, kind="sxid", pci_bus_id=switch,
            message=message, timestamp=self._stamp(timestamp, uptime), uptime_s=uptime, raw=text,
        ))
        self._sxid_headlines[(switch, code)] = len(self.events) - 1

    def _sxid_detail(self, switch: Optional[str], code: int, text: str) -> None:
        """Attach a ``Severity ...`` / ``Data {...}`` line to the SXid it follows; never a new event.

        The NVSwitch driver prints one SXid as a headline and then detail lines that repeat its
        switch and code. They belong to the last headline of the same switch and code (another
        switch's lines may come in between); counting them
        would turn one error into three (and a repeat count into a false escalation). A detail
        line whose SXid was already handed out by ``take`` (or never seen) is dropped: the
        event was reported, and the detail alone says nothing about severity.
        """
        index = self._sxid_headlines.get((switch, code))
        if index is None or index >= len(self.events):
            return
        event = self.events[index]
        if event.kind == "sxid" and event.xid == code and event.pci_bus_id == switch:
            self.events[index] = replace(event, raw=event.raw + "\n" + text)

    def _fallen(self, text: str, timestamp: Optional[float], uptime: Optional[float]) -> None:
        header = self._fallen_header
        self._fallen_header = None
        pci = None
        lines = [text]
        if header is not None and self._line_number - header[4] <= FALLEN_HEADER_MAX_LINES:
            pci, head_timestamp, head_uptime, head_text, _number = header
            timestamp = head_timestamp if head_timestamp is not None else timestamp
            uptime = head_uptime if head_uptime is not None else uptime
            if head_text != text:
                lines = [head_text, text]
        # Without its header line the GPU is unknown, but a dead GPU on the node is still news.
        self.events.append(XidEvent(
            xid=XID_FALLEN_OFF_BUS, source=SOURCE, kind="fallen_off_bus", pci_bus_id=pci,
            message="GPU has fallen off the bus and is not responding to commands",
            timestamp=self._stamp(timestamp, uptime), uptime_s=uptime, raw="\n".join(lines),
        ))

    def take(self) -> List[XidEvent]:
        """The events completed since the last ``take`` (for a follower that reads a live log)."""
        events = self.finish()
        self.events = []
        self._sxid_headlines = {}  # their events are handed out; later detail lines are dropped
        return events

    def finish(self) -> List[XidEvent]:
        if not self.uuid_by_pci:
            return list(self.events)
        return [
            replace(event, gpu_uuid=self.uuid_by_pci[event.pci_bus_id])
            if event.gpu_uuid is None and event.kind != "sxid" and event.pci_bus_id in self.uuid_by_pci else event
            for event in self.events
        ]


def parse_line(line: Any, boot_time: Optional[float] = None) -> Optional[XidEvent]:
    """The event of one line on its own, or None (multi-line and UUID lines need parse_kernel_log)."""
    parser = KernelLogParser(boot_time)
    parser.feed(line)
    events = parser.finish()
    return events[0] if events else None


def parse_kernel_log(lines: Any, boot_time: Optional[float] = None) -> List[XidEvent]:
    """XidEvents of a kernel log, in log order.

    ``lines``: an iterable of str/bytes lines, or one str/bytes blob (split on newlines).
    ``boot_time``: epoch seconds of boot, to turn seconds-since-boot into timestamps.
    """
    if lines is None:
        return []
    if isinstance(lines, (str, bytes, bytearray)):  # one blob: split first, then cut each line
        blob = lines if isinstance(lines, str) else bytes(lines).decode("utf-8", errors="replace")
        lines = blob.splitlines()
    parser = KernelLogParser(boot_time)
    try:
        iterator = iter(lines)
    except TypeError:
        return []
    for line in iterator:
        parser.feed(line)
    return parser.finish()
