# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""State in a ConfigMap, changed with compare-and-swap: the breaker, the escalation history and a
remediation's progress live where the cluster keeps state, never only in a process.

``update(change)`` reads the ConfigMap, calls the pure ``change(data) -> (new_data, answer)`` and
writes the result with a *replace* that carries the ``resourceVersion`` it read. When another
writer got there first the API server answers 409 Conflict; we read again and call ``change``
again on the fresh data. So two remediations racing for the breaker's last slot are serialised by
the API server: the second sees the first's slot. A missing ConfigMap is created (409
AlreadyExists when two create it at once: read again, as above).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, Optional, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import ApiException, KubeError, api_error

DEFAULT_ATTEMPTS = 16
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpufleet.resilience"}

Data = Dict[str, str]
Change = Callable[[Data], Tuple[Optional[Data], Any]]


class ConfigMapStore:
    def __init__(self, core_v1: Any, namespace: str, name: str, attempts: int = DEFAULT_ATTEMPTS) -> None:
        self.core_v1 = core_v1
        self.namespace = namespace
        self.name = name
        self.attempts = attempts

    def read(self) -> Tuple[Data, Optional[str]]:
        """The data and the resourceVersion; ({}, None) when the ConfigMap does not exist."""
        try:
            found = self.core_v1.read_namespaced_config_map(self.name, self.namespace)
        except ApiException as exc:
            if getattr(exc, "status", None) == 404:
                return {}, None
            raise api_error(exc, "read ConfigMap %s/%s" % (self.namespace, self.name)) from exc
        return dict(found.data or {}), found.metadata.resource_version

    def read_json(self, key: str, default: Any = None) -> Any:
        data, _version = self.read()
        return json.loads(data[key]) if key in data else default

    def update(self, change: Change, write: bool = True) -> Any:
        """Apply ``change`` atomically; returns its answer. ``write=False`` computes it only."""
        for _attempt in range(self.attempts):
            data, version = self.read()
            new_data, answer = change(dict(data))
            if not write or new_data is None or (version is not None and new_data == data):
                return answer
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "data": new_data,
                "metadata": {"name": self.name, "namespace": self.namespace, "labels": dict(MANAGED_BY)},
            }
            try:
                if version is None:
                    self.core_v1.create_namespaced_config_map(self.namespace, body)
                else:
                    body["metadata"]["resourceVersion"] = version
                    self.core_v1.replace_namespaced_config_map(self.name, self.namespace, body)
            except ApiException as exc:
                if getattr(exc, "status", None) == 409:
                    continue  # someone else wrote first: recompute on their result
                raise api_error(exc, "write ConfigMap %s/%s" % (self.namespace, self.name)) from exc
            return answer
        raise KubeError(
            "ConfigMap %s/%s changed under us %d times in a row; nothing written"
            % (self.namespace, self.name, self.attempts),
            409,
        )

    def delete(self) -> bool:
        try:
            self.core_v1.delete_namespaced_config_map(self.name, self.namespace)
        except ApiException as exc:
            if getattr(exc, "status", None) == 404:
                return False
            raise api_error(exc, "delete ConfigMap %s/%s" % (self.namespace, self.name)) from exc
        return True
