# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The health-event journal: one JSON object per line, appended, never rewritten.

Each write opens the file in append mode, so a rotated or deleted journal is simply created
again (faults are rare; an open per fault costs nothing) and concurrent readers - drills, the
audit trail - only ever see whole lines. The file is created 0640: it names GPUs and jobs, not
secrets, but it is nobody else's business either.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict

MODE = 0o640


def append(path: str, record: Dict[str, Any]) -> None:
    """Append one record; OSError propagates (the agent counts it and goes on)."""
    line = json.dumps(record, sort_keys=True, separators=(",", ":"), default=str) + "\n"
    directory = os.path.dirname(path)
    if directory and not os.path.isdir(directory):
        os.makedirs(directory, mode=0o750, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, MODE)
    try:
        os.write(fd, line.encode("utf-8"))
    finally:
        os.close(fd)
