# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The file follower on a real file: from the end, rotation, deletion, truncation, partial lines."""
from __future__ import annotations

import os
import threading
import time

from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.kernel_log_source import FileFollower

XID = "NVRM: Xid (PCI:0000:1b:00): %d, pid=1, name=python, Ch 00000001\n"


class Collector:
    def __init__(self):
        self.events = []
        self.errors = []
        self.cond = threading.Condition()

    def sink(self, events):
        with self.cond:
            self.events.extend(events)
            self.cond.notify_all()

    def wait_for(self, count, timeout=5.0):
        deadline = time.monotonic() + timeout
        with self.cond:
            while len(self.events) < count and time.monotonic() < deadline:
                self.cond.wait(0.05)
        return [event.xid for event in self.events]


def follow(path):
    seen = Collector()
    follower = FileFollower(str(path), seen.sink, seen.errors.append)
    follower.start()
    time.sleep(0.3)  # let it open and seek to the end
    return follower, seen


def append(path, text):
    with open(path, "a") as handle:
        handle.write(text)


def test_follows_from_the_end_and_survives_rotation_deletion_and_truncation(tmp_path):
    path = tmp_path / "kmsg.log"
    path.write_text(XID % 13)  # before the agent: not news
    follower, seen = follow(path)
    try:
        append(path, XID % 79)
        assert seen.wait_for(1) == [79]

        os.rename(path, tmp_path / "kmsg.log.1")  # logrotate: rename, then a new file
        append(path, XID % 48)
        assert seen.wait_for(2) == [79, 48]

        os.unlink(path)  # deleted outright, re-created later
        time.sleep(0.3)
        append(path, XID % 63)
        assert seen.wait_for(3) == [79, 48, 63]

        with open(path, "w"):  # truncated in place (copytruncate)
            pass
        time.sleep(0.3)
        append(path, XID % 74)
        assert seen.wait_for(4) == [79, 48, 63, 74]
        assert follower.rotations >= 2
        assert seen.errors == []
    finally:
        follower.stop()


def test_a_line_written_in_two_pieces_is_read_once_whole(tmp_path):
    path = tmp_path / "kmsg.log"
    path.write_text("")
    follower, seen = follow(path)
    try:
        line = XID % 79
        append(path, line[:20])
        time.sleep(0.2)
        assert seen.events == []
        append(path, line[20:])
        assert seen.wait_for(1) == [79]
    finally:
        follower.stop()


def test_a_two_line_fallen_off_the_bus_message_is_joined(tmp_path):
    path = tmp_path / "kmsg.log"
    path.write_text("")
    follower, seen = follow(path)
    try:
        append(path, "NVRM: The NVIDIA GPU 0000:2d:00.0\n")
        time.sleep(0.2)
        append(path, "NVRM: GPU 0000:2d:00.0: GPU has fallen off the bus and is not responding to commands.\n")
        assert seen.wait_for(1) == [79]
        assert seen.events[0].pci_bus_id == "0000:2d:00.0"
    finally:
        follower.stop()


def test_a_missing_file_is_waited_for(tmp_path):
    path = tmp_path / "later.log"
    follower, seen = follow(path)
    try:
        append(path, XID % 79)
        assert seen.wait_for(1) == [79]
    finally:
        follower.stop()


def test_stop_wakes_a_follower_that_waits_for_its_file_to_change(tmp_path):
    """The follower rechecks its file every RECHECK_S (5 s) when nothing happens; stop() wakes it
    through its pipe, so the thread has ended when stop() (which waits 2 s at most) returns."""
    existing = tmp_path / "kern.log"
    existing.write_text("")
    for path in (existing, tmp_path / "missing.log"):
        follower, _seen = follow(path)
        follower.stop()
        assert not follower._thread.is_alive(), path
