# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""RFC 3339 times as the parts we read write them, parsed in one place. Pure.

The API server serves ``2026-12-06T02:30:00Z``; the Python client gives ``...+00:00`` or a datetime;
Alertmanager writes nine fraction digits (``...T02:30:00.123456789Z``). Python's
``datetime.fromisoformat`` takes ``Z`` and long fractions only from 3.11, and a module may run on an
older Python on its target, so the fraction is cut to six digits and ``Z`` spelled as an offset here.
A time without an offset is UTC: every part of the fleet runs on UTC, and a naive time is read the
same on every host.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Optional


def parse(moment: Any) -> Optional[datetime]:
    """An RFC 3339 time (a datetime or its text) as an aware datetime; None when absent or unreadable."""
    if not isinstance(moment, datetime):
        text = str(moment or "").strip().replace("Z", "+00:00")
        head, dot, tail = text.partition(".")
        if dot:
            digits = len(tail) - len(tail.lstrip("0123456789"))
            text = head + "." + tail[:min(digits, 6)] + tail[digits:]
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def epoch_seconds(moment: Any) -> Optional[float]:
    """An RFC 3339 time (a datetime or its text) in epoch seconds; None when absent or unreadable."""
    parsed = parse(moment)
    return None if parsed is None else parsed.timestamp()
