# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""What started a remediation, as it crosses from the rulebook into the playbook. Pure.

Everything in a trigger arrives from outside: alert labels and annotations (anyone who reaches
Alertmanager or the webhook writes them), a node condition's message (any agent token writes
one). ansible-core 2.19 loads extra vars as *trusted templates*, so a label that reads
``{{ lookup('pipe', ...) }}`` would run as root the moment the playbook touched it.

So the rulebook never puts that text into extra vars as it came. It sends the trigger as one
string, ``remediation_trigger_encoded``: the trigger as JSON, percent-encoded (Jinja's
``urlencode``). That string has no ``{``, ``}``, ``%`` followed by a delimiter or ``#`` left, so
nothing in it can be a template; ``decode`` turns it back into data here, in Python, and checks
its shape. A value that comes out of a filter is never templated again, so the text stays text
all the way to the audit record.

The node name is not part of this: the rulebook's condition lets only an RFC 1123 name through,
and the role checks it again.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Mapping, Optional
from urllib.parse import unquote

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError

FIELD = "remediation_trigger_encoded"
SOURCES = ("alertmanager", "node_condition")
# Room for Alertmanager's usual labels and a few annotations; a notification past this is not
# one of ours.
MAX_ENCODED = 64 * 1024
MAX_ITEMS = 64
MAX_KEY = 128
MAX_TEXT = 8192
SCALARS = ("alert", "fingerprint", "starts_at", "received_at")
CONDITION_KEYS = ("type", "status", "reason", "message", "verdict", "action")
# Text may keep line breaks and tabs (an annotation's description has them); any other control
# character is no part of an alert and is refused.
_ALLOWED_CONTROLS = frozenset("\n\t\r")


def _text(value: Any, field: str, limit: int = MAX_TEXT) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise FieldError(field, "must be text, got %s" % type(value).__name__)
    text = str(value)
    if len(text) > limit:
        raise FieldError(field, "is %d characters long, more than %d" % (len(text), limit))
    for char in text:
        if (ord(char) < 32 or ord(char) == 127) and char not in _ALLOWED_CONTROLS:
            raise FieldError(field, "holds the control character %r" % char)
    return text


def _text_map(value: Any, field: str) -> Dict[str, Optional[str]]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise FieldError(field, "must be a mapping of names to text, got %s" % type(value).__name__)
    if len(value) > MAX_ITEMS:
        raise FieldError(field, "has %d entries, more than %d" % (len(value), MAX_ITEMS))
    return {_text(key, "%s key" % field, MAX_KEY) or "": _text(item, "%s.%s" % (field, key))
            for key, item in value.items()}


def decode(encoded: Any) -> Dict[str, Any]:
    """The trigger dict from its encoded form; FieldError naming the part that is wrong."""
    if not isinstance(encoded, str) or not encoded:
        raise FieldError(FIELD, "must be the rulebook's encoded trigger (a non-empty string)")
    if len(encoded) > MAX_ENCODED:
        raise FieldError(FIELD, "is %d characters long, more than %d" % (len(encoded), MAX_ENCODED))
    try:
        data = json.loads(unquote(encoded, errors="strict"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise FieldError(FIELD, "is not percent-encoded JSON: %s" % exc) from None
    if not isinstance(data, dict):
        raise FieldError(FIELD, "must encode a JSON object, got %s" % type(data).__name__)
    unknown = sorted(set(data) - {"source", "labels", "annotations", "condition", *SCALARS})
    if unknown:
        raise FieldError(FIELD, "has unknown keys: %s" % ", ".join(map(repr, unknown)))
    source = data.get("source")
    if source not in SOURCES:
        raise FieldError(FIELD + ".source", "must be one of %s, got %r" % (", ".join(SOURCES), source))
    trigger: Dict[str, Any] = {"source": source}
    for key in SCALARS:
        trigger[key] = _text(data.get(key), "%s.%s" % (FIELD, key), 256)
    if source == "alertmanager":
        trigger["labels"] = _text_map(data.get("labels"), FIELD + ".labels")
        trigger["annotations"] = _text_map(data.get("annotations"), FIELD + ".annotations")
    else:
        condition = data.get("condition")
        if not isinstance(condition, Mapping):
            raise FieldError(FIELD + ".condition", "must be the node condition (a mapping)")
        extra = sorted(set(condition) - set(CONDITION_KEYS))
        if extra:
            raise FieldError(FIELD + ".condition", "has unknown keys: %s" % ", ".join(map(repr, extra)))
        trigger["condition"] = {key: _text(condition.get(key), "%s.condition.%s" % (FIELD, key))
                                for key in CONDITION_KEYS}
    return trigger
