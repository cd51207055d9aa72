# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Issue 16, finding 6: one torn line in the audit log blocked every later remediation.

Reading skips a torn line with a warning naming the file and line; writing never leaves a
partial line (a short write is completed, a failure cut back), and a full disk is an
AuditLogError naming the log."""

from __future__ import annotations

import errno
import json
import os

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils import files
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import record as records

GOOD = {"id": "r-1", "node": "gpu-a-001", "result": "succeeded"}
NEXT = {"id": "r-2", "node": "gpu-a-002", "result": "succeeded"}


def lines(path):
    return path.read_bytes().decode().splitlines()


@pytest.mark.parametrize("torn", ['{"id": "r-0", "node": "gpu-a-0', "\x00\x00\x00", "[1, 2]", '{"id": "\xff'])
def test_a_torn_line_is_skipped_with_a_warning_naming_file_and_line(tmp_path, torn) -> None:
    log = tmp_path / "audit.jsonl"
    log.write_text(json.dumps(GOOD) + "\n" + torn + "\n")
    warnings = []
    assert records.read_records(str(log), warnings=warnings) == [GOOD]
    assert len(warnings) == 1 and str(log) in warnings[0] and "line 2" in warnings[0]


def test_a_later_remediation_is_recorded_after_a_torn_last_line(tmp_path) -> None:
    log = tmp_path / "audit.jsonl"
    log.write_text(json.dumps(GOOD) + "\n" + '{"id": "r-0", "no')  # a crash mid-line: no newline
    warnings = []
    assert records.append_record(str(log), NEXT, warnings)
    assert records.read_records(str(log), warnings=[]) == [GOOD, NEXT]  # the new line is whole, on its own
    assert "line 2" in warnings[0]
    assert not records.append_record(str(log), NEXT, [])  # and found again: written once


def test_a_short_write_is_completed(tmp_path, monkeypatch) -> None:
    log = tmp_path / "audit.jsonl"
    real_write = os.write

    def short_write(fd, data):
        return real_write(fd, bytes(data[:7]))  # the kernel may write fewer bytes than asked

    monkeypatch.setattr(files.os, "write", short_write)
    assert records.append_record(str(log), GOOD)
    assert records.append_record(str(log), NEXT)
    assert [json.loads(line) for line in lines(log)] == [GOOD, NEXT]


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EIO])
def test_a_failed_write_leaves_no_partial_line_and_names_the_log(tmp_path, monkeypatch, error) -> None:
    log = tmp_path / "audit.jsonl"
    records.append_record(str(log), GOOD)
    before = log.read_bytes()
    real_write = os.write
    calls = []

    def full_disk(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[:10]))  # part of the line got out, then the disk was full
        raise OSError(error, os.strerror(error))

    monkeypatch.setattr(files.os, "write", full_disk)
    with pytest.raises(records.AuditLogError) as failed:
        records.append_record(str(log), NEXT)
    assert str(log) in str(failed.value) and failed.value.path == str(log)
    if error == errno.ENOSPC:
        assert "disk is full" in str(failed.value)
    assert log.read_bytes() == before  # cut back: no torn line for the next reader


def test_a_write_of_zero_bytes_is_an_error_not_a_loop(tmp_path, monkeypatch) -> None:
    log = tmp_path / "audit.jsonl"
    monkeypatch.setattr(files.os, "write", lambda fd, data: 0)
    with pytest.raises(records.AuditLogError):
        records.append_record(str(log), GOOD)
    assert log.read_bytes() == b""


def test_append_line_takes_exactly_one_line(tmp_path) -> None:
    with pytest.raises(ValueError):
        files.append_line(str(tmp_path / "x"), b"two\nlines\n")
    with pytest.raises(ValueError):
        files.append_line(str(tmp_path / "x"), b"no newline")
