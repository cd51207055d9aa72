#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE); modules are also offered under the
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: Apache-2.0 OR GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lab_process
short_description: Run a lab daemon as a detached process tracked by its recorded PID
version_added: 0.1.0
description:
  - Starts a daemon of the lab (etcd, kube-apiserver, kwok, slurmctld, slurmd, Prometheus, ...)
    detached in its own session, with output appended to O(log_dir)/O(name).log, and records its
    PID, argv and kernel start time in O(run_dir)/O(name).pid.
  - Idempotent. A recorded process that is alive and runs the same argv is left alone; a changed
    argv restarts it.
  - Stops processes only through their record, never by name. The start time in the record
    guards against signalling an unrelated process that reuses the PID.
author: gpufleet.resilience contributors (@gpufleet)
options:
  name:
    description:
      - Name of the process; the record is O(run_dir)/O(name).pid.
      - Required unless O(all=true) or O(processes).
    type: str
  processes:
    description:
      - Several processes in one module run (one Python start instead of one per process), each
        with its own O(processes[].name), O(processes[].argv), O(processes[].env) and
        O(processes[].wait_for); O(run_dir), O(log_dir), O(chdir), O(user) and O(stop_timeout)
        are shared, as is O(wait_for) for an entry without one.
      - They are handled one after the other, in the order given; the first that fails stops the run,
        naming it (V(processes[2]) and its name).
      - A stopped entry (O(processes[].state), else O(state)) uses only its O(processes[].name).
    type: list
    elements: dict
    version_added: 0.5.0
    suboptions:
      name:
        description: Name of the process.
        type: str
        required: true
      argv:
        description: Program and arguments. Required with O(state=started).
        type: list
        elements: str
      env:
        description: Extra environment variables.
        type: dict
      chdir:
        description: Working directory of this process (O(chdir) by default).
        type: path
      user:
        description: User this process runs as (O(user) by default).
        type: str
        version_added: 0.6.0
      state:
        description:
          - V(started) or V(stopped) for this process (O(state) by default), so that one run can start some
            processes and stop others (a daemon a setting turned off).
        type: str
        choices: [started, stopped]
        version_added: 0.6.0
      wait_for:
        description: Readiness check of this process, as O(wait_for) (O(wait_for) by default).
        type: dict
        suboptions:
          tcp:
            description: V(host:port) that must accept a connection.
            type: str
          http:
            description: URL that must answer 2xx.
            type: str
          file:
            description: Path that must exist.
            type: path
          ca:
            description: CA bundle for an V(https) O(processes[].wait_for.http).
            type: path
          cert:
            description: Client certificate for an V(https) O(processes[].wait_for.http).
            type: path
          key:
            description: Client key for O(processes[].wait_for.cert).
            type: path
          insecure:
            description: Skip TLS verification of O(processes[].wait_for.http).
            type: bool
            default: false
          timeout:
            description: Seconds to wait.
            type: float
            default: 60
  argv:
    description: Program and arguments, as a list. Never a shell string.
    type: list
    elements: str
  env:
    description: Extra environment variables, on top of a minimal PATH/HOME/LANG environment.
    type: dict
    default: {}
  chdir:
    description: Working directory of the process.
    type: path
  user:
    description: Run the process as this user (for daemons that refuse to run as root).
    type: str
  run_dir:
    description: Directory holding the PID records.
    type: path
    required: true
  log_dir:
    description: Directory for the logs. Defaults to a C(log) directory beside O(run_dir).
    type: path
  state:
    description:
      - V(started) makes sure the process runs with O(argv).
      - V(stopped) sends SIGTERM to the recorded process group, then SIGKILL after O(stop_timeout).
    type: str
    choices: [started, stopped]
    default: started
  all:
    description: With O(state=stopped), stop every process recorded in O(run_dir).
    type: bool
    default: false
  stop_timeout:
    description: Seconds between SIGTERM and SIGKILL.
    type: float
    default: 15
  wait_for:
    description:
      - Readiness check after a start (and, when the process already runs, a quick re-check).
      - Fails with the tail of the log when the process dies or does not get ready in time.
    type: dict
    suboptions:
      tcp:
        description: V(host:port) that must accept a connection.
        type: str
      http:
        description: URL that must answer 2xx.
        type: str
      file:
        description: Path that must exist.
        type: path
      ca:
        description: CA bundle for an V(https) O(wait_for.http).
        type: path
      cert:
        description: Client certificate for an V(https) O(wait_for.http).
        type: path
      key:
        description: Client key for O(wait_for.cert).
        type: path
      insecure:
        description: Skip TLS verification of O(wait_for.http).
        type: bool
        default: false
      timeout:
        description: Seconds to wait.
        type: float
        default: 60
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
notes:
  - Used by the lab roles. Not meant for production daemons, which belong to systemd.
"""

EXAMPLES = r"""
- name: Run kube-apiserver for the lab
  gpufleet.resilience.lab_process:
    name: kube-apiserver
    run_dir: /var/tmp/gpufleet-lab/run
    argv: [/root/.cache/gpufleet/bin/kube-apiserver, --secure-port=16443, --bind-address=127.0.0.1]
    wait_for:
      http: https://127.0.0.1:16443/readyz
      ca: /var/tmp/gpufleet-lab/kube/ca.crt
      timeout: 90

- name: Run the slurmd of two nodes in one module run
  gpufleet.resilience.lab_process:
    run_dir: /var/tmp/gpufleet-lab/run
    processes:
      - name: slurmd-gpu-a-001
        argv: [/usr/sbin/slurmd, -D, -N, gpu-a-001, -f, /var/tmp/gpufleet-lab/slurm/slurm.conf]
        wait_for: {tcp: "127.0.0.1:17001", timeout: 60}
      - name: slurmd-gpu-a-002
        argv: [/usr/sbin/slurmd, -D, -N, gpu-a-002, -f, /var/tmp/gpufleet-lab/slurm/slurm.conf]
        wait_for: {tcp: "127.0.0.1:17002", timeout: 60}

- name: Stop everything the lab started
  gpufleet.resilience.lab_process:
    run_dir: /var/tmp/gpufleet-lab/run
    state: stopped
    all: true
"""

RETURN = r"""
action:
  description: What was done.
  returned: always
  type: str
  sample: start
pid:
  description: PID of the running process.
  returned: when O(state=started)
  type: int
  sample: 4242
stopped:
  description: Names of the processes that were stopped.
  returned: when O(state=stopped)
  type: list
  elements: str
  sample: [slurmd-gpu-a-001, slurmctld]
ready_after:
  description: Seconds from start until the readiness check passed.
  returned: when a process was started with O(wait_for)
  type: float
  sample: 2.4
results:
  description:
    - With O(processes), one entry per process, in order, with its C(name), C(changed), C(action) and
      C(pid) or C(stopped).
  returned: when O(processes) is given
  type: list
  elements: dict
  sample: [{name: slurmd-gpu-a-001, changed: false, action: none, pid: 4242}]
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.lab.process import (
    LabProcessError,
    ProcessSpec,
    ReadinessCheck,
    ensure_started,
    ensure_stopped,
    stop_all,
)

_WAIT_FOR = dict(
    tcp=dict(type="str"), http=dict(type="str"), file=dict(type="path"),
    ca=dict(type="path"), cert=dict(type="path"), key=dict(type="path", no_log=False),
    insecure=dict(type="bool", default=False), timeout=dict(type="float", default=60),
)


def argspec():
    return dict(
        name=dict(type="str"),
        processes=dict(type="list", elements="dict", options=dict(
            name=dict(type="str", required=True),
            argv=dict(type="list", elements="str"),
            env=dict(type="dict"),
            chdir=dict(type="path"),
            user=dict(type="str"),
            state=dict(type="str", choices=["started", "stopped"]),
            wait_for=dict(type="dict", options=_WAIT_FOR),
        )),
        argv=dict(type="list", elements="str"),
        env=dict(type="dict", default={}),
        chdir=dict(type="path"),
        user=dict(type="str"),
        run_dir=dict(type="path", required=True),
        log_dir=dict(type="path"),
        state=dict(type="str", choices=["started", "stopped"], default="started"),
        all=dict(type="bool", default=False),
        stop_timeout=dict(type="float", default=15),
        wait_for=dict(type="dict", options=_WAIT_FOR),
    )


def _log_dir(params):
    return params["log_dir"] or os.path.join(os.path.dirname(params["run_dir"].rstrip("/")), "log")


def run_many(module):
    """Each of O(processes) in order; (changed, results). A failure names the entry."""
    params = module.params
    results = []
    for index, entry in enumerate(params["processes"]):
        try:
            if (entry["state"] or params["state"]) == "stopped":
                outcome = ensure_stopped(params["run_dir"], [entry["name"]], module.check_mode, params["stop_timeout"])
                results.append(dict(name=entry["name"], changed=outcome.changed, action=outcome.action,
                                    stopped=outcome.stopped))
                continue
            if not entry.get("argv"):
                raise LabProcessError("argv: is required with state started")
            spec = ProcessSpec(name=entry["name"], argv=entry["argv"], env=entry["env"] or params["env"],
                               chdir=entry["chdir"] or params["chdir"], user=entry["user"] or params["user"],
                               run_dir=params["run_dir"],
                               log_dir=_log_dir(params))
            wait_for = entry["wait_for"] or params["wait_for"]
            check = ReadinessCheck(**wait_for) if wait_for else None
            outcome = ensure_started(spec, check, module.check_mode, params["stop_timeout"])
        except LabProcessError as exc:
            module.fail_json(msg="processes[%d] (%s): %s" % (index, entry["name"], exc), results=results,
                             changed=any(result["changed"] for result in results))
        results.append(dict(name=entry["name"], changed=outcome.changed, action=outcome.action, pid=outcome.pid,
                            ready_after=outcome.ready_after))
    return any(result["changed"] for result in results), results


def run(module):
    params = module.params
    run_dir = params["run_dir"]
    if params["state"] == "stopped":
        if params["all"]:
            return stop_all(run_dir, module.check_mode, params["stop_timeout"])
        return ensure_stopped(run_dir, [params["name"]], module.check_mode, params["stop_timeout"])
    spec = ProcessSpec(
        name=params["name"], argv=params["argv"], env=params["env"], chdir=params["chdir"], user=params["user"],
        run_dir=run_dir, log_dir=_log_dir(params),
    )
    check = ReadinessCheck(**params["wait_for"]) if params["wait_for"] else None
    return ensure_started(spec, check, module.check_mode, params["stop_timeout"])


def main():
    module = AnsibleModule(
        argument_spec=argspec(),
        supports_check_mode=True,
        required_if=[("state", "started", ("name", "processes"), True), ("all", False, ("name", "processes"), True)],
        mutually_exclusive=[("all", "name", "processes"), ("processes", "argv")],
    )
    if module.params["processes"] is not None:
        changed, results = run_many(module)
        module.exit_json(changed=changed, action="change" if changed else "none", results=results)
    if module.params["state"] == "started" and not module.params["argv"]:
        module.fail_json(msg="argv: is required with state started and a name")
    try:
        outcome = run(module)
    except LabProcessError as exc:
        module.fail_json(msg=str(exc))
    result = dict(changed=outcome.changed, action=outcome.action)
    if module.params["state"] == "started":
        result.update(pid=outcome.pid, ready_after=outcome.ready_after)
    else:
        result.update(stopped=outcome.stopped)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
