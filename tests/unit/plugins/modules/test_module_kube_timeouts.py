# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""A module's entry point against a hung API server: the task fails within kube_read_timeout, and
fail_json names the server (conftest ``hung_server``: accepts, never answers)."""

from __future__ import annotations

import json
import time

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpufleet.resilience.plugins.modules import node_opt_out, node_quarantine, remediation_breaker

MARGIN = 10.0
KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- {name: hung, cluster: {server: "%s"}}
users:
- {name: someone, user: {token: not-a-secret}}
contexts:
- {name: hung, context: {cluster: hung, user: someone}}
current-context: hung
"""


def run_main(module, args, capsys):
    started = time.monotonic()
    with patch_module_args(args), pytest.raises(SystemExit):
        module.main()
    return time.monotonic() - started, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("module, args", [(node_opt_out, {"name": "gpu-a-003"}),
                                          (node_quarantine, {"name": "gpu-a-003"}),
                                          (remediation_breaker, {"state": "read"})])
def test_module_fails_within_its_read_timeout_naming_the_server(module, args, hung_server, tmp_path, capsys):
    server = "http://%s" % hung_server.address
    kubeconfig = tmp_path / "hung.kubeconfig"
    kubeconfig.write_text(KUBECONFIG % server)
    elapsed, result = run_main(module, dict(args, kubeconfig=str(kubeconfig), kube_connect_timeout=2,
                                            kube_read_timeout=1.5), capsys)
    print("%s against the hung server: failed after %.2fs" % (module.__name__, elapsed))
    assert result.get("failed"), result
    assert "exception" not in result, result.get("exception")  # fail_json, not a traceback
    assert elapsed < 1.5 + MARGIN, "%.1fs: the module was not bounded by kube_read_timeout" % elapsed
    assert "Kubernetes API server %s" % server in result["msg"], result["msg"]
    assert "read timeout 1.5 s" in result["msg"] and "Read timed out" in result["msg"], result["msg"]


def test_a_bad_timeout_is_refused_by_name(tmp_path, capsys):
    _elapsed, result = run_main(node_opt_out, {"name": "gpu-a-003", "kubeconfig": str(tmp_path / "none"),
                                               "kube_read_timeout": 0}, capsys)
    assert result.get("failed") and result.get("field") == "kube_read_timeout", result
