#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE); modules are also offered under the
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: Apache-2.0 OR GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: drill_report
short_description: Write the reports of a chaos drill (JSON, JUnit XML, Markdown, HTML, SVG timeline)
version_added: 0.4.0
description:
  - Renders one drill document (schema C(gpufleet.drill/v1)) into O(dest) as C(drill-<id>.json),
    C(drill-<id>.junit.xml) (one testcase per loop step and per failed phase, for AWX and CI),
    C(drill-<id>.md), C(drill-<id>.html) (one self-contained page with the timeline inline) and
    C(drill-<id>.svg) (the timeline picture).
  - Each file is written through a temporary file and a rename, and only when its content changes, so a rerun
    reports no change.
  - A document without C(id), C(experiment) or C(steps), or with an unknown verdict or result, fails and
    names the field.
author: gpufleet.resilience contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.resilience.attributes
attributes:
  check_mode:
    support: full
    details: Writes nothing; RV(changed_files) lists the files that would be written.
  diff_mode:
    support: none
options:
  drill:
    description: The drill document, as the drill engine builds it (C(schema), C(id), C(experiment), C(steps), ...).
    type: dict
    required: true
  dest:
    description: Directory of the reports; created when missing.
    type: path
    required: true
  formats:
    description: The files to write.
    type: list
    elements: str
    choices: [json, junit, markdown, html, svg]
    default: [json, junit, markdown, html, svg]
seealso:
  - module: gpufleet.resilience.drill_history
"""

EXAMPLES = r"""
- name: Write the drill's reports
  gpufleet.resilience.drill_report:
    drill: "{{ drill_document }}"
    dest: /var/log/gpufleet/drills
  register: report

- name: Say how it went
  ansible.builtin.debug:
    msg: "{{ report.summary }}"
"""

RETURN = r"""
files:
  description: The path of each format's file (written, unchanged, or in check mode to be written).
  type: dict
  returned: always
  sample:
    json: /var/log/gpufleet/drills/drill-d-20261130-195000-ab12.json
    junit: /var/log/gpufleet/drills/drill-d-20261130-195000-ab12.junit.xml
    html: /var/log/gpufleet/drills/drill-d-20261130-195000-ab12.html
changed_files:
  description: The files whose content changed (in check mode, would change).
  type: list
  elements: path
  returned: always
summary:
  description: One line - the drill, its targets, its result, the four loop times and the number of observability gaps.
  type: str
  returned: always
  sample: "drill d-20261130-195000-ab12 gpu_xid on gpu-a-003: passed; detect 2.1s alert 4.3s quarantine 19.8s
    recover 45.2s; 0 gaps"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.report import FORMATS, write_reports


def argspec():
    return dict(
        drill=dict(type="dict", required=True),
        dest=dict(type="path", required=True),
        formats=dict(type="list", elements="str", choices=list(FORMATS), default=list(FORMATS)),
    )


def main():
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)
    params = module.params
    try:
        result = write_reports(params["drill"], params["dest"], params["formats"], module.check_mode)
    except GpufleetError as exc:
        module.fail_json(msg=str(exc), field=getattr(exc, "field", None))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
