"""Where the lab's Alertmanager sends each kind of gpufleet alert, asked of amtool with the
configuration the monitoring role wrote for the session lab (the one Alertmanager runs on)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.lab]


def routed_to(config: Path, **labels: str) -> str:
    amtool = shutil.which("amtool") or "/usr/bin/amtool"
    if not Path(amtool).exists():
        pytest.fail("amtool is missing: `make debs` installs Debian's prometheus-alertmanager package")
    done = subprocess.run([amtool, "config", "routes", "test", "--config.file", str(config),
                           *("%s=%s" % item for item in sorted(labels.items()))],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()


def test_node_alerts_go_to_the_remediation_webhook_and_fleet_alerts_do_not(lab):
    config = lab.lab_dir / "monitoring" / "alertmanager" / "alertmanager.yml"
    assert routed_to(config, alertname="GpuNodeFatal", component="gpufleet", node="gpu-a-001",
                     severity="critical") == "gpufleet-self-healing"
    assert routed_to(config, alertname="GpufleetAgentsAbsent", component="gpufleet", scope="fleet",
                     severity="critical", job="gpufleet-agent") == "gpufleet-fleet"
