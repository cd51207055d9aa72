# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""gpufleet.resilience.node_condition: one event per Node whose GpuHealthy condition turns unhealthy.

The Alertmanager path of self-healing needs Prometheus; this source is the path for clusters
without it. The health agents write the ``GpuHealthy`` condition on their Node (a strategic
merge patch of ``nodes/status``, see plugins/module_utils/agent/condition.py):

* ``True`` - healthy;
* ``False`` - ``degraded`` or ``fatal``: the message's first line is for people
  (``fatal, RESTART_BM: GPU 3 (GPU-..., 0000:3b:00.0): XID 79 ...``), its last line the same
  fault as data (``gpufleet.io/fault: {"v":1,"verdict":"fatal","action":"RESTART_BM",...}``),
  read by ``decode_fault`` (the agent's codec, plugins/module_utils/health/gpu_condition.py);
* ``Unknown`` - the agent cannot read its GPUs.

The source lists the Nodes, then watches them from the list's resourceVersion, and puts one
event on the queue for each *transition into unhealthy*: the first time a Node is seen with the
condition in an unhealthy status, and again only after the condition changed (another reason,
another lastTransitionTime) or the Node was healthy in between. The agents rewrite the
condition every heartbeat; a rewrite that changes nothing but lastHeartbeatTime is no event.

An episode that is still unresolved is reported again, once every ``repeat_after`` seconds (an
event with ``repeat`` 1, 2, ...): unresolved means no remediation of this episode is recorded on
the Node (the ``gpufleet.io/remediation`` annotation the remediation writes is absent or from
before the episode began), or its remediation is unfinished (cut short by a crash) or failed. A
remediation that succeeded, was stopped (opt-out) or was refused by the circuit breaker (its
reset takes the node up) settles the episode. This is what brings back a run that was lost with
its host, or that gave up while the API server or slurmctld was away, without waiting for
Alertmanager's repeat (4 h by default); the remediation resumes an unfinished run and escalation
bounds the repeats (a node remediated too often is held, which settles it).

A watch that ends (its timeout, the API server restarting, a dropped connection, 410 Gone)
is followed by a new list and watch, with a capped exponential back-off after errors. The
new list is compared with what was seen, so a transition that happened while the watch was
down still gives its event, and one that was already reported does not give another.

This file is loaded by ansible-rulebook on its own (not as part of a Python package), so it
imports nothing from the collection; its pure part (``condition_event``, ``decode_fault``,
``TransitionTracker``) is unit-tested in tests/unit/plugins/event_source/.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import time
from datetime import datetime
from typing import Any, Callable, Dict, Iterable, List, Optional

DOCUMENTATION = r"""
---
short_description: Watch the GpuHealthy condition of Kubernetes Nodes.
description:
  - An ansible-rulebook event source that lists and watches Nodes and puts one event on the
    queue each time a Node's C(GpuHealthy) condition (written by the gpufleet health agents)
    turns unhealthy. Heartbeat rewrites of an unchanged condition give no event.
  - "Each event is C({gpufleet_condition: {node, type, status, reason, message, verdict, action,
    last_transition_time, last_heartbeat_time, fingerprint, repeat}}). C(verdict) and C(action) come
    from the message's data line (for an agent before 0.6.0, from its head, C(fatal, RESTART_BM: ...)); both
    are null when the message is not the agent's. C(repeat) is 0 for the transition and counts the reports of an
    unresolved episode."
options:
  kubeconfig:
    description:
      - Path of a kubeconfig. Empty or missing - the KUBECONFIG environment variable, else the
        in-cluster service account, else C(~/.kube/config).
      - The identity needs C(list) and C(watch) on C(nodes).
    type: str
  context:
    description: Context in the kubeconfig; empty for its current context.
    type: str
  condition_type:
    description: The Node condition to watch.
    type: str
    default: GpuHealthy
  unhealthy_statuses:
    description: Condition statuses that count as unhealthy.
    type: list
    elements: str
    default: ["False"]
  label_selector:
    description: Watch only the Nodes this label selector selects (e.g. C(gpufleet.io/pool)).
    type: str
    default: ""
  emit_existing:
    description:
      - Also give an event for each Node that is already unhealthy when the source starts. A
        transition missed while the rulebook was down is then acted on; the remediation playbook
        is idempotent, so a Node it already handled is a no-op.
    type: bool
    default: true
  repeat_after:
    description:
      - Seconds after which an episode that is still unresolved (no remediation of it recorded on the Node, or
        its remediation unfinished or failed) is reported again; 0 never repeats.
      - Checked on each change of the Node (the agent's heartbeat rewrites the condition every minute) and each
        time a watch is renewed.
    type: float
    default: 900
  watch_timeout:
    description: Seconds a single watch request lasts before it is renewed.
    type: int
    default: 300
  backoff_max:
    description: Longest wait, in seconds, between attempts after the API server failed.
    type: float
    default: 30
  connect_timeout:
    description: Seconds to wait for the API server to accept a connection (and finish TLS) on each request.
    type: float
    default: 5
  read_timeout:
    description:
      - Seconds to wait for the API server's answer to the list; a server that accepts the connection and never
        answers fails the attempt after this long (logged with the server's address), and the source retries
        with its backoff. Timed-out reads are not retried by the HTTP layer.
      - A watch waits O(watch_timeout) plus this long, since it is answered only when a Node changes.
    type: float
    default: 30
"""

EXAMPLES = r"""
- name: Remediate Nodes whose GPUs fail, without Prometheus
  hosts: localhost
  sources:
    - gpufleet.resilience.node_condition:
        kubeconfig: /etc/gpufleet/eda.kubeconfig
        label_selector: gpufleet.io/pool
  rules:
    - name: A fatal GPU fault
      condition: event.gpufleet_condition.verdict == "fatal"
      action:
        debug:
          msg: "{{ event.gpufleet_condition.node }}: {{ event.gpufleet_condition.message }}"
"""

LOG = logging.getLogger("gpufleet.resilience.node_condition")

CONDITION_TYPE = "GpuHealthy"
VERDICTS = ("healthy", "degraded", "fatal")
HTTP_GONE = 410
# Written by the remediation (plugins/module_utils/kube/remediation_objects.py): JSON with the
# remediation's id, started_at (epoch seconds) and result (null while it runs).
REMEDIATION_ANNOTATION = "gpufleet.io/remediation"
# Results that leave nothing for a repeat to do: done, stopped by opt-out, refused by the
# breaker (whose reset takes the refused nodes up). "failed" and an unfinished run are not.
SETTLED_RESULTS = ("succeeded", "stopped", "refused")


# ---- pure part -----------------------------------------------------------------------------


# ---- the GpuHealthy codec: a copy of decode() in plugins/module_utils/health/gpu_condition.py ----
# (this file imports nothing from the collection). The agent's message has the people's line
# first ("fatal, RESTART_BM: GPU 3 ...") and the data last ("gpufleet.io/fault: {json}");
# tests/unit/plugins/event_source/test_node_condition.py holds this copy equal to the original.
DATA_PREFIX = "gpufleet.io/fault: "
FORMAT_VERSION = 1
UNHEALTHY = ("fatal", "degraded")
ACTIONS = ("NONE", "IGNORE", "RESTART_APP", "RESTART_FM", "DECODE", "CONTACT_SUPPORT", "RESET_GPU", "DRAIN_AND_RESET",
           "RESTART_VM", "RESTART_BM")


def _optional_int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _optional_text(value: Any) -> Optional[str]:
    return value if isinstance(value, str) and value else None


def decode_fault(condition: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The unhealthy fault a ``False`` GpuHealthy condition reports ({verdict, action, reason,
    summary, xids, gpu_index, gpu_uuid, pci_bus_id}); None for another status or a message that
    is not the agent's."""
    if not condition or condition.get("status") != "False":
        return None
    reason, message = str(condition.get("reason") or ""), str(condition.get("message") or "")
    lines = message.split("\n")
    head, _sep, summary = lines[0].partition(": ")
    verdict, _sep, action = head.partition(", ")
    data = None
    if lines[-1].startswith(DATA_PREFIX):
        with contextlib.suppress(ValueError):  # not our data line: read as if there were none
            data = json.loads(lines[-1][len(DATA_PREFIX):])
    if isinstance(data, dict) and data.get("v") == FORMAT_VERSION:
        verdict, action = data.get("verdict"), data.get("action")
        xids = [code for code in data.get("xids") or () if _optional_int(code) is not None]
        device = (_optional_int(data.get("gpu")), _optional_text(data.get("uuid")), _optional_text(data.get("pci")))
    else:
        xids, device = [], (None, None, None)
    if verdict not in UNHEALTHY or action not in ACTIONS:
        return None
    return {"verdict": verdict, "action": action, "reason": reason or "GpuFault", "summary": summary, "xids": xids,
            "gpu_index": device[0], "gpu_uuid": device[1], "pci_bus_id": device[2]}


def node_name(node: Dict[str, Any]) -> Optional[str]:
    return (node.get("metadata") or {}).get("name")


def find_condition(node: Dict[str, Any], condition_type: str = CONDITION_TYPE) -> Optional[Dict[str, Any]]:
    """The condition of that type in a Node as the API serves it (camelCase keys), or None."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == condition_type:
            return condition
    return None


def fingerprint(node: str, condition: Dict[str, Any]) -> str:
    """What tells one unhealthy episode from another: the node, status, reason and transition time."""
    return "%s/%s/%s/%s" % (node, condition.get("status"), condition.get("reason"),
                            condition.get("lastTransitionTime"))


def rfc3339_seconds(value: Optional[str]) -> Optional[float]:
    """Epoch seconds of a Kubernetes time (``2026-12-02T08:00:00Z``), or None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def remediation_record(node: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The remediation's annotation on a Node, decoded; None when absent or not a JSON object."""
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(REMEDIATION_ANNOTATION)
    try:
        record = json.loads(raw) if raw else None
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def unresolved(node: Dict[str, Any], condition: Dict[str, Any]) -> bool:
    """Whether the unhealthy episode of ``condition`` still wants a remediation run (see the
    module's description): none recorded since it began, or the last one unfinished or failed."""
    record = remediation_record(node)
    if record is None:
        return True
    started, began = record.get("started_at"), rfc3339_seconds(condition.get("lastTransitionTime"))
    # The transition time has whole seconds: a run started in the same second is of this episode.
    if isinstance(started, (int, float)) and began is not None and started < began - 1:
        return True  # a remediation of an earlier episode
    return record.get("result") not in SETTLED_RESULTS


def condition_event(node: str, condition: Dict[str, Any], repeat: int = 0) -> Dict[str, Any]:
    """The event put on the queue for one unhealthy condition of ``node``."""
    fault = decode_fault(condition) or {}
    verdict, action = fault.get("verdict"), fault.get("action")
    return {"gpufleet_condition": {
        "node": node,
        "type": condition.get("type"),
        "status": condition.get("status"),
        "reason": condition.get("reason"),
        "message": condition.get("message"),
        "verdict": verdict,
        "action": action,
        "last_transition_time": condition.get("lastTransitionTime"),
        "last_heartbeat_time": condition.get("lastHeartbeatTime"),
        "fingerprint": fingerprint(node, condition),
        "repeat": repeat,
    }}


class _Episode:
    """An unhealthy episode reported for one Node: its fingerprint, the Node as last seen, when
    it was last reported and how many times it was reported again."""

    def __init__(self, mark: str, node: Dict[str, Any], reported_at: float) -> None:
        self.mark, self.node, self.reported_at, self.repeats = mark, node, reported_at, 0


class TransitionTracker:
    """Remembers, per Node, the unhealthy episode last reported; says which observations are new.

    ``observe`` takes a Node as the API serves it and returns the event to send, or None. An
    episode is reported once: a heartbeat rewrite (same status, reason and transition time) is
    no event; a healthy condition, a missing one, or a deleted Node ends the episode. With
    ``repeat_after`` (seconds), an episode still unresolved that long after it was last reported
    is reported again (``repeat`` 1, 2, ...), on an observation of its Node or by ``due``.
    """

    def __init__(self, condition_type: str = CONDITION_TYPE, unhealthy_statuses: Iterable[str] = ("False",),
                 repeat_after: float = 0.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.condition_type = condition_type
        self.unhealthy_statuses = frozenset(unhealthy_statuses)
        self.repeat_after = float(repeat_after)
        self.clock = clock
        self._reported: Dict[str, _Episode] = {}

    def observe(self, node: Dict[str, Any], report: bool = True) -> Optional[Dict[str, Any]]:
        name = node_name(node)
        if not name:
            return None
        condition = find_condition(node, self.condition_type)
        if condition is None or condition.get("status") not in self.unhealthy_statuses:
            self._reported.pop(name, None)
            return None
        mark = fingerprint(name, condition)
        episode = self._reported.get(name)
        if episode is not None and episode.mark == mark:
            episode.node = node
            return self._repeat(name, episode, condition)
        self._reported[name] = _Episode(mark, node, self.clock())
        return condition_event(name, condition) if report else None

    def _repeat(self, name: str, episode: _Episode, condition: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        now = self.clock()
        if self.repeat_after <= 0 or now - episode.reported_at < self.repeat_after:
            return None
        episode.reported_at = now
        if not unresolved(episode.node, condition):
            return None  # settled: look again a period later (a new run may fail)
        episode.repeats += 1
        return condition_event(name, condition, repeat=episode.repeats)

    def due(self) -> List[Dict[str, Any]]:
        """Repeats that are due for the Nodes as last seen (for a Node that has not changed since)."""
        events = []
        for name, episode in list(self._reported.items()):
            condition = find_condition(episode.node, self.condition_type)
            event = self._repeat(name, episode, condition) if condition is not None else None
            if event is not None:
                events.append(event)
        return events

    def forget(self, node: Dict[str, Any]) -> None:
        name = node_name(node)
        if name:
            self._reported.pop(name, None)

    def resync(self, nodes: List[Dict[str, Any]], report: bool = True) -> List[Dict[str, Any]]:
        """A full list: the events it gives, and Nodes no longer listed are forgotten."""
        listed = {node_name(node) for node in nodes}
        for name in [name for name in self._reported if name not in listed]:
            del self._reported[name]
        events = []
        for node in nodes:
            event = self.observe(node, report)
            if event is not None:
                events.append(event)
        return events

    def handle(self, watch_event: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        """One watch event (``{type, object}`` with a raw Node); the event to send, or None."""
        kind, node = watch_event.get("type"), watch_event.get("object")
        if not isinstance(node, dict):
            return None
        if kind == "DELETED":
            self.forget(node)
            return None
        if kind in ("ADDED", "MODIFIED"):
            return self.observe(node)
        return None


def resource_version(obj: Dict[str, Any]) -> Optional[str]:
    return (obj.get("metadata") or {}).get("resourceVersion")


def backoff(attempt: int, ceiling: float) -> float:
    """Seconds to wait before attempt ``attempt`` (1-based) after a failure: 1, 2, 4, ... capped."""
    return min(float(ceiling), 2.0 ** max(0, attempt - 1))


# ---- Kubernetes -----------------------------------------------------------------------------


def _api(args: Dict[str, Any]) -> Any:
    from kubernetes import client, config
    from urllib3 import Retry

    kubeconfig = args.get("kubeconfig") or None
    context = args.get("context") or None
    configuration = client.Configuration()
    loaded = False
    if kubeconfig is None and not os.environ.get("KUBECONFIG"):
        try:
            config.load_incluster_config(client_configuration=configuration)
            loaded = True
        except config.ConfigException:
            pass
    if not loaded:
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
    _send_bearer_token(configuration)
    # urllib3 would retry a timed-out list three times: the read timeout is the bound, the watcher retries.
    configuration.retries = Retry(total=3, connect=1, read=0, status=0, other=0)
    return client.CoreV1Api(client.ApiClient(configuration))


def _send_bearer_token(configuration: Any) -> None:
    """kubernetes 36's loaders keep "Bearer <token>" in api_key["authorization"], which its API client
    does not send (it sends api_key["BearerToken"]): without this a Pod's service account or a token
    kubeconfig reaches the API server anonymous. The same fix as the collection's kube/client.py
    (send_bearer_token): this plugin stands alone."""
    loaded_hook = configuration.refresh_api_key_hook

    def refresh(conf: Any) -> None:
        if loaded_hook is not None:
            loaded_hook(conf)
        if conf.api_key.get("authorization"):
            conf.api_key["BearerToken"] = conf.api_key["authorization"]

    configuration.refresh_api_key_hook = refresh
    refresh(configuration)


class NodeWatcher:
    """List + watch of Nodes in a thread; ``emit`` gets each event to send."""

    def __init__(self, api_factory: Callable[[], Any], emit: Callable[[Dict[str, Any]], None],
                 tracker: TransitionTracker, label_selector: str = "", emit_existing: bool = True,
                 watch_timeout: int = 300, backoff_max: float = 30.0,
                 sleep: Optional[Callable[[float], bool]] = None, connect_timeout: float = 5.0,
                 read_timeout: float = 30.0) -> None:
        self.api_factory = api_factory
        self.emit = emit
        self.tracker = tracker
        self.label_selector = label_selector
        self.emit_existing = emit_existing
        self.watch_timeout = int(watch_timeout)
        self.backoff_max = float(backoff_max)
        # (connect, read) of the list; a watch reads for its timeoutSeconds plus read_timeout.
        self.connect_timeout = float(connect_timeout)
        self.read_timeout = float(read_timeout)
        self.stopping = threading.Event()
        # Waits between attempts; True means "stop now". Tests pass their own.
        self.sleep = sleep if sleep is not None else self.stopping.wait
        self._listed_once = False

    def stop(self) -> None:
        self.stopping.set()

    def _list(self, api: Any) -> str:
        kwargs = {"label_selector": self.label_selector} if self.label_selector else {}
        answer = api.list_node(_preload_content=False, _request_timeout=(self.connect_timeout, self.read_timeout),
                               **kwargs)
        try:
            listed = json.loads(answer.data)
        finally:
            answer.release_conn()
        report = self._listed_once or self.emit_existing
        for event in self.tracker.resync(listed.get("items") or [], report=report):
            self.emit(event)
        self._listed_once = True
        return resource_version(listed) or ""

    def _watch(self, api: Any, version: str) -> str:
        from kubernetes import watch

        streamer = watch.Watch()
        kwargs = {"label_selector": self.label_selector} if self.label_selector else {}
        try:
            for event in streamer.stream(api.list_node, resource_version=version, timeout_seconds=self.watch_timeout,
                                         allow_watch_bookmarks=True, deserialize=False,
                                         _request_timeout=(self.connect_timeout,
                                                           self.watch_timeout + self.read_timeout), **kwargs):
                if self.stopping.is_set():
                    break
                if not isinstance(event, dict):
                    continue
                version = resource_version(event.get("object") or {}) or version
                found = self.tracker.handle(event)
                if found is not None:
                    self.emit(found)
        finally:
            streamer.stop()
        return version

    def run(self) -> None:
        failures = 0
        version = ""
        api = None
        gone = False
        while not self.stopping.is_set():
            try:
                if api is None:
                    api = self.api_factory()
                if not version:
                    version = self._list(api)
                    LOG.info("node_condition: listed Nodes at resourceVersion %s", version)
                version = self._watch(api, version)
                failures, gone = 0, False
                for event in self.tracker.due():
                    self.emit(event)
            except Exception as exc:  # the API server away, 410 Gone, a dropped connection alike
                status = getattr(exc, "status", None)
                version = ""
                # The watch's resourceVersion is too old: list again at once (the first time; a
                # second 410 in a row backs off like any failure).
                if status == HTTP_GONE and not gone:
                    gone = True
                    LOG.info("node_condition: the watch expired (410); listing again")
                    continue
                failures += 1
                wait = backoff(failures, self.backoff_max)
                LOG.warning("node_condition: listing or watching Nodes failed (%s); retrying in %.0fs", exc, wait)
                if failures % 5 == 0:
                    api = None  # a fresh client: the kubeconfig's token or certificate may have been renewed
                if self.sleep(wait):
                    break


async def main(queue: asyncio.Queue, args: Dict[str, Any]) -> None:
    """Put an event on ``queue`` for each transition of a Node's GpuHealthy condition into unhealthy."""
    loop = asyncio.get_running_loop()
    statuses = args.get("unhealthy_statuses") or ["False"]
    if isinstance(statuses, str):
        statuses = [statuses]
    repeat_after = args.get("repeat_after")
    tracker = TransitionTracker(args.get("condition_type") or CONDITION_TYPE, [str(status) for status in statuses],
                                repeat_after=float(900 if repeat_after in (None, "") else repeat_after))

    def emit(event: Dict[str, Any]) -> None:
        # From the watcher's thread: hand the event to the event loop and wait until it is queued,
        # so a full queue slows the watch instead of losing events.
        future = asyncio.run_coroutine_threadsafe(queue.put(event), loop)
        while not watcher.stopping.is_set():
            try:
                future.result(timeout=1)
                return
            except TimeoutError:
                continue
        future.cancel()

    emit_existing = args.get("emit_existing", True)
    if isinstance(emit_existing, str):
        emit_existing = emit_existing.strip().lower() in ("1", "true", "yes", "on")
    watcher = NodeWatcher(
        api_factory=lambda: _api(args), emit=emit, tracker=tracker,
        label_selector=args.get("label_selector") or "", emit_existing=bool(emit_existing),
        watch_timeout=int(args.get("watch_timeout") or 300), backoff_max=float(args.get("backoff_max") or 30),
        connect_timeout=float(args.get("connect_timeout") or 5), read_timeout=float(args.get("read_timeout") or 30),
    )
    done = loop.create_future()

    def run() -> None:
        try:
            watcher.run()
        except BaseException as exc:  # reported to the rulebook through the future
            loop.call_soon_threadsafe(lambda error=exc: done.done() or done.set_exception(error))
        else:
            loop.call_soon_threadsafe(lambda: done.done() or done.set_result(None))

    # A daemon thread: a watch blocked in a read never holds up the rulebook's exit.
    thread = threading.Thread(target=run, name="gpufleet-node-condition", daemon=True)
    thread.start()
    LOG.info("node_condition: watching the %s condition of Nodes%s", tracker.condition_type,
             " (%s)" % watcher.label_selector if watcher.label_selector else "")
    try:
        await done
    finally:
        watcher.stop()


if __name__ == "__main__":
    # Try it by hand: python node_condition.py KUBECONFIG prints each event.

    import sys

    class _PrintQueue:
        async def put(self, event: Dict[str, Any]) -> None:
            print(json.dumps(event), flush=True)

    logging.basicConfig(level=logging.INFO)
    asyncio.run(main(_PrintQueue(), {"kubeconfig": sys.argv[1] if len(sys.argv) > 1 else ""}))  # type: ignore[arg-type]
