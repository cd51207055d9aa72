# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Reading an experiment's ``params``: the integer and yes/no fields most families share.

Values may arrive as strings (``-e count=3`` on the command line), so digits and the usual
yes/no words are accepted; anything else fails naming ``params.<name>``, before any action."""

from __future__ import annotations

from typing import Any, Mapping, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


def int_param(params: Mapping[str, Any], name: str, low: int, high: int, default: Optional[int] = None) -> int:
    """``params[name]`` (or ``default``) as an integer from ``low`` to ``high``."""
    value = params.get(name, default)
    if value is None:
        raise FieldError("params.%s" % name, "is required: an integer from %d to %d" % (low, high))
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise FieldError("params.%s" % name, "must be an integer from %d to %d, got %r" % (low, high, value))
    return value


def bool_param(params: Mapping[str, Any], name: str, default: bool = False) -> bool:
    """``params[name]`` (or ``default``) as true or false."""
    value = params.get(name, default)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in TRUE_WORDS + FALSE_WORDS:
        return value.strip().lower() in TRUE_WORDS
    raise FieldError("params.%s" % name, "must be true or false, got %r" % (value,))
