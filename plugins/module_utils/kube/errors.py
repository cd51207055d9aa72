# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Kubernetes errors, without importing the ``kubernetes`` package (the agent's light client uses them)."""

from __future__ import annotations

from typing import Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError


class KubeError(GpufleetError):
    """A Kubernetes API call failed; ``status`` is the HTTP status when there was one."""

    def __init__(self, message: str, status: Optional[int] = None) -> None:
        super().__init__(message)
        self.status = status


def api_error(exc: Exception, what: str) -> KubeError:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None) or str(exc)
    return KubeError("%s: %s%s" % (what, reason, " (HTTP %s)" % status if status else ""), status)
