# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Checks of single input fields, each raising ``FieldError`` with the field named.

Shared by every pure model that reads user input (the pool model, the Slinky values), so an
integer, a list or a label is judged by the same rule and worded the same way everywhere.

Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional, Sequence

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError

_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


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
    if (prefix and not _DNS_SUBDOMAIN.match(prefix)) or not _LABEL_NAME.match(name):
        raise FieldError(field, "%r is not a valid Kubernetes label key ([prefix/]name, name <= 63 characters)" % key)
    return key


def check_label_value(value: Any, field: str) -> str:
    # Numbers and booleans from YAML are fine as values once written as text.
    text = str(value).lower() if isinstance(value, bool) else str(value)
    if value is None or not _LABEL_VALUE.match(text):
        raise FieldError(
            field, "%r is not a valid Kubernetes label value (<= 63 characters, alphanumeric ends)" % (value,)
        )
    return text
