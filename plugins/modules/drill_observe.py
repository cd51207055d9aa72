#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE); modules are also offered under the
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: Apache-2.0 OR GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: drill_observe
short_description: Watch a chaos drill's feedback loop - detected, alerted, scheduler responded, job recovered
version_added: 0.4.0
description:
  - After the injection, polls until each loop step is seen or its deadline (from the drill) passes.
  - I(detected) - the drill's PromQL (the agent's metric) rises above the baseline or reaches its threshold.
  - I(alerted) - Alertmanager's API lists the expected alerts for every target (or, for a fault no rule covers, any
    alert about it).
  - I(scheduler) - for a fatal fault, Slurm shows the node DRAIN/DOWN (or replaced) and Kubernetes cordoned (or
    replaced).
  - I(recovered) - the protected job was requeued, RUNS on another node and resumed from its checkpoint
    (train_sim's output gives the step and the steps lost); for a non-fatal fault, it keeps running.
  - A missed deadline is a finding with the last thing seen, never an error. The watch aborts when the remediation
    circuit breaker trips, or when one of O(abort_conditions) is breached. Read-only.
  - With O(watch_for), the watch stops after that many seconds if it is not done and returns RV(done=false), a
    RV(progress) line and a RV(carry); called again with O(carry), it goes on where it stopped. So a playbook can
    say where a long observation is as it goes (the chaos_drill role prints RV(progress) each slice).
author: gpufleet.resilience contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.resilience.attributes
  - gpufleet.resilience.attributes.read_only
  - gpufleet.resilience.chaos
  - gpufleet.resilience.slurm_api.rest
  - gpufleet.resilience.kube
options:
  drill:
    description: The drill that M(gpufleet.resilience.chaos_gate) returned.
    type: dict
    required: true
  injected_at:
    description: When the fault went in (epoch seconds), from M(gpufleet.resilience.chaos_fault).
    type: float
    required: true
  baseline:
    description: The baseline from M(gpufleet.resilience.drill_check).
    type: dict
    default: {}
  protected_job:
    description: The Slurm job id the drill protects.
    type: str
  protected_output:
    description: The protected job's output file (train_sim's event lines), for the resume step and steps lost.
    type: path
  prometheus_url:
    description: Prometheus base URL.
    type: str
  alertmanager_url:
    description: Alertmanager base URL.
    type: str
  poll_interval:
    description: Seconds between looks.
    type: float
    default: 1
  watch_for:
    description: Stop after this many seconds if the watch is not done (RV(done=false)); omit to watch to the end.
    type: float
  carry:
    description: The RV(carry) of the previous call, to go on where it stopped. Data, checked for its shape.
    type: dict
  abort_conditions:
    description:
      - The drill's brakes, each C({name, query, above, for}) - a PromQL C(query) asked every poll; when its
        value stays above C(above) for C(for) seconds (default 0), the watch aborts, the role rolls the fault back
        at once and the report says V(aborted) and which brake, with the value seen. A query that yields nothing
        never breaches. C($targets) in a query is the drill's targets as a regular expression.
      - Omitted - the brakes of O(drill) (M(gpufleet.resilience.chaos_gate) checked them), else the default
        brake C(other_nodes_unhealthy), more than one node other than the targets with a verdict other than
        healthy (C(count(gpufleet_node_health_verdict{state!="healthy",node!~"$targets"} == 1)) above 1).
        V([]) - no brake.
      - Needs O(prometheus_url); a bad entry fails naming its field, e.g. C(abort_conditions[0].above).
    type: list
    elements: dict
"""

EXAMPLES = r"""
- name: Watch the loop
  gpufleet.resilience.drill_observe:
    drill: "{{ gate.drill }}"
    injected_at: "{{ injected.injected_at }}"
    prometheus_url: http://127.0.0.1:9090
    alertmanager_url: http://127.0.0.1:9093
"""

RETURN = r"""
done:
  description: True when every step is decided (or the watch aborted); false when O(watch_for) ran out first.
  type: bool
  returned: always
progress:
  description:
    - "Where the watch is, e.g. C(at 62 s: detected at 2.1 s; waiting for scheduler (deadline 120 s))."
  type: str
  returned: always
carry:
  description: With RV(done=false), what the next call's O(carry) takes.
  type: dict
  returned: when not done
steps:
  description:
    - Each loop step (step, verdict pass|fail|skipped|not_observable, expected, observed, deadline_s, at,
      elapsed_s).
  type: list
  elements: dict
  returned: when done
events:
  description: The timeline (inject, detect, alert, quarantine, requeue, resume) with times.
  type: list
  elements: dict
  returned: when done
metrics:
  description: time_to_detect_s, time_to_alert_s, time_to_quarantine_s, time_to_recover_s, steps_lost.
  type: dict
  returned: when done
gaps:
  description: Observability gaps - what to add where a fault went unseen or unalerted.
  type: list
  elements: dict
  returned: when done
aborted:
  description: Why the watch stopped early, if it did.
  type: str
  returned: when done
phase:
  description: The observe phase as the drill report records it.
  type: dict
  returned: when done
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.api import observe_drill
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.args import common_argspec, run_module


def main():
    module = AnsibleModule(
        argument_spec=common_argspec(
            drill=dict(type="dict", required=True),
            injected_at=dict(type="float", required=True),
            baseline=dict(type="dict", default={}),
            protected_job=dict(type="str"),
            protected_output=dict(type="path"),
            prometheus_url=dict(type="str"),
            alertmanager_url=dict(type="str"),
            poll_interval=dict(type="float", default=1),
            watch_for=dict(type="float"),
            carry=dict(type="dict"),
            abort_conditions=dict(type="list", elements="dict"),
        ),
        supports_check_mode=True,
    )
    run_module(module, lambda: observe_drill(module.params))


if __name__ == "__main__":
    main()
