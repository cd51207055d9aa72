# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Checks of single input fields, each raising ``FieldError`` with the field named.

Shared by every module, filter and pure model that reads input (the pool model, the Slinky values,
the chaos gate, the remediation), so an integer, a node name, a number or a path is judged by the
same rule and worded the same way everywhere: the one strict layer (docs/architecture.md, "Layers, enforced").

Pure: no I/O.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any, List, Mapping, Optional, Sequence

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError

_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def check_int(value: Any, field: str, minimum: int, maximum: Optional[int] = None) -> int:
    """An integer in range; "8" from -e or YAML counts, a bool or 1.5 does not."""
    if isinstance(value, bool) or value is None or (isinstance(value, float) and not value.is_integer()):
        raise FieldError(field, "must be an integer, got %r" % (value,))
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise FieldError(field, "must be an integer, got %r" % (value,)) from None
    if number < minimum:
        raise FieldError(field, "must be >= %d, got %d" % (minimum, number))
    if maximum is not None and number > maximum:
        raise FieldError(field, "must be <= %d, got %d" % (maximum, number))
    return number


def check_mapping(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise FieldError(field, "must be a dict, got %s" % type(value).__name__)
    return value


def check_sequence(value: Any, field: str) -> Sequence[Any]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise FieldError(field, "must be a list, got %s" % type(value).__name__)
    return value


def check_label_key(key: Any, field: str) -> str:
    """A Kubernetes label or taint key: ``[prefix/]name``, prefix a DNS subdomain."""
    if not isinstance(key, str) or not key:
        raise FieldError(field, "must be a label key, got %r" % (key,))
    prefix, _slash, name = key.rpartition("/")
    if (prefix and not _DNS_SUBDOMAIN.fullmatch(prefix)) or not _LABEL_NAME.fullmatch(name):
        raise FieldError(field, "%r is not a valid Kubernetes label key ([prefix/]name, name <= 63 characters)" % key)
    return key


def check_label_value(value: Any, field: str) -> str:
    # Numbers and booleans from YAML are fine as values once written as text.
    text = str(value).lower() if isinstance(value, bool) else str(value)
    if value is None or not _LABEL_VALUE.fullmatch(text):
        raise FieldError(
            field, "%r is not a valid Kubernetes label value (<= 63 characters, alphanumeric ends)" % (value,)
        )
    return text


# The strict layer (the trust boundary): every value that arrives (a module option,
# a drill parameter, an inventory value, an alert label) goes through one of these before it names
# a node, a file, a cron or systemd line. Patterns are applied with re.fullmatch: "^...$" with
# re.match lets a trailing newline through, which is how a drill target wrote an extra cron line.

MAX_NODE_NAME = 253
MAX_LABEL = 63
MAX_TEXT = 4096
_NODE_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
# C0 and C1 controls, DEL, and the Unicode line and paragraph separators (a line break to many readers).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_CONTROL_IN_LINES = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def check_node_name(value: Any, field: str = "name") -> str:
    """A node name: an RFC 1123 subdomain (what Kubernetes allows), <= 253 characters, labels <= 63.

    Empty is refused: an empty node name turns ``GET /api/v1/nodes/`` into the list of every node
    and ``fieldSelector=spec.nodeName=`` into every unscheduled pod of the cluster."""
    if not isinstance(value, str) or not value:
        raise FieldError(field, "must be a node name, got %r" % (value,))
    if len(value) > MAX_NODE_NAME:
        raise FieldError(field, "must be a node name of at most %d characters, got %d" % (MAX_NODE_NAME, len(value)))
    if not all(_NODE_LABEL.fullmatch(label) for label in value.split(".")):
        raise FieldError(field, "must be a node name (lower-case letters, digits, '-' and '.'; each part 1-63 "
                         "characters, starting and ending with a letter or digit), got %r" % (_short(value),))
    return value


def check_node_names(values: Any, field: str) -> List[str]:
    return [check_node_name(value, "%s[%d]" % (field, index))
            for index, value in enumerate(check_sequence(values, field))]


def check_name(value: Any, field: str, pattern: str = r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?",
               what: str = "1-63 letters, digits, '.', '_' or '-', starting and ending with a letter or digit") -> str:
    """A name (an experiment, a job, an id) that fully matches ``pattern``."""
    if not isinstance(value, str) or not re.fullmatch(pattern, value):
        raise FieldError(field, "must be %s, got %r" % (what, _short(value)))
    return value


def check_number(value: Any, field: str, minimum: Optional[float] = None, maximum: Optional[float] = None,
                 above: Optional[float] = None) -> float:
    """A finite number: NaN and infinities are refused (NaN compares false to every bound, so it would
    pass any range check; inf lifts any cap). ``above`` is an exclusive minimum. "2.5" from -e counts."""
    if isinstance(value, bool) or value is None:
        raise FieldError(field, "must be a number, got %r" % (value,))
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise FieldError(field, "must be a number, got %r" % (_short(value),)) from None
    if not math.isfinite(number):
        raise FieldError(field, "must be a finite number, got %r" % (value,))
    if above is not None and not number > above:
        raise FieldError(field, "must be more than %g, got %g" % (above, number))
    if minimum is not None and number < minimum:
        raise FieldError(field, "must be %g or more, got %g" % (minimum, number))
    if maximum is not None and number > maximum:
        raise FieldError(field, "must be %g or less, got %g" % (maximum, number))
    return number


def optional_number(value: Any, field: str, **bounds: Optional[float]) -> Optional[float]:
    return None if value is None else check_number(value, field, **bounds)


def check_text(value: Any, field: str, max_len: int = MAX_TEXT, empty: bool = True, lines: bool = False) -> str:
    """A free string (a reason, a message): no control characters (no newline, no NUL), at most ``max_len``.

    ``lines``: a message body that is only ever sent as data (JSON), never written into a line of
    a file or a command: newlines and tabs are allowed there, other control characters are not."""
    if not isinstance(value, str):
        raise FieldError(field, "must be a string, got %s" % type(value).__name__)
    if not value and not empty:
        raise FieldError(field, "must not be empty")
    if len(value) > max_len:
        raise FieldError(field, "must be at most %d characters, got %d" % (max_len, len(value)))
    bad = (_CONTROL_IN_LINES if lines else _CONTROL).search(value)
    if bad:
        raise FieldError(field, "must be one line without control characters, found %r at %d"
                         % (bad.group(), bad.start()))
    return value


def optional_text(value: Any, field: str, max_len: int = MAX_TEXT) -> Optional[str]:
    return None if value is None else check_text(value, field, max_len)


def check_path(value: Any, field: str, root: Optional[str] = None, max_len: int = MAX_TEXT) -> str:
    """An absolute, normalized path without control characters or ``..``; under ``root`` when given.

    Returned as given (it must already be normal: a path that normalizes to something else is refused
    rather than silently rewritten, so what the user reads is what is used)."""
    text = check_text(value, field, max_len, empty=False)
    if not text.startswith("/"):
        raise FieldError(field, "must be an absolute path, got %r" % (_short(text),))
    if ".." in text.split("/"):
        raise FieldError(field, "must not contain '..', got %r" % (_short(text),))
    if os.path.normpath(text) != text.rstrip("/") and text != "/":
        raise FieldError(field, "must be a normalized path (no '.', '//' or trailing '/'), got %r" % (_short(text),))
    if root is not None:
        base = os.path.normpath(root)
        if text != base and not text.startswith(base.rstrip("/") + "/"):
            raise FieldError(field, "must be under %s, got %r" % (base, _short(text)))
    return text


def check_file_path(value: Any, field: str) -> str:
    """A path option as Ansible's ``type: path`` leaves it (relative allowed): one line, no control
    characters, at most 4096 characters and 255 per component, so the OS never answers with a
    traceback (ENAMETOOLONG, an embedded NUL)."""
    text = check_text(value, field, MAX_TEXT, empty=False)
    if any(len(part) > 255 for part in text.split("/")):
        raise FieldError(field, "has a path component longer than 255 characters")
    return text


def optional_file_path(value: Any, field: str) -> Optional[str]:
    return None if value is None else check_file_path(value, field)


def check_path_under(value: Any, field: str, roots: Sequence[str]) -> str:
    """A path (as ``check_path``) under one of the declared ``roots``; no roots declared refuses every path."""
    text = check_path(value, field)
    for root in roots:
        try:
            return check_path(text, field, root)
        except FieldError:
            continue
    raise FieldError(field, "%r is not under an allowed directory (%s)"
                     % (_short(text), ", ".join(roots) or "none declared"))


def _short(value: Any, limit: int = 80) -> Any:
    """A value cut for a message: a 5,000-character name must not flood the error."""
    if isinstance(value, str) and len(value) > limit:
        return value[:limit] + "...(%d characters)" % len(value)
    return value
