# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Scheduled drills for sites without AWX: the schedule entries, checked before anything is written.

Pure. ``check(drills, backend)`` returns the entries with their defaults filled in, or raises a
FieldError naming the bad field (``drill_schedule_drills[1].when``), so a bad inventory writes no
timer. The role (roles/drill_schedule) turns each entry into a systemd timer or a cron.d line
that runs roles/drill_schedule/files/drill_run.py, which runs the drill with ansible-runner.

``when`` is a systemd ``OnCalendar=`` expression for the systemd backend (the role also asks
``systemd-analyze calendar`` where it exists) and the five fields of a crontab line for cron.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Sequence

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import experiments
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.params import check_plain, check_target
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import (
    check_name,
    check_number,
    check_path,
    check_text,
)

BACKENDS = ("systemd", "cron")
NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?")
# A crontab field: numbers, names (jan, mon), ranges, lists and steps; five of them.
CRON_FIELD = re.compile(r"(\*|[0-9a-z]+(-[0-9a-z]+)?)(/[0-9]+)?(,(\*|[0-9a-z]+(-[0-9a-z]+)?)(/[0-9]+)?)*")
CRON_MACROS = ("@hourly", "@daily", "@weekly", "@monthly", "@yearly", "@annually", "@midnight")
KEYS = {"name", "experiment", "target", "when", "params", "duration", "dry_run", "enabled", "extra_vars"}


def _when(value: Any, backend: str, field: str) -> str:
    if not isinstance(value, str) or not value.strip() or "%" in value:
        raise FieldError(field, "a %s schedule without newlines or %%, got %r"
                         % ("OnCalendar" if backend == "systemd" else "crontab", value))
    check_text(value, field, 256)  # no newline, no carriage return: one cron or OnCalendar= line
    value = " ".join(value.split())
    if backend == "cron" and value not in CRON_MACROS:
        fields = value.split(" ")
        if len(fields) != 5 or not all(CRON_FIELD.fullmatch(f.lower()) for f in fields):
            raise FieldError(field, "five crontab fields (minute hour day-of-month month day-of-week), e.g. "
                             "'30 3 * * 1', or one of %s; got %r" % (", ".join(CRON_MACROS), value))
    return value


def check(drills: Any, backend: str, variable: str = "drill_schedule_drills") -> List[Dict[str, Any]]:
    if backend not in BACKENDS:
        raise FieldError("drill_schedule_backend", "must be one of %s, got %r" % (", ".join(BACKENDS), backend))
    if not isinstance(drills, Sequence) or isinstance(drills, (str, bytes)):
        raise FieldError(variable, "must be a list of drills, got %r" % (drills,))
    checked: List[Dict[str, Any]] = []
    seen = set()
    for index, entry in enumerate(drills):
        where = "%s[%d]" % (variable, index)
        if not isinstance(entry, Mapping):
            raise FieldError(where, "must be a mapping with name, experiment, target and when")
        unknown = sorted(set(entry) - KEYS)
        if unknown:
            raise FieldError("%s.%s" % (where, unknown[0]), "unknown key; keys: %s" % ", ".join(sorted(KEYS)))
        name = entry.get("name")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise FieldError(where + ".name", "lowercase letters, digits and '-', at most 40, got %r" % (name,))
        if name in seen:
            raise FieldError(where + ".name", "%r is used twice" % name)
        seen.add(name)
        try:
            experiment = experiments.get(entry.get("experiment"))
        except FieldError as exc:
            raise FieldError(where + ".experiment", exc.message) from exc
        target = check_target(entry.get("target"), where + ".target")
        duration = entry.get("duration", 600)
        check_number(duration, where + ".duration", above=0)
        for key in ("params", "extra_vars"):
            if not isinstance(entry.get(key, {}), Mapping):
                raise FieldError("%s.%s" % (where, key), "must be a mapping")
            check_plain(entry.get(key) or {}, "%s.%s" % (where, key))
        for key in ("dry_run", "enabled"):
            if not isinstance(entry.get(key, key == "enabled"), bool):
                raise FieldError("%s.%s" % (where, key), "must be true or false")
        checked.append({
            "name": name, "experiment": experiment.name, "target": target,
            "when": _when(entry.get("when"), backend, where + ".when"), "params": dict(entry.get("params") or {}),
            "duration": duration, "dry_run": entry.get("dry_run", False), "enabled": entry.get("enabled", True),
            "extra_vars": dict(entry.get("extra_vars") or {}),
        })
    return checked


def check_settings(user: Any = None, python: Any = None, directory: Any = None) -> None:
    """The role settings that reach every cron line and unit file (the account, the Python, the directory)."""
    if user is not None:
        check_name(user, "drill_schedule_user", r"[a-z_][a-z0-9_-]{0,31}", "a POSIX user name")
    if python is not None:
        check_path(python, "drill_schedule_python")
    if directory is not None:
        check_path(directory, "drill_schedule_dir")
