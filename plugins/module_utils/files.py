# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Writing a file so that a crash never leaves half of it: the one atomic writer of the reports,
the chaos file restores (NCCL, kubelet config, their sidecars) and the variability records.

Small on purpose, with no imports of ours: modules that only need to write a file do not carry
the report renderers into their payload.
"""

from __future__ import annotations

import os
import tempfile
from typing import Optional


def write_atomic(path: str, data: bytes, mode: int = 0o644, uid: Optional[int] = None,
                 gid: Optional[int] = None) -> None:
    """A reader sees the old file or the new one, never a part: a temporary file in the same
    directory, fsync, rename. ``mode`` (mkstemp makes 0600; a report is for everyone who may read
    the directory) and, when given and not ours, the owner are set before the rename."""
    fd, temp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".%s." % os.path.basename(path), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, mode)
        if uid is not None and (uid, gid) != (os.geteuid(), os.getegid()):
            os.chown(temp, uid, gid if gid is not None else -1)
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise
