"""The alert rules of roles/monitoring/files/gpufleet-alerts.yml, checked by Prometheus's promtool.

`promtool check rules` parses the file as Prometheus does; `promtool test rules` runs the unit
tests of rules_test.yml (series in, alerts with labels and annotations out). The structural tests
keep that file complete: every alert fires in one test and stays silent in another, and every
firing alert names its node, which the self-healing receiver acts on.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
RULES = REPO / "roles" / "monitoring" / "files" / "gpufleet-alerts.yml"
RULES_TEST = Path(__file__).resolve().parent / "rules_test.yml"
RUNBOOKS = REPO / "docs" / "monitoring.md"
SEVERITIES = {"critical", "warning"}


def promtool() -> str:
    path = shutil.which("promtool") or "/usr/bin/promtool"
    if not Path(path).exists():
        pytest.fail("promtool is missing: `make debs` installs Debian's prometheus package")
    return path


def alert_rules():
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def rule_tests():
    return yaml.safe_load(RULES_TEST.read_text())["tests"]


def test_promtool_check_rules():
    done = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: %d rules found" % len(alert_rules()) in done.stdout


def test_promtool_unit_tests():
    # promtool resolves rule_files relative to the test file.
    done = subprocess.run([promtool(), "test", "rules", str(RULES_TEST)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_rules_test_loads_the_role_file():
    rule_files = yaml.safe_load(RULES_TEST.read_text())["rule_files"]
    assert [(RULES_TEST.parent / path).resolve() for path in rule_files] == [RULES.resolve()]


@pytest.mark.parametrize("alert", [rule["alert"] for rule in alert_rules()])
def test_every_alert_has_a_firing_and_a_silent_test(alert):
    cases = [case for test in rule_tests() for case in test["alert_rule_test"] if case["alertname"] == alert]
    firing = [case for case in cases if case.get("exp_alerts")]
    silent = [case for case in cases if not case.get("exp_alerts")]
    assert firing, "%s: no test in %s where it fires" % (alert, RULES_TEST.name)
    assert silent, "%s: no test in %s where it must stay silent (exp_alerts: [])" % (alert, RULES_TEST.name)


def fleet_wide(rule) -> bool:
    """An alert about the whole fleet (scope="fleet"): it names no node, and the Alertmanager
    configurations route it away from the remediation webhook."""
    return rule["labels"].get("scope") == "fleet"


FLEET_ALERTS = {rule["alert"] for rule in alert_rules() if fleet_wide(rule)}


def test_every_expected_alert_names_its_node():
    for test in rule_tests():
        for case in test["alert_rule_test"]:
            for expected in case.get("exp_alerts") or []:
                if case["alertname"] in FLEET_ALERTS:
                    assert "node" not in expected["exp_labels"] and expected["exp_labels"]["scope"] == "fleet"
                    continue
                assert expected["exp_labels"].get("node"), "%s: %s fires without a node label" % (
                    test["name"], case["alertname"])


def test_fleet_wide_alerts_are_the_ones_that_cannot_name_a_node():
    assert {"GpufleetAgentsAbsent"} == FLEET_ALERTS
    for rule in alert_rules():
        if fleet_wide(rule):
            # absent() of a selector keeps only its equality labels: no node, whatever the series had.
            assert rule["expr"].startswith("absent("), rule["expr"]
            assert "fleet" in rule["annotations"]["summary"]


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda rule: rule["alert"])
def test_every_alert_is_labelled_and_documented(rule):
    assert rule["labels"]["severity"] in SEVERITIES
    assert rule["labels"]["component"] == "gpufleet"
    assert "for" in rule, "every alert states its `for` (0s included)"
    annotations = rule["annotations"]
    assert set(annotations) == {"summary", "description", "runbook_url"}
    # The receiver and a human both need the node in the text (a fleet-wide alert has none).
    names_node = "$labels.node" in annotations["summary"] and "$labels.node" in annotations["description"]
    assert fleet_wide(rule) or names_node
    # Per-GPU alerts name the GPU; node-level ones list the node's GPUs (or IB ports) in the description;
    # a job's alert names the job.
    assert "$labels.gpu" in annotations["summary"] or "gpufleet_gpu_health" in annotations["description"] \
        or "gpufleet_ib_port_" in annotations["description"] or rule["alert"].startswith("GpufleetAgent") \
        or ("$labels.job_id" in annotations["summary"] and "$labels.job_id" in annotations["description"])
    anchor = annotations["runbook_url"].rsplit("#", 1)[1]
    assert anchor == rule["alert"].lower()
    headings = {re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
                for line in RUNBOOKS.read_text().splitlines() if line.startswith("#")}
    assert anchor in headings, "docs/monitoring.md has no runbook section `### %s`" % rule["alert"]


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda rule: rule["alert"])
def test_every_aggregation_keeps_the_node_label(rule):
    # An aggregation that drops `node` would make the alert useless to the receiver.
    assert "without" not in rule["expr"]
    for grouping in re.findall(r"\bby\s*\(([^)]*)\)", rule["expr"]):
        assert "node" in [label.strip() for label in grouping.split(",")], rule["expr"]
