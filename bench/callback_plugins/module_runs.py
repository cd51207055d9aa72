# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Counts the module runs of a playbook run (bench/remediation.py): task results that ran a module
on a host, not the controller-side actions (debug, set_fact, include, pause, ...).

Enabled with ANSIBLE_CALLBACK_PLUGINS=bench/callback_plugins ANSIBLE_CALLBACKS_ENABLED=module_runs;
writes {"runs": N, "modules": {name: count}} to $GPUFLEET_MODULE_RUNS_FILE at the end."""

from __future__ import annotations

import json
import os
from collections import Counter

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: module_runs
type: aggregate
short_description: Count the module runs of a playbook run (bench only)
description: Writes the count to the file named by GPUFLEET_MODULE_RUNS_FILE.
"""

# Actions that run on the controller and start no module process.
CONTROLLER_ONLY = {"debug", "set_fact", "meta", "include_tasks", "import_tasks", "include_role", "import_role",
                   "pause", "fail", "assert", "include_vars", "add_host", "group_by", "set_stats",
                   "validate_argument_spec"}


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "module_runs"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.modules = Counter()

    def _count(self, result):
        action = result._task.action.split(".")[-1]
        if action not in CONTROLLER_ONLY:
            self.modules[result._task.action] += 1

    def v2_runner_on_ok(self, result):
        self._count(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._count(result)

    def v2_runner_retry(self, result):  # each try of an `until` loop is a module run of its own
        self._count(result)

    def v2_playbook_on_stats(self, stats):
        target = os.environ.get("GPUFLEET_MODULE_RUNS_FILE")
        if target:
            with open(target, "w", encoding="utf-8") as handle:
                json.dump({"runs": sum(self.modules.values()), "modules": dict(self.modules)}, handle, indent=1)
