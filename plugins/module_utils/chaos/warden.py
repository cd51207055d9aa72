# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The chaos warden: a standing process that rolls back every fault past its expiry, from outside
any drill's process tree.

A drill's own watchdog is an async task of the drill's run (roles/chaos_drill). It outlives a
killed ansible-playbook, but not the end of the machine or container the run was in: AWX runs a
job in an execution-environment container and removes the container when the job is cancelled or
times out, watchdog included. The warden runs where faults are reverted (the lab host; on a site,
each fault host and the control host, as a service: roles/chaos_warden), looks at the chaos
ledger every ``interval`` seconds, rolls back the faults whose expiry passed ``grace`` seconds ago
(``rolled_back_by: warden``) and ends the drills whose expiry passed with no fault left. The grace
lets a live drill's own watchdog, which acts at the expiry itself, go first.

Run: python -m ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.warden
     --kubeconfig K [--lab-dir D] [--slurm-conf S | --slurm-settings JSON] [--interval 5] [--grace 10]
     [--once]

``--slurm-settings`` is how the drills reach Slurm, as the chaos modules take it: ``{"slurm_api":
"rest", "rest_url": ..., "rest_token_file": ...}`` (paths only; the secret stays in its file), so a
drill's Slurm job is cancelled through the same slurmrestd that it was submitted to.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import ledger
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.api import (
    ledger_store,
    revert_here,
    rollback_entries,
    update_if,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.args import (
    SLURM_SETTINGS,
    drill_slurm,
    has_slurm,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.context import FaultContext, from_params
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError, GpufleetError

ROLLED_BACK_BY = "warden"


def sweep(store: Any, ctx: FaultContext, now: float, grace: float) -> Dict[str, List[Any]]:
    """One look at the ledger: roll back what expired ``grace`` seconds ago and may be reverted
    here, then end the expired drills that have no fault left. Returns what was done."""
    data, _version = store.read()
    due = [f for f in ledger.expired(data, now - grace) if revert_here(f)]
    rolled = rollback_entries(store, due, ctx, ROLLED_BACK_BY) if due else []
    data, _version = store.read()
    # The drills to end as this read sees them, by the same rule as the write below.
    expired = [drill_id for drill_id in ledger.drills(data)
               if ledger.end_if_empty(data, drill_id, now - grace) is not None]
    # Ended in the write itself, only if still empty: a drill injecting right now keeps its registration.
    ended = [drill_id for drill_id in expired
             if update_if(store, lambda d, i=drill_id: ledger.end_if_empty(d, i, now - grace))]
    return {"rolled_back": rolled, "drills_ended": ended}


def check_settings(interval: Any, grace: Any) -> None:
    for name, value in (("interval", interval), ("grace", grace)):
        if not isinstance(value, (int, float)) or math.isnan(value) or value < 0 or value > 3600:
            raise FieldError(name, "must be a number of seconds from 0 to 3600, got %r" % (value,))
    if interval <= 0:
        raise FieldError("interval", "must be more than 0 seconds")


def run(params: Mapping[str, Any], interval: float, grace: float, stop: threading.Event,
        log: Callable[[Dict[str, Any]], None], clock: Callable[[], float] = time.time) -> None:
    """Sweep now and every ``interval`` seconds until ``stop`` is set. A failed sweep (the API server away)
    is logged and tried again at the next one: the warden never exits on its own."""
    check_settings(interval, grace)
    store = ledger_store(params)
    ctx = from_params(params, False)
    while True:
        try:
            done = sweep(store, ctx, clock(), grace)
            for row in done["rolled_back"]:
                log({"event": "rolled_back", "fault": row.get("id"), "node": row.get("node"),
                     "rollback": row.get("rollback"), "error": row.get("error")})
            for drill_id in done["drills_ended"]:
                log({"event": "drill_ended", "drill": drill_id})
        except (GpufleetError, OSError) as exc:
            log({"event": "sweep_failed", "error": str(exc)})
        if stop.wait(interval):
            return


def parse_slurm_settings(text: Optional[str]) -> Dict[str, Any]:
    """The --slurm-settings JSON: slurm_api, the rest_* options, slurm_conf and slurm_bin_dir only."""
    if not text:
        return {}
    try:
        settings = json.loads(text)
    except ValueError as exc:
        raise FieldError("slurm_settings", "is not JSON: %s" % exc) from None
    if not isinstance(settings, dict) or any(key not in SLURM_SETTINGS for key in settings):
        raise FieldError("slurm_settings", "must be an object of %s" % ", ".join(SLURM_SETTINGS))
    return settings


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="gpufleet-chaos-warden", description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--kubeconfig", help="kubeconfig of the cluster that holds the ledger")
    parser.add_argument("--context")
    parser.add_argument("--namespace", default="gpufleet-system", help="namespace of the ledger ConfigMap")
    parser.add_argument("--ledger-file", help="the ledger's state file, without Kubernetes")
    parser.add_argument("--lab-dir", help="the lab's directory (lab faults)")
    parser.add_argument("--slurm-conf")
    parser.add_argument("--slurm-settings", help="JSON: how the drills reach Slurm (slurm_api, rest_url, ...)")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between two looks at the ledger")
    parser.add_argument("--grace", type=float, default=10.0,
                        help="seconds after a fault's expiry before the warden rolls it back")
    parser.add_argument("--once", action="store_true", help="one sweep, then exit")
    args = parser.parse_args(argv)
    params = {"kubeconfig": args.kubeconfig, "context": args.context, "namespace": args.namespace,
              "ledger_file": args.ledger_file, "lab_dir": args.lab_dir, "slurm_conf": args.slurm_conf}
    stop = threading.Event()

    def log(record: Dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(dict(record, time=round(time.time(), 3)), sort_keys=True) + "\n")
        sys.stdout.flush()

    def on_signal(_signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if args.once:
        stop.set()  # run() sweeps once, then sees it
    try:
        params.update(parse_slurm_settings(args.slurm_settings))
        if has_slurm(params):
            # A bad option or an unreadable secret is refused now, naming it, not at the first expired fault.
            drill_slurm(params).check_credentials()
        log({"event": "started", "interval": args.interval, "grace": args.grace,
             "slurm_api": params.get("slurm_api") or "cli"})
        run(params, args.interval, args.grace, stop, log)
    except GpufleetError as exc:
        log({"event": "refused", "error": str(exc), "field": getattr(exc, "field", None)})
        return 2
    log({"event": "stopped"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
