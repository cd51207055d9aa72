# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Writing a file so that a crash never leaves half of it: the one atomic writer of the reports,
the chaos file restores (NCCL, kubelet config, their sidecars) and the variability records, and
the one appender of whole lines (the remediation audit log).

Small on purpose, with no imports of ours: modules that only need to write a file do not carry
the report renderers into their payload.
"""

from __future__ import annotations

import errno
import fcntl
import os
import tempfile
from contextlib import contextmanager
from typing import Iterator, Optional


def read_or_none(path: str) -> Optional[bytes]:
    """The file's bytes, or None when there is no such file (what a writer compares before writing)."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def read_tail(path: str, limit: int) -> bytes:
    """The last ``limit`` bytes of a file, from a line start where one is in reach: the end of a
    log or a burn's output, where the verdict is, without reading a large file whole."""
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        handle.seek(max(0, size - limit))
        data = handle.read(limit)
    if size > limit and b"\n" in data:
        data = data[data.index(b"\n") + 1:]
    return data


def write_atomic(path: str, data: bytes, mode: int = 0o644, uid: Optional[int] = None,
                 gid: Optional[int] = None, sync: bool = True) -> None:
    """A reader sees the old file or the new one, never a part: a temporary file in the same
    directory, fsync, rename. ``mode`` (mkstemp makes 0600; a report is for everyone who may read
    the directory) and, when given and not ours, the owner are set before the rename. ``sync=False``
    skips the fsync: for state that must survive a torn read, not a host crash (the lab's fakes)."""
    fd, temp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".%s." % os.path.basename(path), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if sync:
                os.fsync(handle.fileno())
        os.chmod(temp, mode)
        if uid is not None and (uid, gid) != (os.geteuid(), os.getegid()):
            os.chown(temp, uid, gid if gid is not None else -1)
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


def replace_text(path: str, text: str, sync: bool = True) -> bool:
    """``write_atomic`` of ``text`` unless the file holds exactly that already; True when it wrote."""
    data = text.encode("ascii")
    if read_or_none(path) == data:
        return False
    write_atomic(path, data, sync=sync)
    return True


@contextmanager
def flocked(path: str) -> Iterator[None]:
    """An exclusive flock() on ``path`` (created 0644 if missing) for the block: writers of one
    directory's files take turns for their read-modify-write."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def append_line(path: str, line: bytes, mode: int = 0o640) -> None:
    """Append one whole line, or nothing: readers of a JSON-lines log never meet half a record.

    One ``write`` with O_APPEND puts a line at the end even when several writers append at once;
    a short write (a full disk, a signal) is not ignored: the rest is written, and on any error the
    file is cut back to where it ended before, then the OSError is raised (ENOSPC for a full disk).
    After a torn last line (no newline at the end) the record starts on a line of its own."""
    if not line.endswith(b"\n") or b"\n" in line[:-1]:
        raise ValueError("append_line takes exactly one line ending with a newline")
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, mode)
    try:
        before = os.fstat(fd).st_size
        if before and os.pread(fd, 1, before - 1) != b"\n":
            line = b"\n" + line  # a torn last line stays alone on its line; ours starts a new one
        done = 0
        try:
            while done < len(line):
                written = os.write(fd, line[done:])
                if written <= 0:
                    raise OSError(errno.EIO, "no byte written")
                done += written
            os.fsync(fd)
        except OSError:
            # Cut our part back off, unless another writer appended after it (then a reader skips it).
            if os.fstat(fd).st_size == before + done:
                os.ftruncate(fd, before)
            raise
    finally:
        os.close(fd)
