"""Who may start a remediation through the webhook (issue 16, finding 2), without the lab.

The role self_healing (lab backend, a directory of its own) starts the real ansible-rulebook with
its webhook on loopback, configured as a site beyond loopback must be: a bearer token, an HMAC
signature and TLS, all three required at once. The playbook it runs is files/record-trigger.yml,
which checks and decodes its input with the remediation role's own validate tasks and records
each run with its start and end.

Proven here: a request missing any one credential, or sent over plain HTTP, starts nothing; the
trigger's text arrives as data; a flood of alerts never runs more playbooks at once than
self_healing_max_concurrent_actions; a repeat of an alert is dropped within the window, but an
alert that arrives ahead of a real one (another start) does not silence it. The role's
validation refuses a webhook beyond loopback without a credential and TLS, naming the variable.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import os
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, List

import pytest
import yaml
from agent_probe import wait_for
from lab_harness import REPO, VENV_BIN, run_playbook

pytestmark = [pytest.mark.integration]

FILES = Path(__file__).resolve().parent / "files"
PORT = 19587
TOKEN = "ingress-test-token-0123456789abcdef"
HMAC_SECRET = "ingress-test-hmac-secret-0123456789"
MAX_CONCURRENT = 2
LAB_DIR = Path("/var/tmp/gpufleet-pytest-ingress")


def rfc3339(moment: float) -> str:
    return datetime.datetime.fromtimestamp(moment, tz=datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def self_signed(directory: Path) -> Dict[str, Path]:
    cert, key = directory / "tls.crt", directory / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return {"cert": cert, "key": key}


def role_play(directory: Path, settings: Dict[str, Any], check_only: bool = False):
    play = directory / ("validate.yml" if check_only else "play.yml")
    task = ({"ansible.builtin.include_role": {"name": "gpufleet.resilience.self_healing", "tasks_from": "validate"}}
            if check_only else {"ansible.builtin.include_role": {"name": "gpufleet.resilience.self_healing"}})
    play.write_text(yaml.safe_dump([{"name": "Self-healing", "hosts": "localhost", "gather_facts": False,
                                     "tasks": [dict(task, name="Self-healing")]}]))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), ANSIBLE_NOCOLOR="1",
               PATH=str(VENV_BIN) + os.pathsep + os.environ.get("PATH", ""))
    return run_playbook(["-i", str(REPO / "inventories" / "lab"), str(play), "-e", json.dumps(settings)], env,
                        timeout=300)


class Webhook:
    def __init__(self, records: Path, cert: Path, log: Path) -> None:
        self.records = records
        self.context = ssl.create_default_context(cafile=str(cert))
        self.log = log

    def post(self, alerts: List[Dict[str, Any]], token: str = TOKEN, sign: bool = True, scheme: str = "https") -> int:
        body = json.dumps({"version": "4", "status": "firing", "receiver": "gpufleet-self-healing",
                           "alerts": alerts}).encode()
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = "Bearer " + token
        if sign:
            digest = hmac.new(HMAC_SECRET.encode(), body, hashlib.sha256).hexdigest()
            headers["x-hub-signature-256"] = "sha256=" + digest
        request = urllib.request.Request("%s://127.0.0.1:%d/endpoint" % (scheme, PORT), data=body, method="POST",
                                         headers=headers)
        try:
            context = self.context if scheme == "https" else None
            # The webhook answers once ansible-rulebook has queued the events: with the action cap
            # full that waits (its back pressure), so a flood's POST may take a while.
            with urllib.request.urlopen(request, timeout=120, context=context) as answer:
                return answer.status
        except urllib.error.HTTPError as exc:
            return exc.code

    def runs(self) -> List[Dict[str, Any]]:
        found = []
        for path in self.records.glob("*.json"):
            try:
                found.append(json.loads(path.read_text()))
            except ValueError:  # being written
                continue
        return sorted(found, key=lambda run: run["started_at"])


def alert(node: str, starts_at: str, **labels: str) -> Dict[str, Any]:
    return {"status": "firing", "startsAt": starts_at, "fingerprint": hashlib.sha1(node.encode()).hexdigest()[:16],
            "labels": dict({"alertname": "GpuNodeFatal", "component": "gpufleet", "node": node}, **labels),
            "annotations": {"summary": "%s: fatal GPU fault" % node}}


@pytest.fixture(scope="module")
def webhook(tmp_path_factory):
    work = tmp_path_factory.mktemp("ingress")
    records = work / "records"
    records.mkdir()
    tls = self_signed(work)
    if LAB_DIR.exists():
        shutil.rmtree(LAB_DIR)
    settings = {
        "gpufleet_lab_dir": str(LAB_DIR), "self_healing_backend": "lab", "self_healing_source": "alertmanager",
        "self_healing_webhook_port": PORT, "self_healing_webhook_token": TOKEN,
        "self_healing_webhook_hmac_secret": HMAC_SECRET, "self_healing_webhook_certfile": str(tls["cert"]),
        "self_healing_webhook_keyfile": str(tls["key"]), "self_healing_playbook": str(FILES / "record-trigger.yml"),
        "self_healing_max_concurrent_actions": MAX_CONCURRENT, "self_healing_throttle_window": "5 minutes",
        "self_healing_kubeconfig": "", "self_healing_inventory_vars": {"record_dir": str(records), "record_hold_s": 3},
        # No Kubernetes in this lab: nothing for the first responder to watch (its own tests run it).
        "self_healing_first_responder": False,
    }
    try:
        # Inside the try: a bring-up that fails half way has started processes that must stop too.
        up = role_play(work, settings)
        assert up.rc == 0, up.output[-4000:]
        yield Webhook(records, tls["cert"], LAB_DIR / "log" / "self-healing-eda.log")
    finally:
        down = run_playbook(["-i", str(REPO / "inventories" / "lab"), str(REPO / "playbooks" / "lab-down.yml"),
                             "-e", json.dumps({"gpufleet_lab_dir": str(LAB_DIR)})],
                            dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections")), timeout=300)
        assert down.rc == 0, down.output[-3000:]
        shutil.rmtree(LAB_DIR, ignore_errors=True)


def test_every_credential_is_required_and_plain_http_is_refused(webhook):
    now = rfc3339(time.time())
    assert webhook.post([alert("gpu-x-001", now)], token="") == 401
    assert webhook.post([alert("gpu-x-001", now)], token="wrong-token-0123456789") == 401
    assert webhook.post([alert("gpu-x-001", now)], sign=False) in (400, 401)
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        webhook.post([alert("gpu-x-001", now)], scheme="http")
    time.sleep(4)
    assert webhook.runs() == []
    # With all three, over TLS: one run, the text as sent.
    payload = "{{ lookup('pipe', 'id') }}"
    assert webhook.post([alert("gpu-x-001", now, pool=payload)]) == 200
    run = wait_for(webhook.runs, 60, 0.2, what="the authenticated alert's run")[0]
    assert run["node"] == "gpu-x-001" and run["trigger"]["labels"]["pool"] == payload


BAD_NODES = ["{{ lookup('pipe', 'id') }}", "gpu-b-001\n", "gpu-b-001\nx", "../../etc/passwd", "/etc/passwd",
             "-oProxyCommand=id", "GPU-B-001", "", "a" * 300, "gpu b 001", "{{ 'gpu-b-001' }}", "gpu-b-001.", "-gpu"]


def test_a_node_label_that_is_no_node_name_starts_nothing(webhook):
    now = rfc3339(time.time())
    assert webhook.post([alert(bad, now) for bad in BAD_NODES]) == 200
    wait_for(lambda: webhook.log.read_text(errors="replace").count("is not a node name") >= len(BAD_NODES), 30,
             what="a refusal logged per alert")
    time.sleep(3)
    assert not {run["node"] for run in webhook.runs()} & set(BAD_NODES)


def test_a_flood_runs_at_most_the_cap_at_once(webhook):
    before = len(webhook.runs())
    now = rfc3339(time.time())
    nodes = ["gpu-f-%03d" % i for i in range(6)]
    assert webhook.post([alert(node, now) for node in nodes]) == 200
    runs = wait_for(lambda: [r for r in webhook.runs() if r["node"] in nodes] if len(webhook.runs()) >= before + 6
                    else None, 180, 0.5, what="a run per flooded alert")
    assert sorted(r["node"] for r in runs) == nodes
    # Most runs alive at any moment, from their recorded [start, end].
    edges = sorted([(r["started_at"], 1) for r in runs] + [(r["ended_at"], -1) for r in runs])
    alive = most = 0
    for _moment, step in edges:
        alive += step
        most = max(most, alive)
    assert 1 <= most <= MAX_CONCURRENT, runs


def test_a_repeat_is_dropped_but_an_earlier_forgery_does_not_silence_the_real_alert(webhook):
    node = "gpu-s-001"
    forged = rfc3339(time.time() - 60)
    assert webhook.post([alert(node, forged)]) == 200
    wait_for(lambda: [r for r in webhook.runs() if r["node"] == node], 60, 0.2, what="the forged alert's run")
    # Alertmanager's repeat of the same alert (same start): dropped within the window.
    assert webhook.post([alert(node, forged)]) == 200
    # The real fault fires later: its own start, so it runs.
    real = rfc3339(time.time())
    assert webhook.post([alert(node, real)]) == 200
    runs = wait_for(lambda: [r for r in webhook.runs() if r["node"] == node and r["trigger"]["starts_at"] == real],
                    60, 0.2, what="the real alert's run")
    time.sleep(6)
    assert [r["trigger"]["starts_at"] for r in webhook.runs() if r["node"] == node] == [forged, real], runs


@pytest.mark.parametrize("settings, named", [
    ({"self_healing_webhook_host": "10.0.0.5", "self_healing_webhook_token": TOKEN}, "self_healing_webhook_certfile"),
    ({"self_healing_webhook_host": "0.0.0.0", "self_healing_webhook_token": ""}, "self_healing_webhook_token"),
    ({"self_healing_webhook_token": ""}, "self_healing_webhook_token"),
    ({"self_healing_webhook_token": "short"}, "self_healing_webhook_token must be 16"),
    ({"self_healing_webhook_token": "has a space in it 0123456789"}, "self_healing_webhook_token must be 16"),
    ({"self_healing_webhook_token": "", "self_healing_webhook_allow_unauthenticated": True,
      "self_healing_webhook_host": "192.168.1.10"}, "self_healing_webhook_allow_unauthenticated"),
    ({"self_healing_webhook_certfile": "/x.crt"}, "self_healing_webhook_keyfile"),
])
def test_the_validation_refuses_an_open_webhook_naming_the_variable(tmp_path, settings, named):
    base = {"gpufleet_lab_dir": str(tmp_path / "lab"), "self_healing_backend": "systemd",
            "self_healing_source": "alertmanager", "kubernetes_backend": "existing", "self_healing_kubeconfig": "",
            "self_healing_webhook_token": TOKEN}
    done = role_play(tmp_path, dict(base, **settings), check_only=True)
    assert done.rc != 0 and named in done.output, done.output[-3000:]
    assert TOKEN not in done.output
    assert not (tmp_path / "lab").exists()
