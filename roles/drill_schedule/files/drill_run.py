# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Run one scheduled chaos drill: what a systemd timer or a cron line starts on the control host.

    python drill_run.py --config /var/lib/gpufleet/drills/<name>/schedule.json

1. Takes a lock (``flock``) shared by every scheduled drill of this host: a drill that would start
   while another one runs records ``skipped`` and exits 0 (the next timer tries again).
2. Runs playbooks/drill.yml with ansible-runner, with ``chaos_drill_exclusive: true``: the drill's
   gate refuses when any other drill or a remediation is under way in the fleet, whoever started
   it. A refusal is recorded as ``refused``, with the gate's reasons; nothing was injected.
3. Keeps the reports: the drill writes them under ``reports/``; only the newest ``keep`` drills
   are kept there (ansible-runner's own artifacts rotate the same way).
4. Writes ``last-run.json`` (status passed, failed, refused, skipped or error; rc, times, the new
   drills, the tail of the output) next to the reports, for people and for monitoring (its mtime
   is the last run), whatever happened.

Standard library and ansible-runner only: it runs outside Ansible, from the scheduler.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import sys
import time
from typing import Any, Dict, List, Mapping

REPORT = "drill-"
REFUSED_MARK = "refused"


def load(path: str) -> Dict[str, Any]:
    with open(path, encoding="utf-8") as handle:
        config = json.load(handle)
    for key in ("name", "playbook", "run_dir", "reports_dir", "lock", "extravars"):
        if key not in config:
            raise SystemExit("%s: missing %r" % (path, key))
    return config


def drill_ids(reports_dir: str) -> List[str]:
    """The drills whose JSON document is in ``reports_dir``, oldest first."""
    found = []
    for name in os.listdir(reports_dir) if os.path.isdir(reports_dir) else []:
        if name.startswith(REPORT) and name.endswith(".json"):
            found.append((os.path.getmtime(os.path.join(reports_dir, name)), name[len(REPORT):-len(".json")]))
    return [drill_id for _mtime, drill_id in sorted(found)]


def prune(reports_dir: str, keep: int) -> List[str]:
    """Delete every file of the drills older than the newest ``keep``; returns what was deleted."""
    old = drill_ids(reports_dir)[:-keep] if keep > 0 else []
    deleted = []
    for name in sorted(os.listdir(reports_dir)) if old else []:
        if any(name.startswith("%s%s." % (REPORT, drill_id)) for drill_id in old):
            os.unlink(os.path.join(reports_dir, name))
            deleted.append(name)
    return deleted


def status_of(rc: int, output: str) -> str:
    if rc == 0:
        return "passed"
    # The gate's refusal (chaos_gate fails with "drill refused: <field>: <why>"): nothing injected.
    if "drill refused" in output.lower():
        return REFUSED_MARK
    return "failed"


def run(config: Mapping[str, Any]) -> Dict[str, Any]:
    import ansible_runner  # imported here so --help and the lock work without it

    os.makedirs(config["reports_dir"], exist_ok=True)
    os.makedirs(config["run_dir"], exist_ok=True)
    # A scheduler starts us with a bare PATH: ansible-playbook is the one beside this Python.
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin")
    before = set(drill_ids(config["reports_dir"]))
    extravars = dict(config["extravars"], chaos_drill_report_dir=config["reports_dir"], chaos_drill_exclusive=True)
    runner = ansible_runner.run(
        private_data_dir=config["run_dir"],
        playbook=config["playbook"],
        inventory=config.get("inventory") or None,
        extravars=extravars,
        envvars=dict(config.get("envvars") or {}),
        ident=time.strftime("%Y%m%d-%H%M%S", time.gmtime()),
        rotate_artifacts=int(config.get("keep", 20)),
        quiet=True,
    )
    output = runner.stdout.read() if runner.stdout else ""
    new = [drill_id for drill_id in drill_ids(config["reports_dir"]) if drill_id not in before]
    return {"rc": runner.rc, "status": status_of(runner.rc, output), "runner_status": runner.status,
            "drills": new, "output_tail": output[-4000:]}


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description="Run one scheduled gpufleet chaos drill.")
    parser.add_argument("--config", required=True, help="the schedule.json the drill_schedule role wrote")
    config = load(parser.parse_args(argv).config)
    started = time.time()
    record: Dict[str, Any] = {"name": config["name"], "started_at": started}
    os.makedirs(os.path.dirname(config["lock"]) or ".", exist_ok=True)
    with open(config["lock"], "a", encoding="utf-8") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            record.update(status="skipped", why="another scheduled drill of this host is running")
        else:
            print("gpufleet drill %s: starting at %s" % (config["name"], time.strftime("%FT%TZ", time.gmtime())),
                  flush=True)
            try:
                record.update(run(config))
                record["pruned"] = prune(config["reports_dir"], int(config.get("keep", 20)))
            except Exception as exc:  # recorded for people; the timer must see a failure
                record.update(status="error", why="%s: %s" % (type(exc).__name__, exc))
    record["finished_at"] = time.time()
    os.makedirs(config["reports_dir"], exist_ok=True)
    path = os.path.join(config["reports_dir"], "last-run.json")
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=2, sort_keys=True)
    os.replace(path + ".tmp", path)
    print("gpufleet drill %s: %s (rc %s) in %.0fs" % (config["name"], record["status"], record.get("rc", "-"),
                                                      record["finished_at"] - started), flush=True)
    # A refusal or a skip is the schedule working as meant, not a failure of the timer.
    return 0 if record["status"] in ("passed", "skipped", REFUSED_MARK) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
