# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Follow a kernel log and hand its XID events to the agent, as they are written.

Three followers, one per ``kernel_log.source``:

* ``kmsg``: ``/dev/kmsg``, from its end. One ``read`` returns one record; ``EPIPE`` means the
  ring buffer overwrote records we had not read yet - counted as an error, then reading goes on
  from the oldest record still there.
* ``journal``: ``journalctl -k -f -n 0 -o short-iso``, restarted if it exits.
* ``file``: a plain file (the lab keeps one per simulated node), from its end, like ``tail -F``:
  a rotated (renamed or deleted, then re-created) file is read from its start, a truncated one
  from its new end, and a missing one is waited for. Changes wake the follower through inotify
  on the file's directory; without inotify it polls every 0.1 s.

Each follower owns a ``KernelLogParser``, so multi-line messages (fallen off the bus) and the
driver's PCI-to-UUID lines carry over between reads.

Resuming after an agent restart (within one boot): ``file`` and ``kmsg`` hand each read's events
together with the position after it (``on_read(events, position)``: the file's device, inode and
byte offset after the last whole line; the sequence number of the last kmsg record), so whoever
records the position has every event before it, and take that position back as ``resume``. A
file that is the same (device and inode) and not shorter is read on from that offset, so lines
written while the agent was down are read once and lines read before are not read again; a file
that was replaced or truncated meanwhile is read from its start (all of it is newer). kmsg is
read from the oldest record still in the ring buffer, skipping the sequence numbers already read.
``journal`` cannot resume: it starts at the journal's end, as without a position. Without a
position (first start, a new boot, an unreadable fault journal) every follower starts at the end:
what was written before is the boot's past, not news.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import select
import subprocess
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.health.kernel_log import KernelLogParser
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import XidEvent
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.sense import host_boot_time

LOG = logging.getLogger("gpufleet.agent.kernel_log")
EventSink = Callable[[List[XidEvent]], None]
ErrorSink = Callable[[str], None]
ReadSink = Callable[[List[XidEvent], Dict[str, Any]], None]

# inotify(7) masks.
IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
_WATCH_MASK = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
POLL_S = 0.1
# Even with inotify, look at the file this often: a missed rename costs at most this. stop() wakes a
# waiting follower through its pipe, so this is no stop latency; at 1 s the follower's wake-ups were
# about a tenth of an idle agent's CPU.
RECHECK_S = 5.0
KMSG_RECORD_MAX = 8192


class Follower:
    """A thread that reads one log and calls ``sink`` with the XID events of each read."""

    name = "kernel-log"

    def __init__(self, sink: EventSink, on_error: ErrorSink, on_read: Optional[ReadSink] = None,
                 resume: Optional[Mapping[str, Any]] = None) -> None:
        self.sink = sink
        self.on_error = on_error
        self.on_read = on_read
        self.resume = dict(resume) if resume else None
        self.parser = KernelLogParser(boot_time=host_boot_time())
        self._stop = threading.Event()
        # stop() writes to it, which wakes a follower waiting for its log to change.
        self._wake_read, self._wake_write = os.pipe()
        self._thread = threading.Thread(target=self._guarded, name=self.name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            os.write(self._wake_write, b"x")
        self._close()
        self._thread.join(timeout)
        if not self._thread.is_alive():
            for fd in (self._wake_read, self._wake_write):
                with contextlib.suppress(OSError):
                    os.close(fd)

    def wait_readable(self, fds: List[int], timeout: float) -> List[int]:
        """Those of ``fds`` readable within ``timeout`` seconds; [] at once when stop() is called."""
        ready, _w, _x = select.select([*fds, self._wake_read], [], [], timeout)
        return [fd for fd in ready if fd != self._wake_read]

    def _close(self) -> None:
        """Release what the follower holds so a blocked read returns."""

    def feed(self, lines: List[str], position: Optional[Dict[str, Any]] = None) -> None:
        """Parse whole lines and hand on their events: to ``on_read`` with the position after
        them when there is one (events and position in one call), else to ``sink``."""
        for line in lines:
            self.parser.feed(line)
        events = self.parser.take()
        if position is not None and self.on_read is not None:
            self.on_read(events, position)
        elif events:
            self.sink(events)

    def _guarded(self) -> None:
        while not self._stop.is_set():
            try:
                self.run()
            except Exception as exc:  # one bad read must not end kernel-log watching
                self.on_error("%s follower: %s" % (self.name, exc))
                LOG.warning("%s follower failed, restarting in 1s: %s", self.name, exc)
                self._stop.wait(1.0)

    def run(self) -> None:
        raise NotImplementedError


class _Inotify:
    """A directory watch through libc's inotify; ``wait`` returns on a change or after ``timeout``."""

    def __init__(self, directory: str) -> None:
        self.fd = -1
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd < 0:
                return
            if libc.inotify_add_watch(fd, os.fsencode(directory), _WATCH_MASK) < 0:
                os.close(fd)
                return
            self.fd = fd
        except (OSError, AttributeError):
            self.fd = -1

    def wait(self, timeout: float, follower: "Follower") -> None:
        if self.fd < 0:
            time.sleep(min(timeout, POLL_S))
            return
        if follower.wait_readable([self.fd], timeout):
            try:
                while os.read(self.fd, 4096):
                    pass
            except BlockingIOError:
                pass

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class FileFollower(Follower):
    name = "kernel-log-file"

    def __init__(self, path: str, sink: EventSink, on_error: ErrorSink, from_start: bool = False,
                 on_read: Optional[ReadSink] = None, resume: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__(sink, on_error, on_read, resume)
        self.path = path
        self.from_start = from_start
        self.rotations = 0

    def _resume_offset(self, status: os.stat_result) -> Optional[int]:
        """Where to start in the file opened first, from the position of the agent's last run."""
        resume = self.resume
        if not resume or resume.get("kind") != "file" or resume.get("path") != self.path:
            return None
        offset = resume.get("offset")
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            return None
        if (resume.get("dev"), resume.get("inode")) != (status.st_dev, status.st_ino):
            return 0  # rotated or re-created while the agent was down: all of it is newer
        if status.st_size < offset:
            return 0  # truncated while the agent was down: what is there now came after
        return offset

    def _position(self, handle: Any, partial: bytes) -> Dict[str, Any]:
        status = os.fstat(handle.fileno())
        return {"kind": "file", "path": self.path, "dev": status.st_dev, "inode": status.st_ino,
                "offset": handle.tell() - len(partial)}

    def run(self) -> None:
        directory = os.path.dirname(os.path.abspath(self.path)) or "."
        watch = _Inotify(directory) if os.path.isdir(directory) else _Inotify("/nonexistent")
        handle = None
        inode = None
        partial = b""
        first_open = True
        try:
            while not self._stop.is_set():
                if handle is None:
                    try:
                        handle = open(self.path, "rb")  # noqa: SIM115 - held across loop turns, closed in finally
                    except FileNotFoundError:
                        first_open = False  # a file created after we started is all news
                        watch.wait(RECHECK_S, self)
                        if watch.fd < 0 and os.path.isdir(directory):
                            watch = _Inotify(directory)
                        continue
                    opened = os.fstat(handle.fileno())
                    inode = opened.st_ino
                    resume_at = self._resume_offset(opened) if first_open else None
                    if resume_at is not None:
                        handle.seek(resume_at)
                    elif first_open and not self.from_start:
                        handle.seek(0, os.SEEK_END)
                    first_open = False
                    partial = b""
                chunk = handle.read()
                if chunk:
                    data = partial + chunk
                    lines = data.split(b"\n")
                    partial = lines.pop()
                    self.feed([line.decode("utf-8", errors="replace") for line in lines],
                              self._position(handle, partial))
                    continue
                # Nothing new: has the file been rotated, deleted or truncated?
                try:
                    status = os.stat(self.path)
                except FileNotFoundError:
                    status = None
                if status is None or status.st_ino != inode:
                    handle.close()
                    handle = None
                    self.rotations += 1
                    if partial:
                        self.feed([partial.decode("utf-8", errors="replace")])
                    continue
                if status.st_size < handle.tell():
                    handle.seek(0, os.SEEK_END)  # truncated in place: its old lines are gone
                    partial = b""
                watch.wait(RECHECK_S, self)
        finally:
            if handle is not None:
                handle.close()
            watch.close()


class KmsgFollower(Follower):
    name = "kernel-log-kmsg"

    def __init__(self, path: str, sink: EventSink, on_error: ErrorSink, on_read: Optional[ReadSink] = None,
                 resume: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__(sink, on_error, on_read, resume)
        self.path = path
        self.overruns = 0
        self._fd = -1
        self.last_seq: Optional[int] = None
        if self.resume and self.resume.get("kind") == "kmsg" and isinstance(self.resume.get("seq"), int):
            self.last_seq = self.resume["seq"]

    def run(self) -> None:
        self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            if self.last_seq is None:
                os.lseek(self._fd, 0, os.SEEK_END)  # from the end: old faults are the boot's, not news
            # else: from the oldest record still there, skipping those the last run read
            while not self._stop.is_set():
                try:
                    record = os.read(self._fd, KMSG_RECORD_MAX)
                except BlockingIOError:
                    self.wait_readable([self._fd], RECHECK_S)
                    continue
                except OSError as exc:
                    if exc.errno == errno.EPIPE:
                        # The ring buffer wrapped past us; the next read returns the oldest record left.
                        self.overruns += 1
                        self.on_error("kmsg ring buffer overrun: records were lost")
                        continue
                    raise
                # A record is "prio,seq,usec,flags;message\n" then " KEY=value" lines.
                seq = kmsg_seq(record)
                if seq is not None and self.last_seq is not None and seq <= self.last_seq:
                    continue  # read before the agent restarted
                if seq is not None:
                    self.last_seq = seq
                self.feed([record.split(b"\n", 1)[0].decode("utf-8", errors="replace")],
                          {"kind": "kmsg", "seq": seq} if seq is not None else None)
        finally:
            fd, self._fd = self._fd, -1
            if fd >= 0:
                os.close(fd)


def kmsg_seq(record: bytes) -> Optional[int]:
    """The sequence number of a /dev/kmsg record (``prio,seq,usec,flags;...``), or None."""
    head = record.split(b";", 1)[0].split(b",")
    if len(head) < 2:
        return None
    try:
        return int(head[1])
    except ValueError:
        return None


class JournalFollower(Follower):
    name = "kernel-log-journal"

    def __init__(self, sink: EventSink, on_error: ErrorSink, journalctl: str = "journalctl") -> None:
        super().__init__(sink, on_error)
        self.journalctl = journalctl
        self._process: Optional[subprocess.Popen] = None

    def _close(self) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            process.terminate()

    def run(self) -> None:
        argv = [self.journalctl, "-k", "-f", "-n", "0", "-o", "short-iso", "--no-pager"]
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              stdin=subprocess.DEVNULL) as process:
            self._process = process
            for line in process.stdout:
                if self._stop.is_set():
                    break
                self.feed([line.decode("utf-8", errors="replace").rstrip("\n")])
        if not self._stop.is_set():
            raise RuntimeError("journalctl exited with %s" % process.returncode)


def make_follower(source: str, path: Optional[str], sink: EventSink, on_error: ErrorSink,
                  on_read: Optional[ReadSink] = None,
                  resume: Optional[Mapping[str, Any]] = None) -> Optional[Follower]:
    """The follower for ``source``; ``resume`` is the position of the agent's last run (same boot)."""
    if source == "file":
        return FileFollower(path or "", sink, on_error, on_read=on_read, resume=resume)
    if source == "kmsg":
        return KmsgFollower(path or "/dev/kmsg", sink, on_error, on_read=on_read, resume=resume)
    if source == "journal":
        return JournalFollower(sink, on_error)
    return None
