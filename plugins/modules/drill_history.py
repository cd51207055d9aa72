#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE); modules are also offered under the
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: Apache-2.0 OR GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: drill_history
short_description: Compare the last drills of one experiment - did time-to-recover regress?
version_added: 0.4.0
description:
  - Reads the C(drill-*.json) documents that M(gpufleet.resilience.drill_report) wrote into O(dest), keeps the last
    O(last) of O(experiment) by start time, and compares the newest time to recover with the median of the earlier
    ones.
  - It regressed when it is slower than that median by more than O(tolerance). Fewer than two drills with a time to
    recover give no verdict (RV(why) says so).
author: gpufleet.resilience contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.resilience.attributes
  - gpufleet.resilience.attributes.read_only
options:
  dest:
    description: Directory of the drill reports.
    type: path
    required: true
  experiment:
    description: The experiment whose drills are compared, for example V(gpu_xid).
    type: str
    required: true
  last:
    description: How many of the experiment's most recent drills to compare (at least 2).
    type: int
    default: 5
  tolerance:
    description: How much slower than the median the newest drill may be, as a fraction (V(0.2) is 20 %).
    type: float
    default: 0.2
  fail_on_regression:
    description: Fail the task when time to recover regressed.
    type: bool
    default: false
seealso:
  - module: gpufleet.resilience.drill_report
"""

EXAMPLES = r"""
- name: Did the XID drill get slower to recover?
  gpufleet.resilience.drill_history:
    dest: /var/log/gpufleet/drills
    experiment: gpu_xid
    last: 10
    fail_on_regression: true
"""

RETURN = r"""
drills:
  description: The compared drills, oldest first.
  type: list
  elements: dict
  returned: always
  contains:
    id:
      description: The drill's id.
      type: str
    started_at:
      description: When it started (epoch seconds).
      type: float
    result:
      description: V(passed), V(failed), V(aborted), V(refused) or V(dry_run).
      type: str
    time_to_recover_s:
      description: Seconds from the injection until the job ran again; V(null) when it did not.
      type: float
    steps_lost:
      description: Steps of work lost; V(null) when not measured.
      type: int
    score:
      description: The drill's resiliency score, 0-100 (the loop steps weighted, each less up to half its weight
        for the time it took against its deadline); V(null) for a dry run or a refusal.
      type: float
score_trend:
  description:
    - The newest resiliency score against the median of the earlier scored drills (C(newest), C(median_before),
      C(change), and C(scores), oldest first); V(null) with fewer than two scored drills.
  type: dict
  returned: always
regressed:
  description: Whether the newest time to recover is worse than the median by more than O(tolerance).
  type: bool
  returned: always
why:
  description: The verdict with its figures, or why there is none (C(not enough drills ...)).
  type: str
  returned: always
  sample: "d-20261202-101500-ef56 recovered in 71.0 s; the median of 4 drills before it is 45.6 s, so the limit with
    20 % tolerance is 54.7 s: regressed"
figures:
  description: The comparison (newest, newest_s, median_s, limit_s, tolerance, compared); V(null) without a verdict.
  type: dict
  returned: always
unreadable:
  description: C(drill-*.json) files that are not drill documents, each with the reason (C(file), C(why)).
  type: list
  elements: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.report import drill_history


def argspec():
    return dict(
        dest=dict(type="path", required=True),
        experiment=dict(type="str", required=True),
        last=dict(type="int", default=5),
        tolerance=dict(type="float", default=0.2),
        fail_on_regression=dict(type="bool", default=False),
    )


def main():
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)
    params = module.params
    try:
        result = drill_history(params["dest"], params["experiment"], params["last"], params["tolerance"])
    except GpufleetError as exc:
        module.fail_json(msg=str(exc), field=getattr(exc, "field", None))
    if result["regressed"] and params["fail_on_regression"]:
        module.fail_json(msg="time to recover regressed: %s" % result["why"], **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
