# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The strict input layer (issue 16): node names, finite numbers, free strings, paths."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils import fields
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError

PLUGINS = Path(fields.__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["gpu-a-001", "a", "node.rack-1.example", "0", "a" * 63, ".".join(["a" * 63] * 3)])
def test_a_node_name_passes(name: str) -> None:
    assert fields.check_node_name(name, "name") == name


@pytest.mark.parametrize("name,words", [
    ("", "must be a node name"),
    (None, "must be a node name"),
    (3, "must be a node name"),
    ("gpu-a-001\n", "must be a node name"),  # re.match("...$") lets this through
    ("GPU-A", "must be a node name"),
    ("-oProxyCommand=x", "must be a node name"),
    ("/etc/passwd", "must be a node name"),
    ("../x", "must be a node name"),
    ("a..b", "must be a node name"),
    ("a" * 64, "must be a node name"),  # one label over 63
    ("a" * 5000, "at most 253 characters"),
    ("a b", "must be a node name"),
])
def test_a_bad_node_name_is_refused_naming_the_field(name, words) -> None:
    with pytest.raises(FieldError, match=words) as bad:
        fields.check_node_name(name, "target")
    assert bad.value.field == "target"
    assert len(str(bad.value)) < 400  # a 5,000-character name is cut in the message


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), "nan", "inf", "-Infinity", "1e999"])
def test_nan_and_infinity_are_refused(value) -> None:
    with pytest.raises(FieldError, match="finite") as bad:
        fields.check_number(value, "duration", above=0)
    assert bad.value.field == "duration"


@pytest.mark.parametrize("value,bounds,words", [
    (-1, dict(minimum=0), "0 or more"),
    (0, dict(above=0), "more than 0"),
    (101, dict(maximum=100), "100 or less"),
    (True, {}, "must be a number"),
    (None, {}, "must be a number"),
    ("ten", {}, "must be a number"),
    ([1], {}, "must be a number"),
])
def test_a_number_out_of_its_bounds_is_refused(value, bounds, words) -> None:
    with pytest.raises(FieldError, match=words):
        fields.check_number(value, "x", **bounds)


def test_a_number_in_bounds_comes_back_as_float() -> None:
    assert fields.check_number("2.5", "x", above=0, maximum=3) == 2.5
    assert fields.optional_number(None, "x", above=0) is None


@pytest.mark.parametrize("text", ["a\nb", "a\rb", "a\x00b", "a\x1bb", "a\u2028b", "a\x85b", "a\x7fb"])
def test_control_characters_are_refused_in_free_strings(text: str) -> None:
    with pytest.raises(FieldError, match="control characters") as bad:
        fields.check_text(text, "reason")
    assert bad.value.field == "reason"


def test_a_free_string_has_a_length_cap() -> None:
    assert fields.check_text("ok: café", "reason") == "ok: café"
    with pytest.raises(FieldError, match="at most 10"):
        fields.check_text("x" * 11, "reason", 10)


@pytest.mark.parametrize("path,root,words", [
    ("relative/x", None, "absolute"),
    ("/a/../etc", None, "'..'"),
    ("/a/./b", None, "normalized"),
    ("/a//b", None, "normalized"),
    ("/a/b\n", None, "control characters"),
    ("/a\x00b", None, "control characters"),
    ("", None, "must not be empty"),
    ("/etc/passwd", "/opt/tests", "under /opt/tests"),
    ("/opt/tests-evil/x", "/opt/tests", "under /opt/tests"),
])
def test_a_bad_path_is_refused(path, root, words) -> None:
    with pytest.raises(FieldError, match=re.escape(words)) as bad:
        fields.check_path(path, "params.path", root)
    assert bad.value.field == "params.path"


def test_a_path_under_a_declared_root_passes() -> None:
    assert fields.check_path("/opt/tests/nccl/all_reduce_perf", "p", "/opt/tests") == "/opt/tests/nccl/all_reduce_perf"
    assert fields.check_path_under("/srv/b/x", "p", ["/srv/a", "/srv/b/"]) == "/srv/b/x"
    with pytest.raises(FieldError, match="not under an allowed directory"):
        fields.check_path_under("/srv/c/x", "p", ["/srv/a"])
    with pytest.raises(FieldError, match="none declared"):
        fields.check_path_under("/srv/c/x", "p", [])


def test_label_checks_use_a_full_match() -> None:
    with pytest.raises(FieldError):
        fields.check_label_value("allowed\n", "labels.x")
    with pytest.raises(FieldError):
        fields.check_label_key("gpufleet.io/chaos\n", "labels")


def test_no_validator_in_plugins_anchors_a_match_with_a_dollar() -> None:
    """re.match("...$") accepts a trailing newline; the strict layer uses re.fullmatch."""
    offenders = []
    for path in PLUGINS.rglob("*.py"):
        text = path.read_text()
        for number, line in enumerate(text.splitlines(), 1):
            if re.search(r"""re\.match\(r?["'][^"']*\$["']""", line):
                offenders.append("%s:%d" % (path.relative_to(PLUGINS), number))
        for pattern in re.findall(r"""^(_?[A-Z_]+) = re\.compile\(r?["']\^[^"']*\$["']""", text, re.M):
            if re.search(r"\b%s\.match\(" % re.escape(pattern), text):
                offenders.append("%s: %s.match" % (path.relative_to(PLUGINS), pattern))
    assert not offenders, offenders


def test_the_family_number_checks_refuse_nan_too() -> None:
    """Checks written as "value <= 0" or "value > high" let NaN through: each family's own numbers."""
    from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import checkpoint, network
    from ansible_collections.gpufleet.resilience.plugins.module_utils.report import history

    with pytest.raises(FieldError) as seconds:
        checkpoint._seconds({"timeout_s": float("nan")}, "timeout_s")
    assert seconds.value.field == "params.timeout_s"
    with pytest.raises(FieldError) as rate:
        network._number({"rate_mbit": float("nan")}, "rate_mbit", 0, 100000, low_open=True)
    assert rate.value.field == "params.rate_mbit"
    with pytest.raises(FieldError) as tolerance:
        history.compare([], "gpu_xid", 5, float("nan"))
    assert tolerance.value.field == "tolerance"


def test_a_message_body_may_have_lines_but_no_other_control_characters() -> None:
    assert fields.check_text("scontrol failed:\r\n  Invalid node\tname", "error", lines=True)
    with pytest.raises(FieldError, match="control characters"):
        fields.check_text("a\x00b", "error", lines=True)
    with pytest.raises(FieldError, match="control characters"):
        fields.check_text("a\x1b[2Jb", "error", lines=True)
