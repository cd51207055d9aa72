"""Ansible templates the values of a task's arguments, never the keys of a mapping: a key written
as "{{ var }}" reaches the module (and the API server) as that literal text. This found the
remediation's hold label, sent to Kubernetes as the label key '{{ remediation_hold_label }}'. Build
such a mapping in an expression instead: "{{ {var: value} }}"."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, List

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
SOURCES = sorted(
    [p for part in ("tasks", "handlers", "defaults", "vars") for p in REPO.glob("roles/*/%s/*.yml" % part)]
    + list(REPO.glob("playbooks/**/*.yml"))
)


class _Loader(yaml.SafeLoader):
    """Ansible's tags (!unsafe, !vault) load as their plain value."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: (
    loader.construct_scalar(node) if isinstance(node, yaml.ScalarNode) else None))


def templated_keys(value: Any, where: str) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and "{{" in key:
                yield "%s: key %r" % (where, key)
            yield from templated_keys(item, "%s.%s" % (where, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from templated_keys(item, "%s[%d]" % (where, index))


def test_there_are_files_to_check():
    assert len(SOURCES) > 50


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_mapping_key_is_a_template(path):
    found: List[str] = list(templated_keys(yaml.load(path.read_text(), Loader=_Loader), path.name))
    assert not found, "Ansible does not template mapping keys: %s" % "; ".join(found)
