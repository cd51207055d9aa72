"""TEST EMULATOR of a subset of the AWX API v2 - written for the tests, not an AWX.

No AWX can run here, so tests/integration/schedules/test_awx_drills_emulated.py runs the real
``ansible-playbook playbooks/awx-drills.yml`` (the real awx.awx modules, their real HTTP) against this
small server and asserts what it was sent. It covers only what awx.awx's project, inventory,
notification_template, job_template and schedule modules and its controller_api lookup use
(awx/awx plugins/module_utils/controller_api.py):

* every response carries X-API-Product-Name: AWX and X-API-Product-Version (awx.awx warns on a mismatch);
* auth: ``Authorization: Bearer <token>``, or basic auth on POST /api/v2/tokens/ to mint a token
  (and DELETE /api/v2/tokens/<id>/ to release it); anything else is a 401;
* lists ``GET /api/v2/<type>/?name=...&organization=...`` (exact match, ``or__`` prefixed fields are
  OR-ed, as get_one's name-or-id search sends them) as ``{count, next, previous, results}``;
* ``POST`` to create (201), ``GET``/``PATCH`` one object by id (``url``, ``related``, ``summary_fields``);
* ``job_templates/<id>/survey_spec/`` GET/POST/DELETE, with AWX's survey checks (question types,
  unique variables, a multiple-choice default among its choices);
* association lists (``credentials``, ``notification_templates_{started,success,error}``, ...):
  GET lists, POST ``{id}`` associates, ``{id, disassociate: true}`` disassociates (204);
* ``POST /api/v2/schedules/`` and ``job_templates/<id>/schedules/``, with AWX's rrule checks;
* ``unified_job_templates`` (projects and job templates share one id sequence, as in AWX);
* a project's creation starts a ``project_updates/<id>/`` that is already successful;
* webhook notification templates: AWX's defaults filled in (username, password), a password returned
  as ``$encrypted$``, and each webhook body rendered as AWX does (Jinja sandbox, a stub job) and
  required to be a JSON object.

What it does not do - no project sync, no playbook runs, no schedule ever fires, no notification is
sent, no RBAC, no execution environments - is what a real AWX run adds (docs/scheduling.md).
Every request is recorded (``requests``) so that tests can assert the payloads.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import parse_qsl, urlsplit

from jinja2.sandbox import ImmutableSandboxedEnvironment

API = "/api/v2/"
VERSION = "24.6.1"
ASSOCIATIONS = ("credentials", "labels", "instance_groups", "notification_templates_started",
                "notification_templates_success", "notification_templates_error")
SURVEY_TYPES = ("text", "textarea", "password", "integer", "float", "multiplechoice", "multiselect")
TYPE_NAMES = {"organizations": "organization", "credentials": "credential", "credential_types": "credential_type",
              "projects": "project", "project_updates": "project_update", "inventories": "inventory",
              "job_templates": "job_template", "schedules": "schedule",
              "notification_templates": "notification_template", "execution_environments": "execution_environment",
              "labels": "label", "instance_groups": "instance_group"}
# The inputs AWX's built-in credential types mark secret (never shown back): Machine, Source Control,
# OpenShift or Kubernetes API Bearer Token.
SECRET_INPUTS = {"password", "ssh_key_data", "ssh_key_unlock", "become_password", "bearer_token"}
# Fields AWX fills in when a create leaves them out (the ones the modules compare or read).
DEFAULTS = {
    "projects": {"scm_revision": "", "status": "successful", "description": "", "scm_branch": ""},
    "inventories": {"kind": "", "host_filter": None, "variables": "", "description": ""},
    "job_templates": {"survey_enabled": False, "extra_vars": "", "description": "", "job_type": "run"},
    "schedules": {"enabled": True, "extra_data": {}, "description": ""},
    "notification_templates": {"messages": None, "description": ""},
}
REQUIRED = {
    "projects": ("name", "organization"), "inventories": ("name", "organization"),
    "job_templates": ("name", "playbook", "project"), "schedules": ("name", "rrule", "unified_job_template"),
    "notification_templates": ("name", "organization", "notification_type", "notification_configuration"),
    "organizations": ("name",), "credentials": ("name", "credential_type"),
}
WEBHOOK_DEFAULTS = {"http_method": "POST", "disable_ssl_verification": False, "username": "", "password": ""}
# A job as AWX's JobNotificationMixin.context() gives it to a notification's templates.
STUB_JOB = {"id": 42, "name": "Stub drill", "status": "successful", "failed": False, "artifacts": {}}


@dataclass
class Request:
    method: str
    path: str
    query: Dict[str, str]
    body: Any
    auth: str  # "bearer", "basic" or ""


class ApiError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        super().__init__(status, body)
        self.status = status
        self.body = body


def render_webhook_body(template: str, job: Dict[str, Any]) -> Any:
    """A webhook body as AWX renders it (an immutable Jinja sandbox) and parses it (JSON)."""
    context = {"job": job, "job_friendly_name": "Job", "url": "https://awx.invalid/#/jobs/playbook/%s" % job["id"],
               "job_metadata": "{}"}
    return json.loads(ImmutableSandboxedEnvironment().from_string(template).render(**context))


class AwxEmulator:
    """The in-memory AWX: objects per type, the recorded requests, the tokens it accepts."""

    def __init__(self, token: str = "test-token", users: Optional[Dict[str, str]] = None) -> None:
        self.tokens = {token}
        self.users = dict(users or {})
        self.objects: Dict[str, Dict[int, Dict[str, Any]]] = {}
        self.associations: Dict[Tuple[str, int, str], List[int]] = {}
        self.surveys: Dict[int, Dict[str, Any]] = {}
        self.requests: List[Request] = []
        self._ids: Dict[str, Any] = {}
        # Projects and job templates are unified job templates: one id sequence, as in AWX.
        self._ids["projects"] = self._ids["job_templates"] = itertools.count(1)
        self._lock = threading.Lock()
        self._server: Optional[ThreadingHTTPServer] = None

    # -- the server ----------------------------------------------------------------------------
    def start(self) -> "AwxEmulator":
        emulator = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet: the tests read self.requests
                pass

            def _serve(self) -> None:
                emulator._handle(self)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return "http://127.0.0.1:%d" % self._server.server_address[1]

    # -- what tests read and seed ---------------------------------------------------------------
    def seed(self, object_type: str, /, **fields: Any) -> Dict[str, Any]:
        """Put an object in without recording a request (what exists before the playbook runs)."""
        with self._lock:
            return self._create(object_type, dict(fields))

    def find(self, kind: str, name: str) -> Optional[Dict[str, Any]]:
        return next((o for o in self.objects.get(kind, {}).values() if o.get("name") == name), None)

    def associated(self, kind: str, obj_id: int, relation: str) -> List[int]:
        return list(self.associations.get((kind, obj_id, relation), []))

    def writes(self) -> List[Request]:
        """Requests that change an object (token minting and release are auth, not changes)."""
        return [r for r in self.requests if r.method != "GET" and not r.path.startswith(API + "tokens/")]

    # -- dispatch -------------------------------------------------------------------------------
    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(handler.path)
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        auth = handler.headers.get("Authorization", "")
        request = Request(handler.command, parts.path, dict(parse_qsl(parts.query, keep_blank_values=True)), body,
                          auth.split(" ", 1)[0].lower() if auth else "")
        with self._lock:
            self.requests.append(request)
            try:
                status, payload = self._route(request, auth)
            except ApiError as error:
                status, payload = error.status, error.body
        data = b"" if payload is None else json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.send_header("X-API-Product-Name", "AWX")
        handler.send_header("X-API-Product-Version", VERSION)
        handler.end_headers()
        handler.wfile.write(data)

    def _authorised(self, request: Request, auth: str) -> None:
        if request.path in (API, API + "ping/"):
            return
        if request.path.startswith(API + "tokens/") and request.method in ("POST", "DELETE") \
                and auth.startswith("Basic "):
            user, _sep, password = base64.b64decode(auth[6:]).decode().partition(":")
            if self.users.get(user) == password and user:
                return
        if auth.startswith("Bearer ") and auth[7:] in self.tokens:
            return
        raise ApiError(401, {"detail": "Authentication credentials were not provided."})

    def _route(self, request: Request, auth: str) -> Tuple[int, Any]:
        self._authorised(request, auth)
        if not request.path.startswith(API):
            raise ApiError(404, {"detail": "Not found."})
        segments = [s for s in request.path[len(API):].split("/") if s]
        method = request.method
        if not segments:
            return 200, {"ping": API + "ping/"}
        if segments == ["ping"]:
            return 200, {"version": VERSION, "active_node": "emulator"}
        kind = segments[0]
        if kind == "tokens":
            return self._tokens(method, segments)
        if len(segments) == 1:
            if method == "GET":
                return 200, self._list(kind, request.query)
            if method == "POST":
                return 201, self._create(kind, dict(request.body or {}))
            raise ApiError(405, {"detail": 'Method "%s" not allowed.' % method})
        obj = self._get(kind, segments[1])
        if len(segments) == 2:
            if method == "GET":
                return 200, self._shown(obj)
            if method == "PATCH":
                return 200, self._update(kind, obj, dict(request.body or {}))
            raise ApiError(405, {"detail": 'Method "%s" not allowed.' % method})
        relation = segments[2]
        if kind == "job_templates" and relation == "survey_spec":
            return self._survey(obj, method, request.body)
        if relation == "schedules" and method == "GET":
            return 200, self._list("schedules", dict(request.query, unified_job_template=str(obj["id"])))
        if relation == "schedules" and method == "POST":
            return 201, self._create("schedules", dict(request.body or {}, unified_job_template=obj["id"]))
        if relation in ASSOCIATIONS:
            return self._association(kind, obj, relation, method, request.body)
        raise ApiError(404, {"detail": "Not found."})

    # -- objects --------------------------------------------------------------------------------
    def _list(self, kind: str, query: Dict[str, str]) -> Dict[str, Any]:
        if kind == "unified_job_templates":
            pool = [*self.objects.get("projects", {}).values(), *self.objects.get("job_templates", {}).values()]
        else:
            pool = list(self.objects.get(kind, {}).values())
        both = {k: v for k, v in query.items() if not k.startswith("or__") and k not in ("page", "page_size")}
        either = {k[4:]: v for k, v in query.items() if k.startswith("or__")}

        def value(obj: Dict[str, Any], key: str) -> str:
            found = obj.get(key)
            return "" if found is None else str(found)

        results = [o for o in pool if all(value(o, k) == v for k, v in both.items())
                   and (not either or any(value(o, k) == v for k, v in either.items()))]
        results.sort(key=lambda o: o["id"])
        shown = [self._shown(o) for o in results]
        return {"count": len(shown), "next": None, "previous": None, "results": shown}

    def _get(self, kind: str, obj_id: str) -> Dict[str, Any]:
        try:
            return self.objects[kind][int(obj_id)]
        except (KeyError, ValueError):
            raise ApiError(404, {"detail": "Not found."}) from None

    def _create(self, kind: str, fields: Dict[str, Any]) -> Dict[str, Any]:
        if kind not in TYPE_NAMES:
            raise ApiError(404, {"detail": "Not found."})
        missing = [f for f in REQUIRED.get(kind, ("name",)) if fields.get(f) in (None, "")]
        if missing:
            raise ApiError(400, {f: ["This field is required."] for f in missing})
        self._check(kind, fields, None)
        counter = self._ids.setdefault(kind, itertools.count(1))
        obj_id = next(counter)
        base = "%s%s/%d/" % (API, kind, obj_id)
        obj = dict(DEFAULTS.get(kind, {}))
        obj.update(fields)
        obj.update(id=obj_id, type=TYPE_NAMES[kind], url=base, summary_fields={},
                   related={rel: base + rel + "/" for rel in (*ASSOCIATIONS, "survey_spec", "schedules")})
        if kind == "projects":
            update = self._create("project_updates", {
                "name": fields["name"], "project": obj_id, "status": "successful", "failed": False, "finished": True})
            obj["summary_fields"] = {"current_update": {"id": update["id"], "status": "successful"}}
            obj["related"]["update"] = base + "update/"
        self.objects.setdefault(kind, {})[obj_id] = obj
        return self._shown(obj)

    def _update(self, kind: str, obj: Dict[str, Any], fields: Dict[str, Any]) -> Dict[str, Any]:
        self._check(kind, fields, obj)
        fields.pop("id", None)
        obj.update(fields)
        return self._shown(obj)

    @staticmethod
    def _shown(obj: Dict[str, Any]) -> Dict[str, Any]:
        """An object as the API shows it: a copy, a webhook's password and a credential's secret
        inputs as $encrypted$."""
        shown = json.loads(json.dumps(obj))
        if obj.get("type") == "notification_template":
            config = shown.get("notification_configuration") or {}
            if config.get("password"):
                config["password"] = "$encrypted$"
        if obj.get("type") == "credential":
            inputs = shown.get("inputs") or {}
            for key in SECRET_INPUTS & set(inputs):
                if inputs[key]:
                    inputs[key] = "$encrypted$"
        return shown

    # -- AWX's own checks on what the playbook sends ----------------------------------------------
    def _check(self, kind: str, fields: Dict[str, Any], old: Optional[Dict[str, Any]]) -> None:
        for key in ("organization", "project", "inventory", "unified_job_template", "credential_type"):
            if fields.get(key) is not None and not isinstance(fields[key], int):
                raise _invalid(key, "Incorrect type. Expected pk value, received %s." % type(fields[key]).__name__)
        if kind == "schedules" and "rrule" in fields:
            check_rrule(fields["rrule"])
        if kind == "schedules" and "unified_job_template" in fields:
            self._get("job_templates", str(fields["unified_job_template"]))
        if kind == "inventories" and fields.get("variables") not in (None, ""):
            try:
                json.loads(fields["variables"])
            except (TypeError, ValueError):
                raise ApiError(400, {"variables": ["Must be valid JSON or YAML."]}) from None
        if kind == "notification_templates":
            self._check_notification(fields, old)

    def _check_notification(self, fields: Dict[str, Any], old: Optional[Dict[str, Any]]) -> None:
        kind = fields.get("notification_type", (old or {}).get("notification_type"))
        if kind != "webhook":
            raise ApiError(400, {"notification_type": ["This emulator knows only webhook notifications."]})
        if "notification_configuration" in fields:
            config = dict(WEBHOOK_DEFAULTS, **fields["notification_configuration"])
            missing = [f for f in ("url", "headers") if f not in config]
            if missing:
                raise ApiError(400, {"notification_configuration": [
                    "Missing required fields for Notification Configuration: %s." % ", ".join(missing)]})
            if config["http_method"] not in ("POST", "PUT"):
                raise ApiError(400, {"notification_configuration": ["HTTP method must be either 'POST' or 'PUT'."]})
            if config["password"] == "$encrypted$" and old is not None:
                config["password"] = old["notification_configuration"]["password"]
            fields["notification_configuration"] = config
        for event, texts in (fields.get("messages") or {}).items():
            if event not in ("started", "success", "error", "workflow_approval"):
                raise _invalid("messages", "Event '%s' invalid." % event)
            for part, text in (texts or {}).items():
                if part not in ("message", "body"):
                    raise _invalid("messages", "Message type '%s' invalid." % part)
                if part == "message" and "\n" in (text or ""):
                    raise _invalid("messages", "Messages cannot contain newlines (%s)." % event)
                if part == "body" and text:
                    try:
                        rendered = render_webhook_body(text, dict(STUB_JOB))
                    except Exception as error:  # what AWX reports for a body it cannot render or parse
                        raise _invalid("messages", "Webhook body for '%s': %s" % (event, error)) from None
                    if not isinstance(rendered, dict):
                        raise _invalid("messages", "Webhook body for '%s' should be a json dictionary." % event)

    def _survey(self, obj: Dict[str, Any], method: str, body: Any) -> Tuple[int, Any]:
        if method == "GET":
            return 200, self.surveys.get(obj["id"], {})
        if method == "DELETE":
            self.surveys.pop(obj["id"], None)
            return 200, {}
        if method != "POST":
            raise ApiError(405, {"detail": 'Method "%s" not allowed.' % method})
        check_survey(body)
        self.surveys[obj["id"]] = json.loads(json.dumps(body))
        return 200, {}

    def _association(self, kind: str, obj: Dict[str, Any], relation: str, method: str, body: Any) -> Tuple[int, Any]:
        key = (kind, obj["id"], relation)
        ids = self.associations.setdefault(key, [])
        target = "notification_templates" if relation.startswith("notification_templates") else relation
        if method == "GET":
            results = [self._shown(self.objects[target][i]) for i in ids]
            return 200, {"count": len(results), "next": None, "previous": None, "results": results}
        if method != "POST" or not isinstance(body, dict) or not isinstance(body.get("id"), int):
            raise ApiError(400, {"detail": "POST {id} to associate, {id, disassociate: true} to disassociate."})
        self._get(target, str(body["id"]))
        if body.get("disassociate"):
            if body["id"] in ids:
                ids.remove(body["id"])
        elif body["id"] not in ids:
            ids.append(body["id"])
        return 204, None

    def _tokens(self, method: str, segments: List[str]) -> Tuple[int, Any]:
        if method == "POST" and len(segments) == 1:
            token_id = next(self._ids.setdefault("tokens", itertools.count(1)))
            token = "minted-%d" % token_id
            self.tokens.add(token)
            return 201, {"id": token_id, "token": token, "type": "o_auth2_access_token",
                         "url": "%stokens/%d/" % (API, token_id)}
        if method == "DELETE" and len(segments) == 2:
            self.tokens.discard("minted-%s" % segments[1])
            return 204, None
        raise ApiError(405, {"detail": "Method not allowed."})


def _invalid(field: str, message: str) -> ApiError:
    """A 400 as AWX words it: the field and what is wrong with it."""
    return ApiError(400, {field: message if field == "error" else [message]})


def check_rrule(rrule: Any) -> None:
    """The part of AWX's rrule validation that a schedule's payload meets."""
    text = str(rrule or "")
    if len(re.findall(r"DTSTART", text)) != 1:
        raise _invalid("rrule", "Valid DTSTART required in rrule. Value should start with: DTSTART:YYYYMMDDTHHMMSSZ")
    if not re.search(r"DTSTART(;TZID=[^:]+:\d{8}T\d{6}|:\d{8}T\d{6}Z)\b", text):
        raise _invalid("rrule", "DTSTART cannot be a naive datetime. Specify ;TZINFO= or YYYYMMDDTHHMMSSZZ.")
    if "RRULE:" not in text:
        raise _invalid("rrule", "RRULE required in rrule.")
    if "FREQ=SECONDLY" in text or not re.search(r"FREQ=(MINUTELY|HOURLY|DAILY|WEEKLY|MONTHLY|YEARLY)", text):
        raise _invalid("rrule", "A valid FREQ (not SECONDLY) is required.")


def check_survey(spec: Any) -> None:
    """AWX's survey checks (JobTemplateSurveySpec._validate_spec_data), the ones a survey can fail."""
    if not isinstance(spec, dict) or "name" not in spec or "description" not in spec:
        raise _invalid("error", "'name' and 'description' are required in the survey spec.")
    questions = spec.get("spec")
    if not isinstance(questions, list) or not questions:
        raise _invalid("error", "'spec' must be a list of items and not be empty.")
    seen = set()
    for index, question in enumerate(questions):
        for key in ("question_name", "variable", "type", "required"):
            if key not in question:
                raise _invalid("error", "'%s' missing from survey question %d." % (key, index))
        if question["type"] not in SURVEY_TYPES:
            raise _invalid("error", "'%s' in survey question %d is not one of %s."
                           % (question["type"], index, SURVEY_TYPES))
        if question["variable"] in seen:
            raise _invalid("error", "'variable' '%s' duplicated in survey question %d."
                           % (question["variable"], index))
        seen.add(question["variable"])
        if question["type"] in ("multiplechoice", "multiselect"):
            choices = question.get("choices")
            if isinstance(choices, str):
                choices = choices.split("\n")
            if not isinstance(choices, list) or not choices:
                raise _invalid("error", "Survey question %d of type %s needs choices." % (index, question["type"]))
            if question.get("default") not in (None, "") and question["default"] not in choices:
                raise _invalid("error", "Default choice must be answered from the choices listed "
                                        "(question %d)." % index)
        if question["type"] == "text" and isinstance(question.get("default"), str):
            low, high = question.get("min", 0), question.get("max", 1024)
            if not low <= len(question["default"]) <= high:
                raise _invalid("error", "Default of survey question %d is not between min and max length." % index)
