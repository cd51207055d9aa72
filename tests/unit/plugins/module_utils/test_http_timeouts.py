# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Our HTTP callers against a server that accepts and never answers (conftest ``hung_server``): the
drills' Prometheus/Alertmanager reads (chaos/observe.py) and the remediation's notifications
(remediation/notify.py) fail within their timeout, naming the server."""

from __future__ import annotations

import time

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import observe
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import notify

MARGIN = 10.0


def timed(call):
    started = time.monotonic()
    with pytest.raises(GpufleetError) as caught:
        call()
    return time.monotonic() - started, str(caught.value)


def test_prometheus_query_fails_within_its_timeout(hung_server, monkeypatch):
    monkeypatch.setattr(observe, "HTTP_TIMEOUT", 1.0)
    server = "http://%s" % hung_server.address
    elapsed, message = timed(lambda: observe.prometheus_value(server, "up"))
    print("Prometheus query against the hung server: failed after %.2fs" % elapsed)
    assert elapsed < 1.0 + MARGIN, elapsed
    assert server + "/api/v1/query" in message and "timed out" in message, message


def test_alertmanager_read_fails_within_its_timeout(hung_server, monkeypatch):
    monkeypatch.setattr(observe, "HTTP_TIMEOUT", 1.0)
    server = "http://%s" % hung_server.address
    elapsed, message = timed(lambda: observe.firing_alerts(server, "gpu-a-003"))
    assert elapsed < 1.0 + MARGIN, elapsed
    assert server + "/api/v2/alerts" in message, message


def test_http_default_timeout_is_bounded():
    assert 0 < observe.HTTP_TIMEOUT <= 30


def test_notify_fails_within_its_timeout_naming_the_server_not_the_path(hung_server):
    secret_path = "/services/T000/B000/not-a-real-secret"
    url = "http://user:pw@%s%s" % (hung_server.address, secret_path)
    elapsed, message = timed(lambda: notify.post_json(url, {"text": "x"}, timeout=1.0))
    print("webhook post against the hung server: failed after %.2fs" % elapsed)
    assert isinstance(elapsed, float) and elapsed < 1.0 + MARGIN, elapsed
    assert "the webhook (http://%s) cannot be reached" % hung_server.address in message, message
    assert "timed out" in message, message
    assert secret_path not in message and "pw" not in message, message


def test_alert_post_fails_within_its_timeout(hung_server):
    elapsed, message = timed(lambda: notify.post_alerts("http://%s" % hung_server.address, [], timeout=1.0))
    assert elapsed < 1.0 + MARGIN, elapsed
    assert "Alertmanager (http://%s)" % hung_server.address in message, message
