# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""node_quarantine and node_drain against the lab's real kube-apiserver, controllers and kwok.

Nothing here fakes Kubernetes: the 409 of a stale write, the node lifecycle controller's cordon
taint, the 429 of a PodDisruptionBudget (computed by the real disruption controller), the
Deployment, DaemonSet and Job controllers, and kwok removing an evicted pod are all the real
thing. The modules run through real ``ansible`` (ad-hoc), as the remediation playbook runs them.

The tests use nodes of their own (kwok nodes outside every pool), so the session lab's GPU nodes
and the tests that count them never see a cordon or a taint from here; everything created is
removed at the end.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from datetime import datetime
from typing import Any, Callable, Dict, Optional

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from lab_harness import REPO, VENV_BIN

from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.nodes import MERGE_PATCH, NodeWriter
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.quarantine import (
    QUARANTINE_ANNOTATION,
    QuarantineSpec,
    quarantine_node,
)

pytestmark = [pytest.mark.integration, pytest.mark.lab]

NAMESPACE = "gpufleet-kube-modules"
PLAIN, OTHERS_CORDON, RACE, DRAIN, PDB = "kq-plain", "kq-cordoned", "kq-race", "kd-drain", "kd-pdb"
NODES = [PLAIN, OTHERS_CORDON, RACE, DRAIN, PDB]
OUR_TAINT = {"key": "gpufleet.io/gpu-unhealthy", "effect": "NoSchedule"}
MAINTENANCE = {"key": "example.com/maintenance", "value": "now", "effect": "NoSchedule"}
CORDON_TAINT = "node.kubernetes.io/unschedulable"
_RESULT = re.compile(r"^localhost \| (CHANGED|SUCCESS|FAILED!) => ", re.M)


def wait_for(what: str, condition: Callable[[], Any], timeout: float = 60, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(every)


def run_module(lab, module: str, args: Dict[str, Any], check: bool = False, diff: bool = False) -> Dict[str, Any]:
    """``ansible localhost -m gpufleet.resilience.MODULE -a JSON``; the module's result, with the raw output."""
    argv = [str(VENV_BIN / "ansible"), "localhost", "-m", "gpufleet.resilience." + module, "-a", json.dumps(args)]
    argv += ["--check"] if check else []
    argv += ["--diff"] if diff else []
    env = dict(lab.env(), ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    output = done.stdout + done.stderr
    found = _RESULT.search(output)
    assert found, output[-3000:]
    result, _end = json.JSONDecoder().raw_decode(output, found.end())
    # The callback prints "failed" in the status word, not in the result.
    result["failed"] = found.group(1) == "FAILED!"
    result["_rc"], result["_output"] = done.returncode, output
    assert (done.returncode != 0) == result["failed"], output[-3000:]
    return result


def quarantine(lab, name: str, check: bool = False, diff: bool = False, **args: Any) -> Dict[str, Any]:
    return run_module(lab, "node_quarantine", dict(args, name=name, kubeconfig=str(lab.kubeconfig)), check, diff)


def drain(lab, name: str, check: bool = False, **args: Any) -> Dict[str, Any]:
    return run_module(lab, "node_drain", dict(args, name=name, kubeconfig=str(lab.kubeconfig)), check)


def state(api, name: str) -> Dict[str, Any]:
    """What a quarantine may touch (not the resourceVersion: kwok's heartbeat changes it now and then)."""
    node = api.api_client.sanitize_for_serialization(api.read_node(name))
    taints = [{k: v for k, v in t.items() if k != "timeAdded"} for t in node["spec"].get("taints") or []]
    annotations = dict(node["metadata"].get("annotations") or {})
    annotations.pop("node.alpha.kubernetes.io/ttl", None)  # the TTL controller's, set when it gets to the node
    return {
        "unschedulable": bool(node["spec"].get("unschedulable")),
        "taints": taints,
        "annotations": annotations,
    }


def settled(api, name: str) -> Dict[str, Any]:
    """The node's state once the node lifecycle controller has caught up with the cordon (its own taint)."""

    def done() -> Optional[Dict[str, Any]]:
        now = state(api, name)
        has_cordon_taint = any(t["key"] == CORDON_TAINT for t in now["taints"])
        return now if has_cordon_taint == now["unschedulable"] else None

    return wait_for("node %s to settle" % name, done, timeout=30)


@pytest.fixture(scope="module")
def api(lab):
    """Kwok nodes of this test module and its namespace; removed afterwards, nodes uncordoned first."""
    core = lab.kube()
    for name in NODES:
        core.create_node(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {"type": "kwok", "kubernetes.io/hostname": name},
                    "annotations": {"kwok.x-k8s.io/node": "fake"},
                },
            }
        )
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    try:
        for name in NODES:
            # kwok makes it Ready and the node lifecycle controller lifts the not-ready taint
            # that the API server put on it at creation.
            wait_for("node %s ready" % name, lambda n=name: ready(core, n) and not state(core, n)["taints"])
        wait_for("default service account", lambda: service_account(core))
        yield core
    finally:
        try:
            core.delete_namespace(NAMESPACE)
        except ApiException as exc:
            if exc.status != 404:
                raise
        for name in NODES:
            try:
                core.delete_node(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise


def ready(core, name: str) -> bool:
    conditions = core.read_node(name).status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def service_account(core) -> bool:
    try:
        core.read_namespaced_service_account("default", NAMESPACE)
    except ApiException:
        return False
    return True


def pod_spec(node: str, app: str) -> Dict[str, Any]:
    return {
        "metadata": {"labels": {"app": app}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "registry.example/none:1"}],
        },
    }


def pods_on(api, node: str) -> Dict[str, Any]:
    return {
        "%s/%s" % (p.metadata.namespace, p.metadata.name): p
        for p in api.list_pod_for_all_namespaces(field_selector="spec.nodeName=" + node).items
    }


def test_quarantine_climbs_the_ladder_and_the_rollback_restores_the_node_exactly(lab, api):
    before = settled(api, PLAIN)
    args = {"reason": "gpufleet: Xid79 GPU-0 (remediation r-kq-1)", "remediation_id": "r-kq-1"}
    # 1. check mode reports the change (and the diff) ...
    checked = quarantine(lab, PLAIN, check=True, diff=True, **args)
    assert checked["changed"] and not checked["failed"], checked["_output"][-3000:]
    assert '+    "unschedulable": true' in checked["_output"]
    assert checked["quarantine"]["cordoned_by"] == "gpufleet"
    # 2. ... and changes nothing (the server's dry run stores nothing).
    assert state(api, PLAIN) == before
    # 3. the real run.
    applied = quarantine(lab, PLAIN, **args)
    assert applied["changed"] and applied["attempts"] >= 1
    assert applied["node"] == {"name": PLAIN, "unschedulable": True, "taints": [OUR_TAINT]}
    now = settled(api, PLAIN)
    assert now["unschedulable"]
    assert OUR_TAINT in now["taints"]
    record = json.loads(now["annotations"][QUARANTINE_ANNOTATION])
    assert record == applied["quarantine"]
    assert record["reason"] == args["reason"] and record["remediation_id"] == "r-kq-1"
    assert record["cordoned_by"] == "gpufleet" and record["tainted_by"] == "gpufleet"
    assert datetime.strptime(record["since"], "%Y-%m-%dT%H:%M:%SZ")
    assert now["annotations"]["kwok.x-k8s.io/node"] == "fake"
    # 4. check mode and 5. the real run again: nothing to do (the controller's cordon taint is not ours).
    for check in (True, False):
        again = quarantine(lab, PLAIN, check=check, **args)
        assert not again["changed"], again["_output"][-3000:]
    assert state(api, PLAIN) == now
    # The rollback climbs the same ladder.
    release_check = quarantine(lab, PLAIN, check=True, state="absent")
    assert release_check["changed"] and release_check["quarantine"] is None
    assert state(api, PLAIN) == now
    released = quarantine(lab, PLAIN, state="absent")
    assert released["changed"] and released["node"]["unschedulable"] is False
    for check in (True, False):
        assert not quarantine(lab, PLAIN, check=check, state="absent")["changed"]
    # Exactly the node before: no cordon, no taint (the controller lifts its own), no annotation.
    assert settled(api, PLAIN) == before


def test_the_rollback_leaves_a_cordon_and_taints_someone_else_made(lab, api):
    api.patch_node(OTHERS_CORDON, {"spec": {"unschedulable": True, "taints": [MAINTENANCE]}}, _content_type=MERGE_PATCH)
    try:
        before = settled(api, OTHERS_CORDON)
        applied = quarantine(lab, OTHERS_CORDON, reason="gpufleet: Xid79", remediation_id="r-kq-2")
        assert applied["changed"]
        assert applied["quarantine"]["cordoned_by"] == "already"
        during = state(api, OTHERS_CORDON)
        assert MAINTENANCE in during["taints"] and OUR_TAINT in during["taints"]
        released = quarantine(lab, OTHERS_CORDON, state="absent")
        assert released["changed"] and released["node"]["unschedulable"] is True
        after = state(api, OTHERS_CORDON)
        assert after["unschedulable"], "someone else's cordon must stay"
        assert after == before
    finally:
        api.patch_node(OTHERS_CORDON, {"spec": {"unschedulable": None, "taints": None}}, _content_type=MERGE_PATCH)
        settled(api, OTHERS_CORDON)


def test_a_taint_added_between_our_read_and_our_write_survives_the_quarantine(lab, api):
    other = lab.kube()  # another writer with its own connection (an operator, the health agent)

    class RacingApi:
        """The real CoreV1Api; after our first read of the node, another writer taints it for real."""

        def __init__(self) -> None:
            self.reads = 0
            self.api_client = api.api_client

        def read_node(self, name):
            node = api.read_node(name)
            self.reads += 1
            if self.reads == 1:
                other.patch_node(name, {"spec": {"taints": [MAINTENANCE]}}, _content_type=MERGE_PATCH)
            return node

        def __getattr__(self, attr):
            return getattr(api, attr)

    racing = RacingApi()
    try:
        result = quarantine_node(
            NodeWriter(racing), RACE, "present", QuarantineSpec(reason="race", remediation_id="r-race")
        )
        # The first patch carried the resourceVersion of the first read: the API server refused it (409).
        assert result["changed"] and result["attempts"] == 2 and racing.reads == 2
        now = state(api, RACE)
        assert now["taints"][:2] == [MAINTENANCE, OUR_TAINT]
        assert json.loads(now["annotations"][QUARANTINE_ANNOTATION])["remediation_id"] == "r-race"
        # The rollback keeps the other writer's taint.
        assert quarantine(lab, RACE, state="absent")["changed"]
        assert settled(api, RACE)["taints"] == [MAINTENANCE]
    finally:
        api.patch_node(
            RACE,
            {
                "spec": {"unschedulable": None, "taints": None},
                "metadata": {"annotations": {QUARANTINE_ANNOTATION: None}},
            },
            _content_type=MERGE_PATCH,
        )
        settled(api, RACE)


def test_drain_evicts_deployment_and_plain_pods_skips_daemonset_mirror_and_finished_ones(lab, api):
    apps, batch = k8s.AppsV1Api(api.api_client), k8s.BatchV1Api(api.api_client)
    template = pod_spec(DRAIN, "web")
    apps.create_namespaced_deployment(
        NAMESPACE,
        {
            "metadata": {"name": "web"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": template},
        },
    )
    agent = pod_spec(DRAIN, "agent")
    apps.create_namespaced_daemon_set(
        NAMESPACE,
        {
            "metadata": {"name": "agent"},
            "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": agent},
        },
    )
    job = pod_spec(DRAIN, "batch")
    job["spec"]["restartPolicy"] = "Never"
    batch.create_namespaced_job(NAMESPACE, {"metadata": {"name": "batch"}, "spec": {"template": job}})
    plain = {
        "metadata": {"name": "plain", "labels": {"app": "plain"}},
        "spec": {
            "nodeName": DRAIN,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "registry.example/none:1"}],
        },
    }
    api.create_namespaced_pod(NAMESPACE, plain)
    # A mirror pod is the API server's copy of a kubelet's static pod; only the annotation tells.
    mirror = yaml.safe_load(yaml.safe_dump(plain))
    mirror["metadata"].update(name="static-" + DRAIN, annotations={"kubernetes.io/config.mirror": "lab"})
    api.create_namespaced_pod(NAMESPACE, mirror)

    def all_placed() -> Optional[Dict[str, Any]]:
        pods = pods_on(api, DRAIN)
        phases = sorted(p.status.phase for p in pods.values())
        return pods if phases == ["Running"] * 4 + ["Succeeded"] else None

    pods = wait_for("the pods to run on %s" % DRAIN, all_placed, timeout=90)
    by_app = {p.metadata.labels.get("app"): ref for ref, p in pods.items() if p.metadata.labels}
    web, ds_pod, job_pod = by_app["web"], by_app["agent"], by_app["batch"]
    want_skipped = sorted(
        [
            {"pod": ds_pod, "why": "daemonset"},
            {"pod": NAMESPACE + "/static-" + DRAIN, "why": "mirror"},
            {"pod": job_pod, "why": "finished"},
        ],
        key=lambda s: s["pod"],
    )
    try:
        assert quarantine(lab, DRAIN, reason="gpufleet: drain test")["changed"]
        # 1. check mode: what it would evict (the server's dry run of each eviction) ...
        checked = drain(lab, DRAIN, check=True, timeout=30)
        assert checked["changed"], checked["_output"][-3000:]
        assert sorted(checked["evicted"]) == sorted([web, NAMESPACE + "/plain"])
        assert sorted(checked["skipped_pods"], key=lambda s: s["pod"]) == want_skipped
        assert checked["blocked"] == [] and checked["gone"] == []
        # 2. ... and nothing was evicted.
        assert set(pods_on(api, DRAIN)) == set(pods)
        # 3. the real drain: evicted, and gone from the node (kwok completes the deletion).
        drained = drain(lab, DRAIN, timeout=30, poll=0.5)
        assert drained["changed"] and not drained["timed_out"], drained["_output"][-3000:]
        assert sorted(drained["evicted"]) == sorted([web, NAMESPACE + "/plain"])
        assert drained["blocked"] == []
        assert sorted(drained["skipped_pods"], key=lambda s: s["pod"]) == want_skipped
        left = pods_on(api, DRAIN)
        assert sorted(left) == sorted([ds_pod, NAMESPACE + "/static-" + DRAIN, job_pod])
        # The Deployment made a new pod; the cordon keeps it off the node.
        replacement = wait_for(
            "the web replacement pod",
            lambda: [
                p
                for p in api.list_namespaced_pod(NAMESPACE, label_selector="app=web").items
                if "%s/%s" % (NAMESPACE, p.metadata.name) != web
            ],
        )
        assert not replacement[0].spec.node_name
        # 4. check mode and 5. the real drain again: nothing to evict.
        for check in (True, False):
            again = drain(lab, DRAIN, check=check, timeout=10)
            assert not again["changed"] and again["evicted"] == [] and not again["timed_out"]
    finally:
        apps.delete_namespaced_deployment("web", NAMESPACE)
        apps.delete_namespaced_daemon_set("agent", NAMESPACE)
        batch.delete_namespaced_job("batch", NAMESPACE, propagation_policy="Background")
        for name in ("plain", "static-" + DRAIN):
            try:
                api.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        quarantine(lab, DRAIN, state="absent")
        wait_for("pods of %s gone" % DRAIN, lambda: not pods_on(api, DRAIN), timeout=60)
        settled(api, DRAIN)


def test_a_budget_that_allows_no_disruption_blocks_the_drain_and_is_reported(lab, api):
    apps, policy = k8s.AppsV1Api(api.api_client), k8s.PolicyV1Api(api.api_client)
    apps.create_namespaced_deployment(
        NAMESPACE,
        {
            "metadata": {"name": "trainer"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "trainer"}},
                "template": pod_spec(PDB, "trainer"),
            },
        },
    )
    policy.create_namespaced_pod_disruption_budget(
        NAMESPACE,
        {
            "metadata": {"name": "trainer-budget"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "trainer"}}},
        },
    )

    def budget_counted() -> bool:
        status = policy.read_namespaced_pod_disruption_budget("trainer-budget", NAMESPACE).status
        return bool(status and status.current_healthy == 1 and status.observed_generation)

    try:
        pod = next(
            iter(
                wait_for(
                    "the trainer pod running",
                    lambda: {ref: p for ref, p in pods_on(api, PDB).items() if p.status.phase == "Running"},
                    timeout=90,
                )
            )
        )
        wait_for("the disruption controller to count the budget", budget_counted, timeout=60)
        assert quarantine(lab, PDB, reason="gpufleet: pdb test")["changed"]
        # Check mode: the dry-run eviction is refused as the real one would be.
        checked = drain(lab, PDB, check=True, timeout=5)
        assert not checked["changed"] and checked["evicted"] == []
        assert [b["pod"] for b in checked["blocked"]] == [pod]
        # The real drain tries for 5 s, reports the pod and the budget, and does not fail.
        started = time.monotonic()
        blocked = drain(lab, PDB, timeout=5, poll=1)
        assert time.monotonic() - started >= 5
        assert not blocked["failed"] and not blocked["changed"], blocked["_output"][-3000:]
        assert blocked["timed_out"] and blocked["evicted"] == []
        assert [b["pod"] for b in blocked["blocked"]] == [pod]
        assert "disruption budget trainer-budget" in blocked["blocked"][0]["reason"]
        assert 5 <= blocked["elapsed"] < 15
        assert pod in pods_on(api, PDB), "the protected pod stays"
        # fail_on_blocked turns the report into a failure, with the same report.
        failed = drain(lab, PDB, timeout=1, fail_on_blocked=True)
        assert failed["failed"] and "1 pod(s) blocked the drain" in failed["msg"]
        assert [b["pod"] for b in failed["blocked"]] == [pod]
        # The budget lifted, the same drain goes through.
        policy.delete_namespaced_pod_disruption_budget("trainer-budget", NAMESPACE)
        done = drain(lab, PDB, timeout=30)
        assert done["changed"] and done["evicted"] == [pod] and not done["timed_out"]
    finally:
        try:
            policy.delete_namespaced_pod_disruption_budget("trainer-budget", NAMESPACE)
        except ApiException as exc:
            if exc.status != 404:
                raise
        apps.delete_namespaced_deployment("trainer", NAMESPACE)
        quarantine(lab, PDB, state="absent")
        wait_for("pods of %s gone" % PDB, lambda: not pods_on(api, PDB), timeout=60)
        settled(api, PDB)


def test_an_unknown_node_fails_naming_it_and_nothing_changes(lab, api):
    nodes_before = {n.metadata.name: state(api, n.metadata.name) for n in api.list_node().items}
    for outcome in (
        quarantine(lab, "gpu-z-404", reason="x"),
        quarantine(lab, "gpu-z-404", check=True),
        quarantine(lab, "gpu-z-404", state="absent"),
        drain(lab, "gpu-z-404", timeout=5),
    ):
        assert outcome["failed"] and outcome["_rc"] != 0
        assert "node gpu-z-404 not found" in outcome["msg"], outcome["_output"][-2000:]
    nodes_after = {n.metadata.name: state(api, n.metadata.name) for n in api.list_node().items}
    assert nodes_after == nodes_before


def test_an_api_server_that_cannot_be_reached_is_a_clear_error(lab, api, tmp_path):
    # The lab's API server stays up for the other tests: a kubeconfig naming a closed port
    # is, for the client, the same as a server that is down.
    config = yaml.safe_load(lab.kubeconfig.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = re.sub(r":\d+$", ":1", cluster["cluster"]["server"])
    down = tmp_path / "down.kubeconfig"
    down.write_text(yaml.safe_dump(config))
    for module in ("node_quarantine", "node_drain"):
        outcome = run_module(
            lab,
            module,
            {"name": PLAIN, "kubeconfig": str(down), "timeout": 5}
            if module == "node_drain"
            else {"name": PLAIN, "kubeconfig": str(down)},
        )
        assert outcome["failed"], outcome["_output"][-2000:]
        assert "read node %s: cannot reach the Kubernetes API server" % PLAIN in outcome["msg"]
