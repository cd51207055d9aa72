# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The node_condition event source's pure part: the event from a Node, one event per transition.

The plugin is loaded from its file, as ansible-rulebook loads it (not as part of a package). The
conditions are the agent's own (``health_condition`` + ``condition_patch``), so a change of the
agent's message format breaks these tests, not the rulebook in production. The list + watch
against a real API server is tested in tests/integration/remediation/test_self_healing_eda.py.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.condition import (
    health_condition,
    unknown_condition,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.health import gpu_condition
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import ACTION_ORDER, XidEvent
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.verdict import evaluate
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.node_status import condition_patch
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.remediation_objects import ANNOTATION
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import progress as progress_rules
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.plans import plan_for

PLUGIN = Path(__file__).resolve().parents[4] / "extensions" / "eda" / "plugins" / "event_source" / "node_condition.py"
T0 = 1_795_000_000.0


def _load():
    spec = importlib.util.spec_from_file_location("gpufleet_node_condition_source", PLUGIN)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


nc = _load()


def node(name: str, condition=None, heartbeat: float = T0, transition: float = T0, others=()) -> Dict[str, Any]:
    """A Node as the API server serves it, with the agent's condition (or none)."""
    conditions: List[Dict[str, Any]] = [{"type": "Ready", "status": "True", "reason": "KubeletReady"}, *others]
    if condition is not None:
        conditions += condition_patch(condition, heartbeat, transition)["status"]["conditions"]
    return {"metadata": {"name": name, "resourceVersion": "42"}, "status": {"conditions": conditions}}


FATAL = health_condition(evaluate([XidEvent(xid=79, source="nvml", gpu_index=3, timestamp=T0)]), 8)
HEALTHY = health_condition(evaluate([]), 8)


def degraded_condition():
    verdict = evaluate([XidEvent(xid=48, source="nvml", gpu_index=1, timestamp=T0),
                        XidEvent(xid=63, source="nvml", gpu_index=1, timestamp=T0 + 0.1)])
    return verdict, health_condition(verdict, 8)


# ---- the event ------------------------------------------------------------------------------


def test_event_of_an_agents_fatal_condition():
    event = nc.TransitionTracker().observe(node("gpu-a-002", FATAL))
    assert event == {"gpufleet_condition": {
        "node": "gpu-a-002",
        "type": "GpuHealthy",
        "status": "False",
        "reason": "Xid79",
        "message": FATAL.message,
        "verdict": "fatal",
        "action": "RESTART_BM",
        "last_transition_time": "2026-11-18T11:06:40Z",
        "last_heartbeat_time": "2026-11-18T11:06:40Z",
        "fingerprint": "gpu-a-002/False/Xid79/2026-11-18T11:06:40Z",
        "repeat": 0,
    }}


def test_verdict_and_action_come_from_the_agents_message():
    verdict, condition = degraded_condition()
    event = nc.TransitionTracker().observe(node("n", condition))["gpufleet_condition"]
    assert (event["verdict"], event["action"]) == (verdict.state, verdict.action)
    assert event["reason"] == condition.reason


@pytest.mark.parametrize("message, expected", [
    # Agents before 0.6.0 wrote no data line: the head alone.
    ("fatal, RESTART_BM: GPU 3 (GPU-1, 0000:3b:00.0): XID 79", ("fatal", "RESTART_BM")),
    ("degraded, RESET_GPU: GPU 1 ...", ("degraded", "RESET_GPU")),
    ("8 GPUs healthy", (None, None)),
    ("the agent cannot read its GPUs: NVML unavailable", (None, None)),
    ("Fatal, RESTART_BM: capitalised is not the agent's", (None, None)),
    ("fatal, REBOOT_NOW: not a catalog action", (None, None)),
    ("", (None, None)),
    (None, (None, None)),
    # The data line decides; prose that looks like another verdict does not.
    ('degraded, RESET_GPU: said the prose\ngpufleet.io/fault: {"v":1,"verdict":"fatal","action":"RESTART_BM"}',
     ("fatal", "RESTART_BM")),
    ('fatal, RESTART_BM: x\ngpufleet.io/fault: {"v":2,"verdict":"fatal","action":"RESTART_BM"}',
     ("fatal", "RESTART_BM")),
    ('x\ngpufleet.io/fault: {"v":2,"verdict":"fatal","action":"RESTART_BM"}', (None, None)),  # a newer format
    ("x\ngpufleet.io/fault: {not json", (None, None)),
])
def test_the_sources_copy_of_the_codec_reads_what_the_codec_reads(message, expected):
    condition = {"type": "GpuHealthy", "status": "False", "reason": "Xid79", "message": message}
    found = nc.decode_fault(condition)
    assert ((found or {}).get("verdict"), (found or {}).get("action")) == expected
    original = gpu_condition.decode(condition)
    assert found == (original.as_dict() if original is not None else None)


def test_the_sources_copy_knows_the_same_actions():
    assert set(nc.ACTIONS) == set(ACTION_ORDER) and nc.DATA_PREFIX == gpu_condition.DATA_PREFIX
    assert nc.FORMAT_VERSION == gpu_condition.FORMAT_VERSION and nc.CONDITION_TYPE == gpu_condition.CONDITION_TYPE


# ---- one event per transition -------------------------------------------------------------------


def test_heartbeat_rewrites_give_no_event():
    tracker = nc.TransitionTracker()
    assert tracker.observe(node("n", FATAL, heartbeat=T0, transition=T0)) is not None
    for beat in (60, 120, 180):
        assert tracker.observe(node("n", FATAL, heartbeat=T0 + beat, transition=T0)) is None


def test_healthy_in_between_gives_a_new_event():
    tracker = nc.TransitionTracker()
    assert tracker.observe(node("n", FATAL, transition=T0))
    assert tracker.observe(node("n", HEALTHY, transition=T0 + 10)) is None
    assert tracker.observe(node("n", FATAL, transition=T0 + 20))


def test_healthy_in_between_gives_a_new_event_even_with_the_same_transition_time():
    # A writer that kept the old lastTransitionTime: the healthy condition in between still ends
    # the episode.
    tracker = nc.TransitionTracker()
    assert tracker.observe(node("n", FATAL, transition=T0))
    assert tracker.observe(node("n", HEALTHY, transition=T0)) is None
    assert tracker.observe(node("n", FATAL, transition=T0))


# ---- an unresolved episode is reported again -------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def remediated(the_node: Dict[str, Any], started: float, result: Any) -> Dict[str, Any]:
    """``the_node`` with the annotation the remediation writes (its own code) for a run started at
    ``started`` that ended with ``result`` (None: still running, or cut short)."""
    progress = progress_rules.new_progress("r-1", the_node["metadata"]["name"], plan_for("RESTART_BM"), {}, {},
                                           started, {"pid": 1, "host": "h"})
    if result is not None:
        progress = progress_rules.finish(progress, result, started + 60)
    the_node["metadata"]["annotations"] = {ANNOTATION: progress_rules.annotation(progress)}
    return the_node


def test_the_source_reads_the_annotation_under_the_remediations_own_name():
    assert nc.REMEDIATION_ANNOTATION == ANNOTATION
    assert set(nc.SETTLED_RESULTS) < set(progress_rules.RESULTS) and "failed" not in nc.SETTLED_RESULTS


def test_an_episode_no_remediation_took_up_is_reported_again_every_period():
    clock = Clock()
    tracker = nc.TransitionTracker(repeat_after=600, clock=clock)
    assert tracker.observe(node("n", FATAL))["gpufleet_condition"]["repeat"] == 0
    repeats = []
    for beat in range(60, 1860, 60):  # the agent's heartbeat rewrites the condition every minute
        clock.now = beat
        event = tracker.observe(node("n", FATAL, heartbeat=T0 + beat))
        if event is not None:
            repeats.append((beat, event["gpufleet_condition"]["repeat"]))
            assert event["gpufleet_condition"]["fingerprint"] == "n/False/Xid79/2026-11-18T11:06:40Z"
    assert repeats == [(600, 1), (1200, 2), (1800, 3)]


@pytest.mark.parametrize("result, again", [
    (None, True),  # unfinished: the run was cut short (its holder gone, a rerun resumes it)
    ("failed", True),  # gave up (its own tries spent): try again
    ("succeeded", False),
    ("stopped", False),  # opted out: the fence stays, nothing more
    ("refused", False),  # the breaker: its reset takes the node up
])
def test_a_remediation_of_the_episode_settles_it_unless_unfinished_or_failed(result, again):
    clock = Clock()
    tracker = nc.TransitionTracker(repeat_after=600, clock=clock)
    assert tracker.observe(node("n", FATAL))
    clock.now = 600
    event = tracker.observe(remediated(node("n", FATAL, heartbeat=T0 + 600), T0 + 5, result))
    assert (event is not None) == again
    if again:
        assert event["gpufleet_condition"]["repeat"] == 1


def test_a_remediation_of_an_earlier_episode_does_not_settle_this_one():
    clock = Clock()
    tracker = nc.TransitionTracker(repeat_after=600, clock=clock)
    assert tracker.observe(node("n", FATAL, transition=T0 + 3600))
    clock.now = 600
    earlier = remediated(node("n", FATAL, heartbeat=T0 + 4200, transition=T0 + 3600), T0, "succeeded")
    assert tracker.observe(earlier)["gpufleet_condition"]["repeat"] == 1
    # A run started in the second the condition turned (its time has whole seconds) is of this episode.
    clock.now = 1200
    same_second = remediated(node("n", FATAL, heartbeat=T0 + 4800, transition=T0 + 3600), T0 + 3599.5, "succeeded")
    assert tracker.observe(same_second) is None


def test_a_settled_episode_is_looked_at_again_a_period_later():
    clock = Clock()
    tracker = nc.TransitionTracker(repeat_after=600, clock=clock)
    assert tracker.observe(node("n", FATAL))
    clock.now = 600
    assert tracker.observe(remediated(node("n", FATAL, heartbeat=T0 + 600), T0 + 5, None)) is not None
    clock.now = 1200
    assert tracker.observe(remediated(node("n", FATAL, heartbeat=T0 + 1200), T0 + 5, "succeeded")) is None
    clock.now = 1500  # the rerun failed in between: not before a period after the last look
    assert tracker.observe(remediated(node("n", FATAL, heartbeat=T0 + 1500), T0 + 5, "failed")) is None
    clock.now = 1800
    assert tracker.observe(remediated(node("n", FATAL, heartbeat=T0 + 1800), T0 + 5, "failed"))[
        "gpufleet_condition"]["repeat"] == 2


def test_due_repeats_for_nodes_that_did_not_change_and_stops_with_the_episode():
    clock = Clock()
    tracker = nc.TransitionTracker(repeat_after=600, clock=clock)
    tracker.observe(node("a", FATAL))
    tracker.observe(node("b", FATAL))
    clock.now = 599
    assert tracker.due() == []
    clock.now = 600
    assert sorted(e["gpufleet_condition"]["node"] for e in tracker.due()) == ["a", "b"]
    assert tracker.due() == []
    tracker.observe(node("a", HEALTHY, transition=T0 + 700))
    tracker.handle({"type": "DELETED", "object": node("b", FATAL)})
    clock.now = 5000
    assert tracker.due() == []


def test_no_repeat_when_repeat_after_is_zero_or_a_watch_list_resumes_the_episode():
    clock = Clock()
    never = nc.TransitionTracker(repeat_after=0, clock=clock)
    assert never.observe(node("n", FATAL))
    clock.now = 10 ** 6
    assert never.observe(node("n", FATAL, heartbeat=T0 + 10 ** 6)) is None and never.due() == []
    # A relist after a dropped watch is no new episode and does not move the period.
    tracker = nc.TransitionTracker(repeat_after=600, clock=clock)
    clock.now = 0
    assert tracker.resync([node("n", FATAL)])
    clock.now = 300
    assert tracker.resync([node("n", FATAL, heartbeat=T0 + 300)]) == []
    clock.now = 600
    assert [e["gpufleet_condition"]["repeat"] for e in tracker.resync([node("n", FATAL, heartbeat=T0 + 600)])] == [1]


def test_another_reason_while_unhealthy_is_a_new_episode():
    _verdict, degraded = degraded_condition()
    tracker = nc.TransitionTracker()
    first = tracker.observe(node("n", degraded, transition=T0))
    second = tracker.observe(node("n", FATAL, transition=T0 + 5))
    assert first["gpufleet_condition"]["reason"] != second["gpufleet_condition"]["reason"]
    assert tracker.observe(node("n", FATAL, heartbeat=T0 + 65, transition=T0 + 5)) is None


def test_unknown_is_not_unhealthy_by_default_but_can_be():
    unknown = unknown_condition("NVML unavailable")
    assert nc.TransitionTracker().observe(node("n", unknown)) is None
    event = nc.TransitionTracker(unhealthy_statuses=["False", "Unknown"]).observe(node("n", unknown))
    assert event["gpufleet_condition"]["status"] == "Unknown"
    assert event["gpufleet_condition"]["verdict"] is None


def test_nodes_without_the_condition_or_a_name_give_nothing():
    tracker = nc.TransitionTracker()
    assert tracker.observe(node("n")) is None
    assert tracker.observe({"metadata": {}, "status": {}}) is None
    assert tracker.observe({}) is None
    assert tracker.observe({"metadata": {"name": "n"}, "status": {"conditions": None}}) is None


def test_another_condition_type():
    tracker = nc.TransitionTracker(condition_type="NetworkHealthy")
    other = {"type": "NetworkHealthy", "status": "False", "reason": "LinkDown", "message": "fatal, RESTART_BM: x",
             "lastTransitionTime": "t"}
    assert tracker.observe(node("n", FATAL)) is None
    assert tracker.observe(node("n", others=[other]))["gpufleet_condition"]["type"] == "NetworkHealthy"


def test_nodes_are_tracked_apart():
    tracker = nc.TransitionTracker()
    assert tracker.observe(node("a", FATAL))
    assert tracker.observe(node("b", FATAL))
    assert tracker.observe(node("a", FATAL)) is None


# ---- watch events and lists ----------------------------------------------------------------------


def test_watch_events():
    tracker = nc.TransitionTracker()
    assert tracker.handle({"type": "ADDED", "object": node("n", HEALTHY)}) is None
    assert tracker.handle({"type": "MODIFIED", "object": node("n", FATAL)})
    assert tracker.handle({"type": "MODIFIED", "object": node("n", FATAL, heartbeat=T0 + 60)}) is None
    assert tracker.handle({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "99"}}}) is None
    # A Node deleted and made again (a replacement with the same name) starts afresh.
    assert tracker.handle({"type": "DELETED", "object": node("n", FATAL)}) is None
    assert tracker.handle({"type": "ADDED", "object": node("n", FATAL)})
    assert tracker.handle({"type": "ERROR", "object": {"code": 410}}) is None
    assert tracker.handle({"type": "MODIFIED", "object": "not a node"}) is None


def test_resync_reports_what_changed_while_the_watch_was_down():
    tracker = nc.TransitionTracker()
    assert len(tracker.resync([node("a", FATAL), node("b", HEALTHY), node("c", FATAL)])) == 2
    # Down for a while: a healed, b failed, c still in the same episode, d new and failed.
    events = tracker.resync([node("a", HEALTHY), node("b", FATAL, transition=T0 + 30), node("c", FATAL),
                             node("d", FATAL)])
    assert sorted(e["gpufleet_condition"]["node"] for e in events) == ["b", "d"]
    # a fails again; c is gone from the list (deleted) and comes back failed: both are new episodes.
    events = tracker.resync([node("a", FATAL, transition=T0 + 60), node("b", FATAL, transition=T0 + 30)])
    assert [e["gpufleet_condition"]["node"] for e in events] == ["a"]
    assert tracker.observe(node("c", FATAL))


def test_resync_without_reporting_primes_the_tracker():
    # emit_existing=false: Nodes unhealthy at start are remembered, not reported.
    tracker = nc.TransitionTracker()
    assert tracker.resync([node("a", FATAL)], report=False) == []
    assert tracker.observe(node("a", FATAL, heartbeat=T0 + 60)) is None
    assert tracker.observe(node("a", FATAL, transition=T0 + 90))


def test_backoff():
    assert [nc.backoff(attempt, 30) for attempt in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]
    assert nc.backoff(1, 0.5) == 0.5


def test_the_watcher_backs_off_while_the_api_cannot_be_reached():
    """Our own API factory fails: the watcher waits 1, 2, 4 ... s between attempts and stops when told."""
    waits: List[float] = []
    made: List[int] = []

    def factory():
        made.append(1)
        raise ConnectionRefusedError("connection refused")

    def sleep(seconds: float) -> bool:
        waits.append(seconds)
        return len(waits) >= 7

    watcher = nc.NodeWatcher(factory, emit=lambda event: None, tracker=nc.TransitionTracker(), backoff_max=10,
                             sleep=sleep)
    watcher.run()
    assert waits == [1, 2, 4, 8, 10, 10, 10]
    assert len(made) == 7


def test_documentation_is_yaml():
    yaml = pytest.importorskip("yaml")
    doc = yaml.safe_load(nc.DOCUMENTATION)
    assert set(doc["options"]) == {"kubeconfig", "context", "condition_type", "unhealthy_statuses", "label_selector",
                                   "emit_existing", "repeat_after", "watch_timeout", "backoff_max", "connect_timeout",
                                   "read_timeout"}
    assert isinstance(yaml.safe_load(nc.EXAMPLES), list)


def test_a_hung_api_server_fails_the_list_within_the_read_timeout(hung_server, tmp_path):
    """A real kubernetes client from the source's own factory, against a server that accepts and never
    answers (conftest ``hung_server``): the list fails after read_timeout, once, naming the server."""
    import time

    server = "http://%s" % hung_server.address
    kubeconfig = tmp_path / "hung.kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters:\n- {name: h, cluster: {server: '%s'}}\n"
                          "users:\n- {name: u, user: {token: t}}\n"
                          "contexts:\n- {name: h, context: {cluster: h, user: u}}\ncurrent-context: h\n" % server)
    watcher = nc.NodeWatcher(lambda: None, emit=lambda event: None, tracker=nc.TransitionTracker(),
                             connect_timeout=2, read_timeout=1.5)
    api = nc._api({"kubeconfig": str(kubeconfig)})
    started = time.monotonic()
    with pytest.raises(Exception) as caught:
        watcher._list(api)
    elapsed = time.monotonic() - started
    assert elapsed < 1.5 + 10, "%.1fs: the list was not bounded by read_timeout" % elapsed
    assert "port=%d" % hung_server.port in str(caught.value) and "Read timed out" in str(caught.value), caught.value
    assert len(hung_server.accepted) == 1, "a timed-out read was retried"


def test_a_token_kubeconfig_is_sent_to_the_api_server(tmp_path, monkeypatch):
    """kubernetes 36 loads a token where its own client does not send it; the source carries it across
    (a Pod's service account takes the same path), so the watch is not anonymous."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: lab\n"
        "clusters: [{name: lab, cluster: {server: 'https://127.0.0.1:6443', insecure-skip-tls-verify: true}}]\n"
        "contexts: [{name: lab, context: {cluster: lab, user: lab}}]\n"
        "users: [{name: lab, user: {token: watch-token}}]\n")
    api_client = nc._api({"kubeconfig": str(kubeconfig)}).api_client
    headers: Dict[str, str] = {}
    api_client.update_params_for_auth(headers, [], ["BearerToken"])
    assert headers.get("authorization") == "Bearer watch-token"
