"""The trigger's codec: what the rulebook encodes (Jinja's tojson | urlencode) comes back as data."""

from __future__ import annotations

import json
from urllib.parse import quote

import jinja2
import pytest
from jinja2.nativetypes import NativeEnvironment

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.trigger import decode

PAYLOADS = [
    "{{ lookup('pipe', 'id') }}",
    "{% set x = lookup('pipe', 'id') %}",
    "{# c #}{{ 7 * 7 }}",
    "{{ '{{' }} 7 * 7 {{ '}}' }}",
    "%7B%7B 7*7 %7D%7D",
    "a+b c&d=e/f?g#h",
    "line one\nline two\ttab",
    "ünïcödé ✓ \u2028",
]


def rulebook_encode(trigger: dict) -> str:
    """As ansible-rulebook renders the rulebook's expression (a native Jinja environment)."""
    env = NativeEnvironment(undefined=jinja2.StrictUndefined)
    return env.from_string("{{ trigger | tojson | urlencode }}").render(trigger=trigger)


@pytest.mark.parametrize("text", PAYLOADS)
def test_text_round_trips_and_no_delimiter_crosses(text):
    trigger = {"source": "alertmanager", "alert": "GpuNodeFatal", "fingerprint": "0123456789", "starts_at": text,
               "received_at": None, "labels": {"node": "gpu-a-001", "pool": text}, "annotations": {"summary": text}}
    encoded = rulebook_encode(trigger)
    assert isinstance(encoded, str)
    assert not set(encoded) & set("{}# \n")
    assert decode(encoded) == trigger


def test_a_condition_trigger_keeps_its_message():
    trigger = {"source": "node_condition", "alert": None, "fingerprint": "n/False/Xid79/t", "starts_at": "t",
               "received_at": "r", "condition": {"type": "GpuHealthy", "status": "False", "reason": "Xid79",
                                                 "message": PAYLOADS[0], "verdict": "fatal", "action": "RESTART_BM"}}
    assert decode(rulebook_encode(trigger)) == trigger


@pytest.mark.parametrize("encoded, field", [
    ("", "remediation_trigger_encoded"),
    (None, "remediation_trigger_encoded"),
    ("%ZZ not json", "remediation_trigger_encoded"),
    (quote("[1, 2]"), "remediation_trigger_encoded"),
    (quote(json.dumps({"source": "manual"})), "remediation_trigger_encoded.source"),
    (quote(json.dumps({"source": "alertmanager", "extra": 1})), "remediation_trigger_encoded"),
    (quote(json.dumps({"source": "alertmanager", "labels": ["x"]})), "remediation_trigger_encoded.labels"),
    (quote(json.dumps({"source": "alertmanager", "labels": {"a": {"b": "c"}}})),
     "remediation_trigger_encoded.labels.a"),
    (quote(json.dumps({"source": "alertmanager", "labels": {"a": "x\x00y"}})), "remediation_trigger_encoded.labels.a"),
    (quote(json.dumps({"source": "alertmanager", "annotations": {"a": "x" * 9000}})),
     "remediation_trigger_encoded.annotations.a"),
    (quote(json.dumps({"source": "alertmanager", "labels": {str(i): "v" for i in range(65)}})),
     "remediation_trigger_encoded.labels"),
    (quote(json.dumps({"source": "alertmanager", "alert": True})), "remediation_trigger_encoded.alert"),
    (quote(json.dumps({"source": "node_condition"})), "remediation_trigger_encoded.condition"),
    (quote(json.dumps({"source": "node_condition", "condition": {"message": "m", "x": "y"}})),
     "remediation_trigger_encoded.condition"),
    ("%7B" * 30000, "remediation_trigger_encoded"),
])
def test_bad_input_names_the_field(encoded, field):
    with pytest.raises(FieldError) as raised:
        decode(encoded)
    assert raised.value.field == field
