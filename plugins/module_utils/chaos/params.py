# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Reading an experiment's ``params``: the integer and yes/no fields most families share.

Values may arrive as strings (``-e count=3`` on the command line), so digits and the usual
yes/no words are accepted; anything else fails naming ``params.<name>``, before any action."""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import (
    check_label_key,
    check_label_value,
    check_name,
    check_node_name,
    check_number,
    check_text,
)

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
# A fault id as the ledger mints it. Where it also names a Slurm job, a Pod or a label value (burn,
# numa) it must fit a Kubernetes label: 63 characters, starting and ending with a letter or digit.
_FAULT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_LABEL_FAULT_ID = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")


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


def check_target(value: Any, field: str = "target") -> str:
    """A drill's target, stripped: node names, a comma list of them, or a ``key=value`` label selector.

    It is written into cron lines, unit files and Kubernetes selectors, so every part goes through
    the strict layer: a newline in it wrote an extra root cron line (issue 16, finding 7)."""
    text = check_text(value, field, 4096).strip() if isinstance(value, str) else value
    if not isinstance(text, str) or not text:
        raise FieldError(field, "a node, a comma-separated list or a label selector such as gpufleet.io/pool=gpu-a, "
                         "got %r" % (value,))
    for part in (p.strip() for p in text.split(",")):
        key, sep, wanted = part.partition("=")
        if sep:
            check_label_key(key.rstrip("!"), field)
            check_label_value(wanted.lstrip("="), field)
        else:
            check_node_name(part, field)
    return text


def fault_id(value: Any, label: bool = False) -> str:
    """The spec's ``fault_id``, checked; ``label`` when it becomes a Slurm job name, Pod name or label."""
    if label:
        if not isinstance(value, str) or not _LABEL_FAULT_ID.fullmatch(value):
            raise FieldError("fault_id", "must be 1-63 letters, digits, '.', '_' or '-', starting and ending with a "
                             "letter or digit, not %r" % (value,))
        return value
    text = str(value or "")
    if not _FAULT_ID.fullmatch(text):
        raise FieldError("fault_id", "must be letters, digits, '.', '_' or '-', not %r" % (text,))
    return text


def check_plain(value: Any, field: str, depth: int = 0) -> None:
    """Data for the drill's extra variables: names for keys, strings without control characters,
    finite numbers, nested no deeper than a few levels."""
    if depth > 4:
        raise FieldError(field, "is nested too deep")
    if isinstance(value, Mapping):
        for key, item in value.items():
            check_name(key, "%s key" % field, r"[A-Za-z_][A-Za-z0-9_]{0,63}", "a variable name")
            check_plain(item, "%s.%s" % (field, key), depth + 1)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            check_plain(item, "%s[%d]" % (field, index), depth + 1)
    elif isinstance(value, str):
        check_text(value, field)
    elif isinstance(value, float):
        check_number(value, field)
    elif value is not None and not isinstance(value, (bool, int)):
        raise FieldError(field, "must be a string, a number, true/false, a list or a mapping")
