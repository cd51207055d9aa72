# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Issue 16, finding 10: the AWX plan printed the webhooks' URLs and bearer headers at -v.

The real playbook against the test emulator of the AWX API (as test_awx_drills_emulated.py): with
-vvv nothing shows a webhook's URL or its Authorization header, and a bad value is named by its
field without being shown."""

from __future__ import annotations

import pytest
from test_awx_drills_emulated import HOOK_SECRET, apply, emulator, settings  # noqa: F401 pylint: disable=unused-import

pytestmark = pytest.mark.integration

HOOK_URL = "https://hooks.example.org/drills"


def test_verbose_output_shows_no_webhook_url_or_header(emulator, tmp_path):  # noqa: F811
    result = apply(tmp_path, settings(emulator), "-vvv")
    assert result.rc == 0, result.output[-4000:]
    assert HOOK_SECRET.split()[1] not in result.output
    assert HOOK_URL not in result.output


def test_a_header_with_a_line_break_is_named_not_shown(emulator, tmp_path):  # noqa: F811
    secret = "Bearer s3cr3t-0a1b\r\nX-Injected: 1"
    variables = settings(emulator)
    variables["awx_drills_notifications"][0]["headers"]["Authorization"] = secret
    result = apply(tmp_path, variables, "-v")
    assert result.rc != 0
    said = " ".join(result.output.split())
    assert "awx_drills_notifications[0].headers.Authorization" in said, result.output[-3000:]
    assert "s3cr3t-0a1b" not in result.output
    assert emulator.requests == []
