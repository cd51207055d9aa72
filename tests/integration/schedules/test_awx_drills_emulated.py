"""playbooks/awx-drills.yml: the real playbook and the real awx.awx modules, against the TEST EMULATOR of
the AWX API (tests/integration/awx_emulator.py; no AWX can run here). The emulator records every request,
so these tests assert what AWX would be sent: creates, then nothing on a second run, nothing at all on bad
input, and no writes in check mode. What a real AWX adds is in docs/scheduling.md.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
import yaml
from awx_emulator import API, AwxEmulator, render_webhook_body
from lab_harness import REPO, VENV_BIN, PlaybookResult, run_playbook

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import experiments

pytestmark = pytest.mark.integration

TOKEN = "emulator-token-7c1e"
HOOK_SECRET = "Bearer hook-secret-93af"
PASSWORD = "drill-admin-pw-5d2b"
SCM_URL = "https://git.example.org/gpufleet/resilience.git"
XID_RRULE = "DTSTART;TZID=Europe/Berlin:20270104T030000 RRULE:FREQ=WEEKLY;BYDAY=MO"
BURN_RRULE = "DTSTART:20270101T010000Z RRULE:FREQ=DAILY;INTERVAL=1"


def drills() -> List[Dict[str, Any]]:
    return [
        {"name": "xid79-weekly", "experiment": "gpu_xid", "target": "gpu-a-003", "dry_run": False,
         "rrule": XID_RRULE, "notify": ["ops-webhook"], "params": {"xid": 79}},
        {"name": "burn-nightly", "experiment": "gpu_burn", "target": "gpufleet.io/pool=gpu-a", "dry_run": True,
         "rrule": BURN_RRULE, "notify": []},
    ]


def settings(emulator: AwxEmulator, **overrides: Any) -> Dict[str, Any]:
    values = {
        "awx_drills_controller_host": emulator.url,
        "awx_drills_controller_oauthtoken": TOKEN,
        "awx_drills_validate_certs": False,
        "awx_drills_project_scm_url": SCM_URL,
        "awx_drills_credential": "gpufleet-drills-ssh",
        "awx_drills_inventory_variables": {"kubernetes_kubeconfig": "/etc/gpufleet/kubeconfig"},
        "awx_drills_notifications": [{"name": "ops-webhook", "url": "https://hooks.example.org/drills",
                                      "headers": {"Content-Type": "application/json", "Authorization": HOOK_SECRET}}],
        "awx_drills_drills": drills(),
    }
    values.update(overrides)
    return values


def apply(tmp_path: Path, variables: Dict[str, Any], *args: str) -> PlaybookResult:
    extra = tmp_path / ("vars-%d.json" % time.monotonic_ns())
    extra.write_text(json.dumps(variables))
    env = dict(os.environ, PATH=str(VENV_BIN) + os.pathsep + os.environ.get("PATH", ""),
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", LC_ALL="C.UTF-8")
    return run_playbook([str(REPO / "playbooks" / "awx-drills.yml"), "-e", "@%s" % extra, *args], env, timeout=180)


@pytest.fixture
def emulator() -> Iterator[AwxEmulator]:
    # What a fresh AWX has, plus the credential the site made for the drills.
    awx = AwxEmulator(token=TOKEN, users={"drill-admin": PASSWORD}).start()
    awx.seed("organizations", name="Default")
    machine = awx.seed("credential_types", name="Machine", kind="ssh")
    awx.seed("credentials", name="gpufleet-drills-ssh", credential_type=machine["id"], organization=1)
    try:
        yield awx
    finally:
        awx.stop()


def test_bad_input_fails_naming_each_bad_field_before_any_write(emulator, tmp_path):
    bad = drills()
    bad[0]["rrule"] = "RRULE:FREQ=WEEKLY;BYDAY=MO"  # no DTSTART
    bad[1]["experiment"] = "gpu_zap"
    result = apply(tmp_path, settings(emulator, awx_drills_drills=bad))
    assert result.rc != 0
    said = " ".join(result.output.replace("''", "'").split())  # the YAML callback folds and quotes the message
    assert "awx_drills_drills[0].rrule: needs exactly one DTSTART" in said, result.output[-3000:]
    assert "awx_drills_drills[1].experiment: unknown experiment 'gpu_zap'" in said, result.output[-3000:]
    assert emulator.requests == []

    # A credential that does not exist is named, after lookups only: it is referenced, never created.
    missing = apply(tmp_path, settings(emulator, awx_drills_credential="no-such-credential"))
    assert missing.rc != 0
    said = " ".join(missing.output.split())
    assert 'awx_drills_credential: no credential named "no-such-credential" found' in said, missing.output[-3000:]
    assert emulator.requests and emulator.writes() == []


def test_check_mode_on_a_new_awx_sends_no_writes(emulator, tmp_path):
    # Username and password this time: the run mints one token (POST /tokens/) and releases it at the end.
    result = apply(tmp_path, settings(emulator, awx_drills_controller_oauthtoken="",
                                      awx_drills_controller_username="drill-admin",
                                      awx_drills_controller_password=PASSWORD), "--check")
    assert result.rc == 0, result.output[-4000:]
    assert emulator.writes() == []
    assert result.changed >= 3  # project, inventory, notification template would be created
    assert "check mode: would create gpufleet drill: xid79-weekly, gpufleet drill: burn-nightly" in result.output
    assert {r.auth for r in emulator.requests} <= {"bearer", "basic"}
    minted = [r for r in emulator.requests if r.method == "POST" and r.path == API + "tokens/"]
    assert minted and emulator.tokens == {TOKEN}  # every token minted was released
    assert PASSWORD not in result.output and HOOK_SECRET not in result.output
    assert emulator.objects.get("projects") is None


def test_first_run_creates_everything_then_nothing_changes(emulator, tmp_path):
    started = time.monotonic()
    first = apply(tmp_path, settings(emulator))
    assert first.rc == 0, first.output[-4000:]
    assert "You are using the awx version" not in first.output  # the product headers satisfied awx.awx
    assert HOOK_SECRET not in first.output and TOKEN not in first.output
    gets = [(r.path, r.query) for r in emulator.requests if r.method == "GET"]
    assert (API + "credentials/", {"name": "gpufleet-drills-ssh"}) in gets  # the reference, looked up
    assert not [r for r in emulator.writes() if r.path.startswith(API + "credentials/")]  # never created

    project = emulator.find("projects", "gpufleet drill: project")
    assert project and {k: project[k] for k in ("scm_type", "scm_url", "scm_branch", "organization",
                                                "scm_update_on_launch")} == {
        "scm_type": "git", "scm_url": SCM_URL, "scm_branch": "main", "organization": 1, "scm_update_on_launch": True}
    inventory = emulator.find("inventories", "gpufleet drill: inventory")
    assert inventory and inventory["organization"] == 1
    assert json.loads(inventory["variables"]) == {"kubernetes_kubeconfig": "/etc/gpufleet/kubeconfig"}

    hook = emulator.find("notification_templates", "gpufleet drill: ops-webhook")
    assert hook and hook["notification_type"] == "webhook"
    assert hook["notification_configuration"]["url"] == "https://hooks.example.org/drills"
    assert hook["notification_configuration"]["headers"]["Authorization"] == HOOK_SECRET
    # The body AWX renders posts the drill report's summary (set_stats in roles/chaos_drill) ...
    summary = "drill d-1 gpu_xid on gpu-a-003: passed; detect 2.1s alert 4.3s quarantine 19.8s recover 45.2s; 0 gaps"
    job = {"id": 7, "name": "gpufleet drill: xid79-weekly", "status": "successful",
           "artifacts": {"gpufleet_drill": {"id": "d-1", "result": "passed", "summary": summary}}}
    posted = render_webhook_body(hook["messages"]["success"]["body"], job)
    assert posted == {"job": 7, "template": "gpufleet drill: xid79-weekly", "status": "successful",
                      "url": "https://awx.invalid/#/jobs/playbook/7", "drill": "d-1", "result": "passed",
                      "summary": summary}
    # ... and says so when the job failed before the drill wrote one.
    failed = render_webhook_body(hook["messages"]["error"]["body"], dict(job, status="failed", artifacts={}))
    assert failed["result"] == "unknown" and failed["summary"].startswith("no drill report")

    names = experiments.names()
    credential = emulator.find("credentials", "gpufleet-drills-ssh")
    for drill in drills():
        template = emulator.find("job_templates", "gpufleet drill: " + drill["name"])
        assert template, drill["name"]
        assert {k: template[k] for k in ("playbook", "project", "inventory", "job_type", "survey_enabled",
                                         "allow_simultaneous", "organization")} == {
            "playbook": "playbooks/drill.yml", "project": project["id"], "inventory": inventory["id"],
            "job_type": "run", "survey_enabled": True, "allow_simultaneous": False, "organization": 1}
        assert json.loads(template["extra_vars"]) == ({"params": drill["params"]} if drill.get("params") else {})
        survey = {q["variable"]: q for q in emulator.surveys[template["id"]]["spec"]}
        assert list(survey) == ["target", "experiment", "dry_run"]
        assert (survey["target"]["type"], survey["target"]["default"], survey["target"]["required"]) == (
            "text", drill["target"], True)
        assert (survey["experiment"]["type"], survey["experiment"]["choices"], survey["experiment"]["default"]) == (
            "multiplechoice", names, drill["experiment"])
        assert (survey["dry_run"]["type"], survey["dry_run"]["choices"], survey["dry_run"]["default"]) == (
            "multiplechoice", ["false", "true"], "true" if drill["dry_run"] else "false")
        posted_survey = [r.body for r in emulator.requests
                         if r.method == "POST" and r.path == "%sjob_templates/%d/survey_spec/" % (API, template["id"])]
        assert posted_survey == [emulator.surveys[template["id"]]]
        assert emulator.associated("job_templates", template["id"], "credentials") == [credential["id"]]
        expected_hooks = [hook["id"]] if drill["notify"] else []
        for event in ("success", "error"):
            relation = "notification_templates_" + event
            assert emulator.associated("job_templates", template["id"], relation) == expected_hooks, (drill, event)

        schedules = [s for s in emulator.objects["schedules"].values() if s["unified_job_template"] == template["id"]]
        assert len(schedules) == 1
        assert (schedules[0]["name"], schedules[0]["rrule"], schedules[0]["enabled"]) == (
            "gpufleet drill: " + drill["name"], drill["rrule"], True)
        assert schedules[0]["extra_data"] == {"target": drill["target"], "experiment": drill["experiment"],
                                              "dry_run": "true" if drill["dry_run"] else "false"}
    first_seconds = time.monotonic() - started

    # Second run: the same description, so nothing is written and nothing reports a change.
    before = len(emulator.requests)
    second = apply(tmp_path, settings(emulator))
    assert second.rc == 0, second.output[-4000:]
    assert second.changed == 0, second.output[-4000:]
    assert [(r.method, r.path) for r in emulator.requests[before:] if r.method != "GET"] == []

    print("first run (and its checks) %.1fs; both runs %.1fs" % (first_seconds, time.monotonic() - started))


KUBE_TOKEN = "remediation-sa-token-4e1f9a"


def test_the_remediation_job_template_the_controller_rulebook_launches(emulator, tmp_path):
    kube_type = emulator.seed("credential_types", name="OpenShift or Kubernetes API Bearer Token", kind="cloud")
    slurm = emulator.seed("credentials", name="slurm-login-ssh", credential_type=1, organization=1)
    remediation = dict(awx_drills_remediation_enabled=True, awx_drills_remediation_kube_host="https://10.0.0.1:6443",
                       awx_drills_remediation_kube_token=KUBE_TOKEN,
                       awx_drills_remediation_credentials=["slurm-login-ssh"],
                       awx_drills_remediation_inventory_variables={"remediation_provider": "clusterapi"})

    # Each bad setting is named before any request; a missing credential after lookups only.
    for bad, named in ((dict(awx_drills_remediation_kube_host="http://10.0.0.1:6443"),
                        "awx_drills_remediation_kube_host"),
                       (dict(awx_drills_remediation_kube_token=""), "awx_drills_remediation_kube_token is required"),
                       (dict(awx_drills_remediation_inventory_variables={"remediation_kubeconfig": "/root/admin"}),
                        "must not set a kubeconfig")):
        refused = apply(tmp_path, settings(emulator, **{**remediation, **bad}))
        assert refused.rc != 0 and named in " ".join(refused.output.split()), refused.output[-3000:]
        assert emulator.requests == []
    missing = apply(tmp_path, settings(emulator, **{**remediation, "awx_drills_remediation_credentials": ["nope"]}))
    assert missing.rc != 0
    assert 'awx_drills_remediation_credentials: no credential named ["nope"]' in " ".join(missing.output.split())
    assert emulator.writes() == []

    first = apply(tmp_path, settings(emulator, **remediation))
    assert first.rc == 0, first.output[-4000:]
    assert KUBE_TOKEN not in first.output
    kube = emulator.find("credentials", "gpufleet remediation: kubernetes")
    assert kube and kube["credential_type"] == kube_type["id"]
    assert kube["inputs"] == {"host": "https://10.0.0.1:6443", "bearer_token": KUBE_TOKEN, "verify_ssl": True}
    inventory = emulator.find("inventories", "gpufleet remediation: inventory")
    # The job's Kubernetes access is the credential's K8S_AUTH_* variables, never a kubeconfig.
    assert json.loads(inventory["variables"]) == {"remediation_provider": "clusterapi", "remediation_kubeconfig": ""}
    template = emulator.find("job_templates", "gpufleet remediate node")
    assert {k: template[k] for k in ("playbook", "inventory", "project", "allow_simultaneous", "survey_enabled",
                                     "ask_variables_on_launch", "timeout")} == {
        "playbook": "playbooks/remediate_node.yml", "inventory": inventory["id"],
        "project": emulator.find("projects", "gpufleet drill: project")["id"], "allow_simultaneous": True,
        "survey_enabled": True, "ask_variables_on_launch": False, "timeout": 7200}
    associated = emulator.associated("job_templates", template["id"], "credentials")
    assert sorted(associated) == sorted([kube["id"], slurm["id"]])
    # The survey admits what the rulebook sends (extensions/eda/rulebooks/gpufleet-remediation-controller.yml).
    rulebook = (REPO / "extensions" / "eda" / "rulebooks" / "gpufleet-remediation-controller.yml").read_text()
    survey = {q["variable"]: q for q in emulator.surveys[template["id"]]["spec"]}
    assert set(survey) == {"remediation_node", "remediation_trigger_encoded"}
    assert all(variable + ":" in rulebook for variable in survey)
    assert 'name: "{{ self_healing_job_template }}"' in rulebook
    rulebook_default = yaml.safe_load((REPO / "roles" / "self_healing" / "defaults" / "main.yml").read_text())
    assert rulebook_default["self_healing_job_template"] == template["name"]

    # Rerun: nothing written (the stored token is not sent again) ...
    before = len(emulator.requests)
    second = apply(tmp_path, settings(emulator, **remediation))
    assert second.rc == 0 and second.changed == 0, second.output[-4000:]
    assert [(r.method, r.path) for r in emulator.requests[before:] if r.method != "GET"] == []
    # ... unless a rotated token is to be sent.
    rotated = apply(tmp_path, settings(emulator, **{**remediation, "awx_drills_remediation_update_secrets": True,
                                                    "awx_drills_remediation_kube_token": "rotated-token-77aa"}))
    assert rotated.rc == 0 and rotated.changed == 1, rotated.output[-4000:]
    stored = emulator.find("credentials", "gpufleet remediation: kubernetes")["inputs"]
    assert stored["bearer_token"] == "rotated-token-77aa"
