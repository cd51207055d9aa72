# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The remediation store's ConfigMaps in memory, behind our own ConfigMapStore interface."""

from __future__ import annotations

import json
from typing import Dict, Optional, Tuple

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import store as store_module


class MemoryConfigMaps:
    """The ConfigMaps of one namespace, behind our own ConfigMapStore interface."""

    def __init__(self) -> None:
        self.maps: Dict[str, Dict[str, str]] = {}
        self.versions = 0

    def store(self, _core, _namespace, name):
        maps = self

        class Store:
            def __init__(self) -> None:
                self.name = name

            def read(self) -> Tuple[Dict[str, str], Optional[str]]:
                return (dict(maps.maps[name]), "1") if name in maps.maps else ({}, None)

            def read_json(self, key, default=None):
                data, _version = self.read()
                return json.loads(data[key]) if key in data else default

            def update(self, change, write=True):
                data, _version = self.read()
                new, answer = change(dict(data))
                if write and new is not None:
                    maps.maps[name] = dict(new)
                return answer

            def delete(self) -> bool:
                return maps.maps.pop(name, None) is not None

        return Store()


@pytest.fixture
def configmaps(monkeypatch) -> MemoryConfigMaps:
    memory = MemoryConfigMaps()
    monkeypatch.setattr(store_module, "ConfigMapStore", memory.store)
    return memory
