# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Telling people: a Slack-compatible webhook, and alerts posted straight to Alertmanager.

The breaker and escalation fire their alerts through Alertmanager's own API (``POST
/api/v2/alerts``) rather than through a metric: the decision is made in a playbook run, not in a
process Prometheus scrapes, and Alertmanager routes, groups and silences these like any other
alert. An alert posted with ``endsAt`` resolves by itself then; each refusal re-posts it, and
``remediation-reset.yml`` resolves it at once.
"""

from __future__ import annotations

import datetime
import json
import urllib.error
import urllib.parse
from typing import Any, Dict, List, Mapping, Optional

from ansible.module_utils.urls import open_url

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError

USER_AGENT = "gpufleet.resilience-remediation"


class NotifyError(GpufleetError):
    """A webhook or Alertmanager refused or could not be reached (the message names the server, never
    the URL's path or credentials: a Slack webhook's path is its secret)."""


def server_of(url: str) -> str:
    """scheme://host[:port] of ``url``, without credentials, path or query."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = "[%s]" % host
    try:
        port = parts.port
    except ValueError:
        port = None
    return "%s://%s%s" % (parts.scheme, host, ":%d" % port if port else "")


def post_json(url: str, payload: Any, timeout: float = 10.0, what: str = "the webhook") -> int:
    """POST ``payload`` as JSON; ``timeout`` bounds the connection and each read (a server that accepts
    and never answers fails the call after it)."""
    what = "%s (%s)" % (what, server_of(url))
    try:
        answer = open_url(url, data=json.dumps(payload), method="POST", timeout=timeout, http_agent=USER_AGENT,
                          headers={"Content-Type": "application/json"})
    except urllib.error.HTTPError as exc:
        raise NotifyError("%s answered HTTP %d" % (what, exc.code)) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise NotifyError("%s cannot be reached: %s" % (what, reason)) from None
    with answer:
        return answer.status


def rfc3339(moment: float) -> str:
    return datetime.datetime.fromtimestamp(moment, tz=datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def alert(
    name: str,
    labels: Mapping[str, str],
    summary: str,
    description: str,
    now: float,
    lasts_s: float = 3600.0,
    resolved: bool = False,
) -> Dict[str, Any]:
    """One alert for Alertmanager's v2 API; ``resolved`` ends it now."""
    return {
        "labels": {"alertname": name, "severity": "critical", "component": "gpufleet-remediation", **dict(labels)},
        "annotations": {
            "summary": summary,
            "description": description,
            "runbook_url": "https://example.invalid/gpufleet/resilience/docs/remediation.md#%s" % name.lower(),
        },
        "startsAt": rfc3339(now),
        "endsAt": rfc3339(now if resolved else now + lasts_s),
    }


def post_alerts(alertmanager_url: str, alerts: List[Dict[str, Any]], timeout: float = 10.0) -> int:
    return post_json(alertmanager_url.rstrip("/") + "/api/v2/alerts", alerts, timeout, what="Alertmanager")


def slack_payload(text: str, fields: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """A payload Slack's incoming webhooks (and Mattermost's, Rocket.Chat's...) accept: ``text`` first."""
    payload: Dict[str, Any] = {"text": text, "username": "gpufleet"}
    if fields:
        payload["attachments"] = [
            {
                "fields": [
                    {"title": key, "value": str(value), "short": len(str(value)) < 40} for key, value in fields.items()
                ]
            }
        ]
    return payload
