# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The first responder: quarantine first, without waiting for a playbook to start.

``python -m ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.first_responder
--config FILE`` (``--check-config`` validates FILE and exits: 0, or 2 naming the bad field).

A fatal node must stop taking work at once. The playbook that remediates it needs an alert or a
watch event, then about 2.5 s of ``ansible-playbook`` start before its first module. This process
watches the Nodes' ``GpuHealthy`` condition itself and, on each new fatal episode, makes the very
call that the playbook's first task makes (``api.start``, remediation_start's code): claim the node,
the escalation and the breaker's decisions, Slurm DRAIN with the remediation's reason, cordon and
taint, each phase recorded. Then it hands the remediation off (holder ``handoff``): the playbook
that the trigger starts takes it over at once and goes on with notify, the opt-out check and the
rest. So:

* the breaker, escalation and opt-out rules are the remediation's own, not a copy: a node the breaker
  refuses gets the Slurm fence only (its BREAKER_OPEN plan), as it would from the playbook;
* a playbook that arrives while the node is being fenced waits for the handoff
  (``store.HANDOFF_WAIT_S``); one that arrives first holds the node, and this process's start then
  ends as a duplicate;
* a failure (slurmctld or the API server away) leaves a claimed remediation handed off, and the
  playbook's start resumes it, fence first; nothing is done twice;
* the episodes are the node-condition source's (its ``TransitionTracker``: one per transition, a
  heartbeat is none); nodes already unhealthy when it starts are left to the playbook's triggers.

It acts with the remediation's identity and settings (the remediation role writes FILE), and only on
``verdicts`` (``fatal`` by default: a degraded node is not quarantined first).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Deque, Dict, List, Mapping, Optional, Set

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError, GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.connect import SLURM_API_ARGS, slurm_client

LOG = logging.getLogger("gpufleet.first_responder")
VERDICTS = ("fatal", "degraded")
# The keys of remediation_start that the first responder passes on; node and trigger are its own,
# notify is the playbook's (it follows the opt-out check's order there).
START_KEYS = ("namespace", "kubeconfig", "context", "plans", "breaker", "escalation", "lease", "neighbours",
              "pool_selector", "alertmanager_url", "fence", "kube_connect_timeout", "kube_read_timeout")
FENCE_KEYS = (*SLURM_API_ARGS, "taint_key")


class Settings:
    """The validated FILE: ``start`` (remediation_start's options) and how to watch."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        if not isinstance(raw, Mapping):
            raise FieldError("first_responder", "must be a mapping, got %s" % type(raw).__name__)
        unknown = sorted(set(raw) - {"start", "verdicts", "condition_type", "label_selector", "workers", "log_level"})
        if unknown:
            raise FieldError(unknown[0], "is not a setting of the first responder")
        start = raw.get("start")
        if not isinstance(start, Mapping) or not isinstance(start.get("fence"), Mapping):
            raise FieldError("start.fence", "is required: the Slurm and Kubernetes fence is what this process does")
        for key in sorted(set(start) - set(START_KEYS)):
            raise FieldError("start." + key, "is not an option the first responder passes to remediation_start")
        for key in sorted(set(start["fence"]) - set(FENCE_KEYS)):
            raise FieldError("start.fence." + key, "is not a fence option")
        self.start: Dict[str, Any] = {key: value for key, value in start.items() if value not in (None, "")}
        self.start["fence"] = {key: value for key, value in start["fence"].items() if value not in (None, "")}
        try:  # the Slurm options (a REST URL, a key file that is missing), before any event
            slurm_client(self.start["fence"]).check_credentials()
        except FieldError as exc:
            raise FieldError("start.fence." + exc.field, exc.message) from None
        # Bad remediation settings fail here, naming the field, as the module would before any call.
        from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.api import policy_from

        policy_from(self.start)
        self.verdicts = tuple(raw.get("verdicts") or ("fatal",))
        for verdict in self.verdicts:
            if verdict not in VERDICTS:
                raise FieldError("verdicts", "must hold fatal and/or degraded, not %r" % (verdict,))
        self.condition_type = str(raw.get("condition_type") or "GpuHealthy")
        self.label_selector = str(raw.get("label_selector") or "")
        workers = raw.get("workers", 8)
        if not isinstance(workers, int) or isinstance(workers, bool) or not 1 <= workers <= 64:
            raise FieldError("workers", "must be a whole number from 1 to 64, got %r" % (workers,))
        self.workers = workers
        self.log_level = str(raw.get("log_level") or "info")
        if self.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise FieldError("log_level", "must be debug, info, warning or error, got %r" % (self.log_level,))

    def as_data(self) -> Dict[str, Any]:
        return {"start": self.start, "verdicts": list(self.verdicts), "condition_type": self.condition_type,
                "label_selector": self.label_selector, "workers": self.workers, "log_level": self.log_level}


def load_settings(path: str) -> Settings:
    try:
        with open(path, encoding="utf-8") as handle:
            raw = json.load(handle)
    except (OSError, ValueError) as exc:
        raise FieldError("config", "cannot read %s: %s" % (path, exc)) from None
    return Settings(raw)


def trigger_of(event: Mapping[str, Any], now: float) -> Dict[str, Any]:
    """The trigger recorded in the remediation: the condition event, as the node-condition source gives it."""
    seen = event["gpufleet_condition"]
    return {"source": "first_responder", "alert": None, "fingerprint": seen.get("fingerprint"),
            "starts_at": seen.get("last_transition_time"),
            "condition": {key: seen.get(key) for key in ("type", "status", "reason", "message", "verdict", "action")},
            "received_at": now}


class Responder:
    """Takes condition events (from any thread) and runs one start per node at a time in a pool.

    ``start(params)`` and ``hand_off(params, remediation_id)`` are the remediation's (``api.start``
    and ``RemediationStore.hand_off``); tests pass their own."""

    def __init__(self, settings: Settings, start: Callable[[Dict[str, Any]], Dict[str, Any]],
                 hand_off: Callable[[Dict[str, Any], str], bool], clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.start = start
        self.hand_off = hand_off
        self.clock = clock
        self._busy: Set[str] = set()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=settings.workers, thread_name_prefix="first-responder")
        self.outcomes: Deque[Dict[str, Any]] = deque(maxlen=100)  # the last ones, for tests

    def offer(self, event: Mapping[str, Any]) -> bool:
        """Called for each condition event; True when a start was queued for its node."""
        seen = event.get("gpufleet_condition") or {}
        node, verdict = seen.get("node"), seen.get("verdict")
        if not node or verdict not in self.settings.verdicts:
            return False
        with self._lock:
            if node in self._busy:
                return False  # this node's start is running: it reads the condition as it is then
            self._busy.add(node)
        self._pool.submit(self._respond, node, dict(event), self.clock())
        return True

    def _respond(self, node: str, event: Dict[str, Any], seen_at: float) -> None:
        params = dict(self.settings.start, node=node, trigger=trigger_of(event, seen_at))
        outcome: Dict[str, Any] = {"node": node, "seen_at": seen_at}
        try:
            result = self.start(params)
            outcome.update(id=result.get("id"), skip=result.get("skip"), first=result.get("first"),
                           plan=(result.get("plan") or {}).get("name"), message=result.get("message"))
        except GpufleetError as exc:
            # A claim made before the failure is handed off all the same: the playbook resumes it.
            outcome.update(id=getattr(exc, "remediation_id", None), error=str(exc))
        except Exception as exc:  # never let one node's failure stop the others
            outcome.update(id=None, error="%s: %s" % (type(exc).__name__, exc))
        try:
            if outcome.get("id") and not outcome.get("skip"):
                outcome["handed_off"] = self.hand_off(params, outcome["id"])
        except Exception as exc:  # the lease still ends it: the holder is this live process, though
            outcome["error"] = "%s; handing off failed: %s" % (outcome.get("error") or "fenced", exc)
        finally:
            outcome["took_s"] = round(self.clock() - seen_at, 3)
            with self._lock:
                self._busy.discard(node)
                self.outcomes.append(outcome)
        if outcome.get("error"):
            LOG.error("first response to %s failed: %s", node, outcome["error"], extra={"outcome": outcome})
        elif outcome.get("skip"):
            LOG.info("first response to %s: nothing to do (%s)", node, outcome["skip"], extra={"outcome": outcome})
        else:
            LOG.warning("first response to %s: %s in %.3fs", node, ", ".join(sorted(outcome.get("first") or {}))
                        or "nothing pending", outcome["took_s"], extra={"outcome": outcome})

    def stop(self) -> None:
        self._pool.shutdown(wait=True)


def _remediation_calls(settings: Settings):
    """The real start and hand-off: remediation_start's code, with its own Slurm client."""
    from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import api

    fence = dict(settings.start["fence"], timeout=float(settings.start["fence"].get("timeout") or 15))

    def start(params: Dict[str, Any]) -> Dict[str, Any]:
        return api.start(params, False, slurm_client=lambda: slurm_client(fence))

    def hand_off(params: Dict[str, Any], remediation_id: str) -> bool:
        return api.store_from(params, False).hand_off(params["node"], remediation_id, time.time())

    return start, hand_off


def _watcher(settings: Settings, responder: Responder) -> Any:
    # The node-condition event source's watcher and episodes (one event per transition into
    # unhealthy, resynced after a dropped watch), imported rather than copied. Imported here: the
    # module_utils import rules of a collection do not reach its extensions.
    from ansible_collections.gpufleet.resilience.extensions.eda.plugins.event_source import node_condition
    from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import core_v1, kube_timeouts

    start = settings.start
    connect, read = kube_timeouts(start)

    # Nodes already unhealthy when it starts are not taken up (emit_existing off): the rulebook's
    # triggers (the node-condition source lists them, Alertmanager repeats) remain the guarantee;
    # this process only makes the new episodes' first step fast.
    tracker = node_condition.TransitionTracker(settings.condition_type, repeat_after=0)
    return node_condition.NodeWatcher(
        api_factory=lambda: core_v1(start.get("kubeconfig"), start.get("context"), (connect, read)),
        emit=responder.offer, tracker=tracker, label_selector=settings.label_selector, emit_existing=False,
        connect_timeout=connect, read_timeout=read)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="gpufleet-first-responder",
                                     description="quarantine first: fence fatal GPU nodes the moment they turn fatal")
    parser.add_argument("--config", required=True, help="path of the first responder's JSON settings")
    parser.add_argument("--check-config", action="store_true", help="validate the settings and exit")
    parser.add_argument("--require-kubeconfig", action="store_true",
                        help="refuse settings whose start.kubeconfig is not a file here (the lab, where it must be)")
    args = parser.parse_args(argv)
    try:
        settings = load_settings(args.config)
        kubeconfig = settings.start.get("kubeconfig")
        if args.require_kubeconfig and not (kubeconfig and os.path.isfile(kubeconfig)):
            # Without it the process would only retry its watch forever: say so before it starts.
            raise FieldError("start.kubeconfig", "%s is not a file: the first responder has no cluster to watch "
                             "(bring up the lab's Kubernetes first, or set self_healing_first_responder: false)"
                             % (kubeconfig or "(none)"))
    except FieldError as exc:
        sys.stderr.write("config error: %s\n" % exc)
        return 2
    if args.check_config:
        shown = settings.as_data()
        shown["start"] = {key: value for key, value in shown["start"].items() if key != "alertmanager_url"}
        sys.stdout.write(json.dumps(shown, indent=2, sort_keys=True) + "\n")
        return 0
    from ansible_collections.gpufleet.resilience.plugins.module_utils.json_logs import setup_logging
    from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import holder

    setup_logging(settings.log_level)
    holder.hold_as(holder.FIRST_RESPONDER, os.getpid())
    start, hand_off = _remediation_calls(settings)
    responder = Responder(settings, start, hand_off)
    watcher = _watcher(settings, responder)
    signal.signal(signal.SIGTERM, lambda *_args: watcher.stop())
    signal.signal(signal.SIGINT, lambda *_args: watcher.stop())
    LOG.info("watching the %s condition of Nodes%s; acting on %s", settings.condition_type,
             " (%s)" % settings.label_selector if settings.label_selector else "", ", ".join(settings.verdicts))
    thread = threading.Thread(target=watcher.run, name="node-watch", daemon=True)
    thread.start()
    while thread.is_alive() and not watcher.stopping.is_set():
        watcher.stopping.wait(1.0)
    responder.stop()
    LOG.info("stopped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
