#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE); modules are also offered under the
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: Apache-2.0 OR GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lab_files
short_description: Make many lab files and directories as wanted in one module run
version_added: 0.5.0
description:
  - Looks at every path of O(files) and writes only what differs from what is wanted (a missing
    directory or file, other content, mode, owner or group), in the order given, so a directory can
    come before the files in it.
  - One module run for the whole list instead of one per item (V(ansible.builtin.file) or
    V(ansible.builtin.copy) with a loop start Python once per item); a rerun on an unchanged lab
    reads the files and writes nothing.
  - New content is written to a temporary file beside the target and renamed over it, after
    O(files[].validate) (when given) accepted it.
author: gpufleet.resilience contributors (@gpufleet)
options:
  files:
    description: The paths and what each should be.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: Absolute path.
        type: path
        required: true
      state:
        description:
          - V(file) (the default when O(files[].content) is given), V(directory) (the default
            otherwise) or V(absent).
          - A directory is created with its missing parents; another kind of file at O(files[].path)
            is an error, never replaced.
        type: str
        choices: [file, directory, absent]
      content:
        description: The file's content (text, written as UTF-8). Required with O(files[].state=file).
        type: str
      mode:
        description: Octal mode as a string, for example V('0644'). Left as it is when not given.
        type: raw
      owner:
        description: User name or UID. Left as it is when not given.
        type: str
      group:
        description: Group name or GID. Left as it is when not given.
        type: str
      force:
        description: With V(false), the content of a file that exists is left alone (mode and owner are still set).
        type: bool
        default: true
      validate:
        description:
          - A command with V(%s) that must accept the new content (the temporary file's path replaces
            V(%s)) before it replaces the file. Runs only when the content changes.
        type: str
      diff:
        description:
          - With V(false), the diff of this file says what changed but not its content (a file that may hold
            a secret while the task logs others).
        type: bool
        default: true
      owned_by_runner:
        description:
          - When the path exists, it must be no symlink and belong to the user that runs the module;
            otherwise the module fails, naming it, before it writes anything of O(files).
          - For a lab directory in a place anyone may create it first (V(/var/tmp)), whose maker would keep
            ownership and could swap what the lab writes there.
        type: bool
        default: false
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: full
notes:
  - Set C(no_log) on the task when a content is a secret; the diff then is not shown either.
seealso:
  - module: ansible.builtin.file
  - module: ansible.builtin.copy
"""

EXAMPLES = r"""
- name: Create the lab directories and export a variable for lab shells
  gpufleet.resilience.lab_files:
    files:
      - {path: /var/tmp/gpufleet-lab, mode: "0755"}
      - {path: /var/tmp/gpufleet-lab/kube, mode: "0700"}
      - path: /var/tmp/gpufleet-lab/env.d/kubernetes.sh
        content: "export KUBECONFIG=/var/tmp/gpufleet-lab/kube/admin.kubeconfig\n"
        mode: "0644"

- name: A kernel-log file per node, created empty once and never truncated
  gpufleet.resilience.lab_files:
    files:
      - {path: /var/tmp/gpufleet-lab/kmsg/gpu-a-001.log, content: "", force: false, mode: "0644"}
      - {path: /var/tmp/gpufleet-lab/kmsg/gpu-a-002.log, content: "", force: false, mode: "0644"}
"""

RETURN = r"""
changed_paths:
  description: The paths that needed something (in check mode, that would).
  returned: always
  type: list
  elements: str
  sample: [/var/tmp/gpufleet-lab/agent/gpu-a-003.yml]
changes:
  description: What each of those paths needed, of V(create), V(content), V(mode), V(owner), V(group), V(remove).
  returned: always
  type: dict
  sample: {/var/tmp/gpufleet-lab/agent/gpu-a-003.yml: [content]}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab.lab_files import (
    LabFilesError,
    ensure,
    parse,
)


def argspec():
    return dict(
        files=dict(type="list", elements="dict", required=True, options=dict(
            path=dict(type="path", required=True),
            state=dict(type="str", choices=["file", "directory", "absent"]),
            content=dict(type="str"),
            mode=dict(type="raw"),
            owner=dict(type="str"),
            group=dict(type="str"),
            force=dict(type="bool", default=True),
            validate=dict(type="str"),
            diff=dict(type="bool", default=True),
            owned_by_runner=dict(type="bool", default=False),
        )),
    )


def diff(change):
    """Content for a file whose content changes; otherwise what changes, in words."""
    if "after" in change:
        before, after = change["before"], change["after"]
    else:
        before = "%s: %s\n" % (change["state"], "absent" if "create" in change["needs"] else "present")
        after = "%s: %s\n" % (change["state"], ", ".join(change["needs"]))
    return dict(before_header=change["path"], after_header=change["path"], before=before, after=after)


def main():
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)

    def validate(command, path):
        rc, out, err = module.run_command(command.replace("%s", path), use_unsafe_shell=False)
        if rc != 0:
            raise LabFilesError("validate %r refused the new content (rc %d): %s"
                                % (command, rc, (err or out).strip()[-2000:]))

    try:
        specs = parse([{key: value for key, value in entry.items() if value is not None}
                       for entry in module.params["files"]])
        changes = ensure(specs, module.check_mode, validate)
    except GpufleetError as exc:
        module.fail_json(msg=str(exc))
    result = dict(
        changed=bool(changes),
        changed_paths=[change["path"] for change in changes],
        changes={change["path"]: change["needs"] for change in changes},
    )
    if module._diff:
        result["diff"] = [diff(change) for change in changes]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
