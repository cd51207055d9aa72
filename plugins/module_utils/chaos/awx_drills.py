# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Scheduled drills in AWX: the checked plan that playbooks/awx-drills.yml hands to awx.awx.

Pure: no I/O. ``plan()`` checks every drill and notification before the playbook makes its first
API call (a bad field is a FieldError naming it as the user spells it, ``awx_drills_drills[1].rrule``)
and returns what each awx.awx task needs: the job template's survey, the schedule's survey answers
and the names of the objects, so the playbook's tasks stay plain.

The survey asks exactly what playbooks/drill.yml takes: target, experiment, dry_run. AWX surveys have
no boolean type, so dry_run is a two-choice question whose answers drill.yml reads with ``| bool``.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Sequence

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import experiments
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.params import check_target
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import check_name, check_text

DRILLS_FIELD = "awx_drills_drills"
NOTIFICATIONS_FIELD = "awx_drills_notifications"

# AWX object names: printable, no slashes (named URLs use '++'), at most 512 characters; ours are
# prefixed, so a drill's own name is kept short and plain.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 _.:-]{0,99}")
# What AWX's own rrule validation accepts (awx/api/serializers.py, SchedulePreviewSerializer):
# one DTSTART with a zone (TZID or a trailing Z), then RRULE/EXRULE lines with a FREQ that is not
# SECONDLY and a COUNT of at most 999.
_DTSTART = re.compile(r"DTSTART(?:;TZID=[A-Za-z0-9_+\-/]+:\d{8}T\d{6}|:\d{8}T\d{6}Z)")
_FREQS = ("MINUTELY", "HOURLY", "DAILY", "WEEKLY", "MONTHLY", "YEARLY")
_URL = re.compile(r"https?://[^/\s\x00-\x1f\x7f]+[^\s\x00-\x1f\x7f]{0,4000}")
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def check_rrule(field: str, rrule: Any) -> str:
    """The rrule as AWX wants it, or a FieldError saying what is missing."""
    if not isinstance(rrule, str) or not rrule.strip():
        raise FieldError(field, "is required: e.g. 'DTSTART;TZID=UTC:20270104T020000 RRULE:FREQ=WEEKLY;BYDAY=MO'")
    parts = rrule.split()
    starts = [part for part in parts if part.startswith("DTSTART")]
    if len(starts) != 1:
        raise FieldError(field, "needs exactly one DTSTART (DTSTART;TZID=Zone:YYYYMMDDTHHMMSS or "
                                "DTSTART:YYYYMMDDTHHMMSSZ), got %r" % rrule)
    if not _DTSTART.fullmatch(starts[0]):
        raise FieldError(field, "DTSTART %r is not DTSTART;TZID=Zone:YYYYMMDDTHHMMSS or DTSTART:YYYYMMDDTHHMMSSZ "
                                "(AWX refuses a DTSTART without a zone)" % starts[0])
    rules = [part for part in parts if not part.startswith("DTSTART")]
    if not any(rule.startswith("RRULE:") for rule in rules):
        raise FieldError(field, "needs an RRULE:FREQ=... after the DTSTART, got %r" % rrule)
    for rule in rules:
        kind, _sep, body = rule.partition(":")
        if kind not in ("RRULE", "EXRULE"):
            raise FieldError(field, "%r is neither RRULE: nor EXRULE:" % rule)
        pairs = dict(item.partition("=")[::2] for item in body.split(";") if item)
        if pairs.get("FREQ") not in _FREQS:
            raise FieldError(field, "%s needs FREQ= one of %s, got %r" % (kind, ", ".join(_FREQS), pairs.get("FREQ")))
        count = pairs.get("COUNT")
        if count is not None and (not count.isdigit() or int(count) > 999):
            raise FieldError(field, "%s COUNT must be a whole number of at most 999, got %r" % (kind, count))
    return " ".join(parts)


def _name(field: str, value: Any) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise FieldError(field, "must be 1-100 characters of letters, digits, space, '_', '.', ':' or '-' "
                                "starting with a letter or digit, got %r" % (value,))
    return value


def _text(field: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise FieldError(field, "must be a non-empty string, got %r" % (value,))
    return value.strip()


def _bool(field: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise FieldError(field, "must be true or false, got %r" % (value,))


def _unknown_keys(field: str, item: Mapping[str, Any], allowed: Sequence[str]) -> None:
    extra = sorted(set(item) - set(allowed))
    if extra:
        raise FieldError("%s.%s" % (field, extra[0]), "unknown key; known: %s" % ", ".join(allowed))


def survey_spec(drill: Mapping[str, Any], experiment_names: Sequence[str]) -> Dict[str, Any]:
    """The job template's survey: the three answers playbooks/drill.yml takes, defaulting to the drill's."""
    return {
        "name": "Chaos drill %s" % drill["name"],
        "description": "What playbooks/drill.yml runs: the target, the experiment, and whether it is a dry run.",
        "spec": [
            {
                "question_name": "Target",
                "question_description": "A node, a comma list, or a label selector; it must opt in to chaos "
                                        "(label gpufleet.io/chaos=allowed).",
                "variable": "target", "type": "text", "required": True, "default": drill["target"],
                "min": 1, "max": 1024,
            },
            {
                "question_name": "Experiment",
                "question_description": "The experiment (docs/chaos.md lists them).",
                "variable": "experiment", "type": "multiplechoice", "required": True,
                "choices": list(experiment_names), "default": drill["experiment"],
            },
            {
                "question_name": "Dry run",
                "question_description": "true: plan and report only, nothing is injected.",
                "variable": "dry_run", "type": "multiplechoice", "required": True,
                "choices": ["false", "true"], "default": "true" if drill["dry_run"] else "false",
            },
        ],
    }


def _notification(index: int, item: Any, prefix: str) -> Dict[str, Any]:
    field = "%s[%d]" % (NOTIFICATIONS_FIELD, index)
    if not isinstance(item, Mapping):
        raise FieldError(field, "must be a mapping with name and url, got %s" % type(item).__name__)
    _unknown_keys(field, item, ("name", "url", "http_method", "headers", "disable_ssl_verification"))
    # A webhook's URL and headers may carry its token: no message here ever repeats them.
    url = item.get("url")
    if not isinstance(url, str) or not _URL.fullmatch(url.strip()):
        raise FieldError(field + ".url", "must be one http:// or https:// URL without spaces or control characters "
                                         "(the value is a secret and not shown)")
    url = url.strip()
    method = str(item.get("http_method", "POST")).upper()
    if method not in ("POST", "PUT"):
        raise FieldError(field + ".http_method", "must be POST or PUT, got %r" % item.get("http_method"))
    headers = item.get("headers", {"Content-Type": "application/json"})
    if not isinstance(headers, Mapping) or not all(isinstance(v, str) for v in headers.values()):
        raise FieldError(field + ".headers", "must be a mapping of header names to strings")
    for header, value in headers.items():
        check_name(header, "%s.headers" % field, r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,256}", "header names (RFC 9110 tokens)")
        check_text(value, "%s.headers.%s" % (field, header), 8192)  # its message never shows the value
    name = _name(field + ".name", item.get("name"))
    return {
        "key": name,
        "name": prefix + name,
        # Every field of AWX's webhook, as AWX returns it: a field left out comes back with its
        # default and the next run would see a difference. No basic-auth password: AWX returns it as
        # $encrypted$, which can never compare equal (a token goes in the headers).
        "configuration": {
            "url": url, "http_method": method, "headers": dict(headers),
            "disable_ssl_verification": _bool(field + ".disable_ssl_verification",
                                              item.get("disable_ssl_verification", False)),
            "username": "", "password": "",
        },
    }


def _drill(index: int, item: Any, prefix: str, notifications: Mapping[str, str],
           experiment_names: Sequence[str]) -> Dict[str, Any]:
    field = "%s[%d]" % (DRILLS_FIELD, index)
    if not isinstance(item, Mapping):
        raise FieldError(field, "must be a mapping {name, experiment, target, dry_run, rrule, notify}, "
                                "got %r" % (item,))
    _unknown_keys(field, item, ("name", "experiment", "target", "dry_run", "rrule", "notify", "enabled",
                                "params", "description"))
    name = _name(field + ".name", item.get("name"))
    experiment = item.get("experiment")
    if experiment not in experiment_names:
        raise FieldError(field + ".experiment", "unknown experiment %r; known: %s"
                         % (experiment, ", ".join(experiment_names)))
    notify = item.get("notify", sorted(notifications))
    if not isinstance(notify, list) or not all(isinstance(n, str) for n in notify):
        raise FieldError(field + ".notify", "must be a list of names from %s, got %r" % (NOTIFICATIONS_FIELD, notify))
    for position, wanted in enumerate(notify):
        if wanted not in notifications:
            raise FieldError("%s.notify[%d]" % (field, position), "%r is not in %s (known: %s)"
                             % (wanted, NOTIFICATIONS_FIELD, ", ".join(sorted(notifications)) or "none"))
    params = item.get("params", {})
    if not isinstance(params, Mapping):
        raise FieldError(field + ".params", "must be a mapping of the experiment's knobs, got %r" % (params,))
    drill = {
        "name": name,
        "experiment": experiment,
        "target": check_target(item.get("target"), field + ".target"),
        "dry_run": _bool(field + ".dry_run", item.get("dry_run", False)),
        "rrule": check_rrule(field + ".rrule", item.get("rrule")),
        "enabled": _bool(field + ".enabled", item.get("enabled", True)),
        "params": dict(params),
        "description": str(item.get("description") or "Chaos drill %s on %s" % (experiment, item.get("target"))),
        "template_name": prefix + name,
        "schedule_name": prefix + name,
        "notify": [notifications[n] for n in notify],
    }
    drill["survey_spec"] = survey_spec(drill, experiment_names)
    # The schedule answers the survey; AWX checks these answers against its choices.
    drill["extra_data"] = {"target": drill["target"], "experiment": experiment,
                           "dry_run": "true" if drill["dry_run"] else "false"}
    return drill


def plan(drills: Any, notifications: Any, prefix: str = "gpufleet drill: ",
         experiment_names: Sequence[str] = ()) -> Dict[str, List[Dict[str, Any]]]:
    """Check every drill and notification; return them ready for the awx.awx tasks."""
    names = list(experiment_names) or experiments.names()
    if not isinstance(notifications, list):
        raise FieldError(NOTIFICATIONS_FIELD, "must be a list, got %r" % (notifications,))
    checked_notifications = [_notification(i, item, prefix) for i, item in enumerate(notifications)]
    by_key = {n["key"]: n["name"] for n in checked_notifications}
    if len(by_key) != len(checked_notifications):
        raise FieldError(NOTIFICATIONS_FIELD, "names must be unique")
    if not isinstance(drills, list) or not drills:
        raise FieldError(DRILLS_FIELD, "must be a non-empty list of drills, got %r" % (drills,))
    # Every drill is checked, and every bad one named at once: a schedule file is fixed in one go.
    checked: List[Dict[str, Any]] = []
    errors: List[FieldError] = []
    seen: Dict[str, int] = {}
    for index, item in enumerate(drills):
        try:
            drill = _drill(index, item, prefix, by_key, names)
        except FieldError as error:
            errors.append(error)
            continue
        checked.append(drill)
        if drill["name"] in seen:
            errors.append(FieldError("%s[%d].name" % (DRILLS_FIELD, index), "%r is already the name of %s[%d]"
                                     % (drill["name"], DRILLS_FIELD, seen[drill["name"]])))
        seen.setdefault(drill["name"], index)
    if errors:
        rest = "".join("; %s" % error for error in errors[1:])
        raise FieldError(errors[0].field, errors[0].message + rest)
    return {"drills": checked, "notifications": checked_notifications}
