# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The timeouts of every Kubernetes API call a module makes (module_utils/kube/client.py)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  kube_connect_timeout:
    description:
      - Seconds to wait for the Kubernetes API server to accept the connection (and finish the TLS
        handshake) on each API call.
      - A connection error is retried once; a call that times out is not.
      - Between 0 (excluded) and 3600.
    type: float
    default: 5
  kube_read_timeout:
    description:
      - Seconds to wait for the Kubernetes API server's answer on each API call. A server that accepts
        the connection and never answers fails the task after this long, with an error that names the
        server; the call is not retried.
      - A watch waits its own C(timeoutSeconds) plus 30 seconds instead.
      - Between 0 (excluded) and 3600.
    type: float
    default: 30
"""
