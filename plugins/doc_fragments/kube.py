# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""How a module reaches the Kubernetes API server: the kubernetes.core connection options with their
K8S_AUTH_* environment variables, and the timeouts of every call (module_utils/kube/client.py)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path of the kubeconfig. Not given - E(K8S_AUTH_KUBECONFIG); else, unless O(host) and O(api_key)
        are set, the in-cluster service account inside a Pod, and elsewhere E(KUBECONFIG) or
        C(~/.kube/config), as C(kubectl) reads them.
    type: path
  context:
    description:
      - Context in the kubeconfig; its current context when not given. Not given - E(K8S_AUTH_CONTEXT).
    type: str
  host:
    description:
      - URL of the API server, for example V(https://k8s.example.com:6443). With O(api_key) and no
        kubeconfig, nothing else is read; with a kubeconfig, it replaces the kubeconfig's server.
      - Not given - E(K8S_AUTH_HOST), as AWX's Kubernetes credential injects it.
    type: str
  api_key:
    description:
      - Bearer token for the API server (a service account token). Not given - E(K8S_AUTH_API_KEY).
      - Never logged or shown in an error.
    type: str
  ca_cert:
    description:
      - CA certificate file that signed the API server's certificate. Not given - E(K8S_AUTH_SSL_CA_CERT).
    type: path
    aliases: [ssl_ca_cert]
  validate_certs:
    description:
      - Whether to verify the API server's certificate (the kubeconfig's setting when not given; verified
        when there is none). Not given - E(K8S_AUTH_VERIFY_SSL).
    type: bool
    aliases: [verify_ssl]
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
