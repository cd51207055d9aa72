"""Label selectors as the API server reads them: matchLabels and matchExpressions, ANDed."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.label_selector import (
    SelectorError,
    describe,
    labels_that_would_match,
    matches,
)

LABELS = {"release": "kube-prometheus-stack", "team": "gpu"}


@pytest.mark.parametrize("selector, expected", [
    ({}, True),
    ({"matchLabels": {"release": "kube-prometheus-stack"}}, True),
    ({"matchLabels": {"release": "other"}}, False),
    ({"matchLabels": {"missing": "x"}}, False),
    ({"matchExpressions": [{"key": "team", "operator": "In", "values": ["gpu", "cpu"]}]}, True),
    ({"matchExpressions": [{"key": "team", "operator": "In", "values": ["cpu"]}]}, False),
    ({"matchExpressions": [{"key": "absent", "operator": "In", "values": ["x"]}]}, False),
    ({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["cpu"]}]}, True),
    ({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["gpu"]}]}, False),
    ({"matchExpressions": [{"key": "absent", "operator": "NotIn", "values": ["x"]}]}, True),
    ({"matchExpressions": [{"key": "team", "operator": "Exists"}]}, True),
    ({"matchExpressions": [{"key": "absent", "operator": "Exists"}]}, False),
    ({"matchExpressions": [{"key": "absent", "operator": "DoesNotExist"}]}, True),
    ({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}, False),
    # Both parts must hold.
    ({"matchLabels": {"release": "kube-prometheus-stack"},
      "matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}, False),
], ids=repr)
def test_matches(selector, expected):
    assert matches(selector, LABELS) is expected


def test_no_labels_match_only_selectors_that_ask_for_none():
    assert matches({}, None)
    assert matches({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {})
    assert not matches({"matchLabels": {"a": "b"}}, None)


def test_an_unknown_operator_is_an_error_naming_it():
    with pytest.raises(SelectorError, match="operator 'Equals' of key 'team'"):
        matches({"matchExpressions": [{"key": "team", "operator": "Equals", "values": ["gpu"]}]}, LABELS)


def test_describe_reads_like_kubectl():
    assert describe(None) == "null"
    assert describe({}) == "{} (everything)"
    assert describe({"matchLabels": {"release": "kps", "a": "b"},
                     "matchExpressions": [{"key": "t", "operator": "In", "values": ["x", "y"]},
                                          {"key": "u", "operator": "Exists"},
                                          {"key": "v", "operator": "DoesNotExist"},
                                          {"key": "w", "operator": "NotIn", "values": ["z"]}]}) == \
        "a=b,release=kps,t in (x,y),u,!v,w notin (z)"


def test_labels_that_would_match():
    selector = {"matchLabels": {"release": "kps"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]},
                                     {"key": "any", "operator": "In", "values": ["a", "b"]},
                                     {"key": "e", "operator": "Exists"}]}
    wanted = labels_that_would_match(selector)
    assert wanted == {"release": "kps", "tier": "gpu"}
    assert matches({"matchLabels": selector["matchLabels"]}, wanted)
