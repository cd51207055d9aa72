# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The Slurm client over slurmrestd: the same calls and models as the CLI client (client.py).

A Slinky site has slurmctld in a pod: the control host or an AWX execution environment has no
``scontrol`` and no munge key, while the operator's RestApi gives every site a slurmrestd. This
client speaks to it:

- **Auth**: JWT (``auth/jwt``), HS256 tokens minted here from the cluster's JWT key (the key
  slurmctld checks them with; on Slinky the release's JWT key Secret), a fresh one whenever the
  current one has less than a third of its life left; or a token file another process keeps
  fresh. The token is a secret: it is never part of an error or a result.
- **Data parser**: the highest version slurmrestd offers (``GET /openapi/v3``) that this client
  knows (``KNOWN_PARSERS``). A server that offers only newer ones is refused, naming both lists:
  the JSON layout of an unknown version is not guessed.
- **TLS**: verified by default (a CA bundle may be given); ``http://`` only for loopback.

Responses carry the same JSON layouts as ``scontrol --json`` and ``squeue --json`` of the same
version, so the same parsers read them. Errors are the CLI client's typed errors; ``argv`` is
``[METHOD, URL]`` and ``rc`` the HTTP status. In check mode mutating calls send nothing and
return what they would have sent.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
import os
import re
import ssl
import time
import urllib.parse
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError, GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import check_int, check_number
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.batch import BatchJob
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.client import (
    check_job_ids,
    check_node,
    check_node_state,
    check_placement,
    check_reservation,
    check_signal,
    select_nodes,
    unless_gone,
    with_their_jobs,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.errors import (
    SlurmCommandError,
    SlurmTimeoutError,
    SlurmUnknownNodeError,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.model import SlurmJob, SlurmNode, SlurmVersion
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.parse_scontrol import parse_nodes_json
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.parse_squeue import filter_jobs, parse_jobs_json
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import DEFAULT_TIMEOUT, CommandResult

# Data parsers whose layouts the parsers read (captured: tests/fixtures/slurm-captures/26.05/rest),
# newest first. 24.11 serves v0.0.40-v0.0.42, 26.05 v0.0.42-v0.0.45.
KNOWN_PARSERS = ("v0.0.45", "v0.0.44", "v0.0.43", "v0.0.42")
# Job requeue has an endpoint from v0.0.45 on (Slurm 26.05); a reservation can be created from
# v0.0.43 on (Slurm 25.05).
REQUEUE_SINCE = "v0.0.45"
RESERVATION_SINCE = "v0.0.43"
DEFAULT_TOKEN_LIFESPAN = 600
_PARSER_PATH = re.compile(r"^/slurm/(v\d+\.\d+\.\d+)/")
# A node update or query that names a node slurmctld does not know.
_UNKNOWN_NODE = re.compile(r"Invalid node name specified|Failure to query node|Unable to find node", re.I)

# (method, url, body or None, headers, timeout) -> (HTTP status, response text)
HttpFunction = Callable[[str, str, Optional[bytes], Dict[str, str], Optional[float]], Tuple[int, str]]


class SlurmRestError(SlurmCommandError):
    """slurmrestd refused a call, answered with errors, or could not be reached (``rc`` None)."""


class SlurmRestAuthError(SlurmRestError):
    """slurmrestd or slurmctld refused the token: a wrong key, an expired token, another user."""


class SlurmRestVersionError(SlurmRestError):
    """slurmrestd offers no data parser this client knows."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def mint_token(key: bytes, user: str, lifespan: int, now: Optional[float] = None) -> str:
    """An HS256 JWT for Slurm's auth/jwt: ``sun`` is the Slurm user, ``exp`` when it expires."""
    issued = int(time.time() if now is None else now)
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    payload = _b64(json.dumps({"iat": issued, "exp": issued + int(lifespan), "sun": user},
                              separators=(",", ":")).encode())
    signature = hmac.new(key, ("%s.%s" % (header, payload)).encode("ascii"), hashlib.sha256).digest()
    return "%s.%s.%s" % (header, payload, _b64(signature))


def token_expiry(token: str) -> Optional[int]:
    """The ``exp`` claim of a JWT (not verified: slurmctld does that), or None when it has none."""
    try:
        claims = json.loads(_b64_decode(token.split(".")[1]))
    except (IndexError, ValueError):
        raise FieldError("token", "is not a JWT (three base64url parts)") from None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return int(exp) if isinstance(exp, (int, float)) else None


class TokenSource:
    """The token of each call: minted from a JWT key file, or read from a token file.

    A minted token is replaced when less than a third of its life is left, so a long wait (a
    remediation's grace) never sends an expired one. A token file is read again when it changes;
    an expired token in it is refused here, naming the file, before anything is sent.
    """

    def __init__(self, user: str, jwt_key_file: Optional[str] = None, token_file: Optional[str] = None,
                 lifespan: int = DEFAULT_TOKEN_LIFESPAN, clock: Callable[[], float] = time.time) -> None:
        if bool(jwt_key_file) == bool(token_file):
            raise FieldError("rest_jwt_key_file", "give the JWT key file or rest_token_file, exactly one")
        if not user or not isinstance(user, str):
            raise FieldError("rest_user", "must name the Slurm user the token is for")
        check_number(lifespan, "rest_token_lifespan", above=29)
        self.user = user
        self.jwt_key_file = jwt_key_file
        self.token_file = token_file
        self.lifespan = int(lifespan)
        self.clock = clock
        self._token: Optional[str] = None
        self._expires = 0.0
        self._file_stamp: Optional[Tuple[float, int]] = None

    def token(self) -> str:
        now = self.clock()
        if self.jwt_key_file:
            if self._token is None or self._expires - now < self.lifespan / 3.0:
                key = _read_secret(self.jwt_key_file, "rest_jwt_key_file")
                self._token = mint_token(key, self.user, self.lifespan, now)
                self._expires = now + self.lifespan
            return self._token
        path = str(self.token_file)
        try:
            stat = os.stat(path)
        except OSError as exc:
            raise FieldError("rest_token_file", "cannot read %s: %s" % (path, exc.strerror)) from None
        stamp = (stat.st_mtime, stat.st_size)
        if self._token is None or stamp != self._file_stamp:
            self._token = _read_secret(path, "rest_token_file").decode("ascii", "replace").strip()
            self._file_stamp = stamp
            expires = token_expiry(self._token)
            self._expires = float(expires) if expires is not None else float("inf")
        if self._expires <= now:
            raise FieldError("rest_token_file", "the token in %s expired at %s; renew it (scontrol token)"
                             % (path, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self._expires))))
        return self._token


def _read_secret(path: str, field: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise FieldError(field, "cannot read %s: %s" % (path, exc.strerror)) from None
    if not data.strip():
        raise FieldError(field, "%s is empty" % path)
    return data


def stdlib_http(ca_file: Optional[str] = None, verify: bool = True) -> HttpFunction:
    """The default HTTP function: the standard library's http.client, so the agent's image (which has
    no Ansible) fences through it too. TLS is verified unless ``verify`` is false; redirects are not
    followed (the token would go with them) and no proxy is used (slurmrestd is the cluster's own)."""
    contexts: List[ssl.SSLContext] = []

    def tls() -> ssl.SSLContext:
        # Made at the first https call: loading the CA bundle takes longer than a whole loopback call.
        if not contexts:
            context = ssl.create_default_context(cafile=ca_file)
            if not verify:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            contexts.append(context)
        return contexts[0]

    def call(method: str, url: str, body: Optional[bytes], headers: Dict[str, str],
             timeout: Optional[float]) -> Tuple[int, str]:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme == "https":
            connection: http.client.HTTPConnection = http.client.HTTPSConnection(
                parts.hostname or "", parts.port, timeout=timeout, context=tls())
        else:
            connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
        try:
            connection.request(method, parts.path + ("?" + parts.query if parts.query else ""), body=body,
                               headers=headers)
            response = connection.getresponse()
            return response.status, response.read().decode("utf-8", "replace")
        finally:
            connection.close()

    return call


class SlurmRestClient:
    """The SlurmClient calls through slurmrestd (``slurm_api: rest``)."""

    def __init__(self, url: str, tokens: TokenSource, http: Optional[HttpFunction] = None,
                 timeout: Optional[float] = DEFAULT_TIMEOUT, check_mode: bool = False,
                 known_parsers: Sequence[str] = KNOWN_PARSERS, requeue_exit: Optional[Sequence[int]] = None,
                 allow_http: bool = False) -> None:
        parsed = urllib.parse.urlsplit(url or "")
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise FieldError("rest_url", "must be an http(s) URL of slurmrestd, not %r" % url)
        # Slinky's RestApi Service serves plain http on 6820 inside the cluster: allowed when asked for.
        if parsed.scheme == "http" and parsed.hostname not in ("127.0.0.1", "localhost", "::1") and not allow_http:
            raise FieldError("rest_url", "plain http only to loopback: use https, or set rest_allow_http where the "
                                         "network to slurmrestd is trusted (the token crosses it in clear)")
        if timeout is not None:
            check_number(timeout, "timeout", above=0)
        self.url = url.rstrip("/")
        self.tokens = tokens
        self.http = http or stdlib_http()
        self.timeout = timeout
        self.check_mode = check_mode
        self.known_parsers = tuple(known_parsers)
        # slurm.conf's RequeueExit, which slurmrestd does not show: given by the caller.
        self.requeue_exit = None if requeue_exit is None else _exit_codes(requeue_exit)
        self._parser: Optional[str] = None
        self._version: Optional[SlurmVersion] = None

    # ---- transport ----------------------------------------------------------------------------

    def _call(self, method: str, path: str, body: Optional[Mapping[str, Any]] = None,
              nodes: Sequence[str] = ()) -> Dict[str, Any]:
        url = self.url + path
        argv = [method, url]
        data = json.dumps(body).encode() if body is not None else None
        headers = {"X-SLURM-USER-NAME": self.tokens.user, "X-SLURM-USER-TOKEN": self.tokens.token(),
                   "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        try:
            status, text = self.http(method, url, data, headers, self.timeout)
        except TimeoutError:
            raise SlurmTimeoutError(argv, self.timeout, stderr="slurmrestd did not answer") from None
        except (OSError, ValueError, http.client.HTTPException) as exc:  # refused, unreachable, TLS, not HTTP
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, TimeoutError):
                raise SlurmTimeoutError(argv, self.timeout, stderr="slurmrestd did not answer") from None
            raise SlurmRestError(argv, None, stderr="cannot reach slurmrestd: %s" % reason) from None
        try:
            document = json.loads(text) if text.strip() else {}
        except ValueError:
            document = {}
        if not isinstance(document, dict):
            document = {}
        errors = [e for e in document.get("errors") or [] if isinstance(e, dict)]
        # Signals and requeues answer per job in "status", HTTP 200 even when a job refused.
        errors += [_status_error(entry) for entry in document.get("status") or []
                   if isinstance(entry, dict) and _status_error(entry)]
        described = "; ".join(" ".join(str(e.get(k)) for k in ("description", "error") if e.get(k))
                              for e in errors) or text.strip()[:300] or "HTTP %d" % status
        if status in (401, 403, 511) or any(e.get("error_number") == 1007 for e in errors):
            raise SlurmRestAuthError(argv, status, stderr=described, message=(
                "%s %s: slurmrestd refused the token for user %s (HTTP %d: %s): check the JWT key or "
                "token, and that it is not expired" % (method, url, self.tokens.user, status, described)))
        if nodes and (status == 404 or _UNKNOWN_NODE.search(described)):
            raise SlurmUnknownNodeError(argv, nodes, rc=status, stderr=described)
        if status >= 400 or errors:
            raise SlurmRestError(argv, status, stderr=described)
        return document

    def parser(self) -> str:
        """The data parser used: the newest known one the server serves; asked once per client.

        Each known version's ping is tried, newest first: slurmrestd answers 404 for a version it
        does not serve. That is one small request where the OpenAPI document is 270 kB of JSON
        (about 60 ms to fetch and read, measured on 26.05: most of a fast fence). Only when none is
        served is the document read, to name what the server offers."""
        if self._parser is None:
            for version in sorted(self.known_parsers, key=_parser_key, reverse=True):
                try:
                    self._call("GET", "/slurm/%s/ping/" % version)
                except SlurmRestAuthError:
                    raise
                except SlurmRestError as exc:
                    if exc.rc == 404:
                        continue  # not served here
                    raise
                self._parser = version
                return version
            spec = self._call("GET", "/openapi/v3")
            offered = sorted({m.group(1) for m in map(_PARSER_PATH.match, spec.get("paths") or {}) if m},
                             key=_parser_key)
            raise SlurmRestVersionError(["GET", self.url + "/openapi/v3"], 200, message=(
                "slurmrestd at %s offers data parsers %s; this client knows %s (a newer server needs a "
                "newer gpufleet.resilience)" % (self.url, ", ".join(offered) or "none",
                                                ", ".join(sorted(self.known_parsers, key=_parser_key)))))
        return self._parser

    def _path(self, tail: str) -> str:
        return "/slurm/%s/%s" % (self.parser(), tail)

    @staticmethod
    def _node(node: str) -> str:
        return "node/%s" % urllib.parse.quote(node, safe="")

    def _mutate(self, method: str, tail: str, body: Optional[Mapping[str, Any]] = None,
                nodes: Sequence[str] = ()) -> CommandResult:
        return self._mutate_document(method, tail, body, nodes)[0]

    def _mutate_document(self, method: str, tail: str, body: Optional[Mapping[str, Any]] = None,
                         nodes: Sequence[str] = ()) -> Tuple[CommandResult, Dict[str, Any]]:
        """The call as a CommandResult (run nothing in check mode) and slurmrestd's answer."""
        path = self._path(tail)
        argv = [method, self.url + path] + ([json.dumps(body, sort_keys=True)] if body is not None else [])
        if self.check_mode:
            return CommandResult(argv=argv, ran=False), {}
        document = self._call(method, path, body, nodes=nodes)
        return CommandResult(argv=argv, rc=0, stdout=json.dumps(document.get("status", ""))[:2000]), document

    # ---- the SlurmClient calls ----------------------------------------------------------------

    def check_credentials(self) -> None:
        """Read (or mint) the token now: a missing, empty or expired secret fails naming its option,
        before any call; a process checks this at start-up."""
        self.tokens.token()

    def version(self) -> SlurmVersion:
        if self._version is None:
            release = ((self._call("GET", self._path("ping/")).get("meta") or {}).get("slurm") or {}).get("release")
            match = re.match(r"(\d+)\.(\d+)\.(\d+)", str(release or ""))
            if not match:
                raise SlurmRestError(["GET", self.url + self._path("ping/")], 200,
                                     stderr="no Slurm release in the answer: %r" % release)
            self._version = SlurmVersion(*(int(part) for part in match.groups()))
        return self._version

    def ping(self) -> List[Dict[str, str]]:
        """Each controller and its state, as the CLI client gives them."""
        pings = self._call("GET", self._path("ping/")).get("pings") or []
        return [dict(role="primary" if ping.get("primary") else "backup", host=str(ping.get("hostname")),
                     state="UP" if ping.get("responding") else "DOWN") for ping in pings]

    def nodes(self, names: Optional[Sequence[str]] = None, future: bool = False,
              with_jobs: bool = True) -> Dict[str, SlurmNode]:
        """Name -> SlurmNode, in Slurm's order; ``names`` must all exist (SlurmUnknownNodeError)."""
        # MIXED as scontrol asks it (a node with some CPUs allocated reads MIXED, not ALLOCATED); any
        # explicit flag drops slurmrestd's default MIXED, so it is always given.
        flags = "?flags=MIXED&flags=FUTURE" if future else "?flags=MIXED"
        if names is not None and len(names) == 1:
            # One node (a fence, a remediation's check): its own record, not every node's.
            path = self._path(self._node(check_node(names[0], "names[0]"))) + flags
            try:
                document = self._call("GET", path, nodes=list(names))
            except SlurmUnknownNodeError as exc:
                # "Failure to query node X": unknown, or FUTURE without the flag, as the list says.
                raise SlurmUnknownNodeError(exc.argv, exc.nodes, rc=exc.rc, stderr=exc.stderr,
                                            hint="" if future else " (FUTURE nodes are listed only with future)") \
                    from None
        else:
            path = self._path("nodes/") + flags
            document = self._call("GET", path)
        found = parse_nodes_json(json.dumps(document))
        found = select_nodes(found, names, future, ["GET", self.url + path], 200)
        return with_their_jobs(found, self.jobs()) if with_jobs else found

    def jobs(self, nodes: Optional[Sequence[str]] = None, states: Optional[Sequence[str]] = None) -> List[SlurmJob]:
        """Jobs on any of ``nodes`` (default: all) in any of ``states`` (default: not finished)."""
        jobs = parse_jobs_json(json.dumps(self._call("GET", self._path("jobs/"))))
        return filter_jobs(jobs, nodes=nodes, states=states)

    def requeue_exit_codes(self) -> List[int]:
        """slurm.conf's RequeueExit codes, as given (rest_requeue_exit): slurmrestd does not show them."""
        if self.requeue_exit is None:
            raise SlurmRestError(["GET", self.url], None, message=(
                "a job ended FAILED on the signal and slurmrestd does not show slurm.conf's RequeueExit: give "
                "its codes as rest_requeue_exit ([] when it has none) so the job is requeued once, not twice"))
        return list(self.requeue_exit)

    def set_node_state(self, node: str, state: str, reason: Optional[str] = None) -> CommandResult:
        """``POST .../node/<node>`` with ``{"state": [STATE], "reason": ...}``."""
        check_node(node)
        state = check_node_state(state, reason)
        body: Dict[str, Any] = {"state": [state]}
        if reason is not None:
            body["reason"] = reason
        return self._mutate("POST", self._node(node), body, nodes=[node])

    def set_node_placement(self, node: str, weight: int, features: Sequence[str],
                           active_features: Sequence[str]) -> CommandResult:
        """``POST .../node/<node>`` with the weight and both feature lists; an empty list clears them."""
        weight, available, active = check_placement(node, weight, features, active_features)
        # slurmrestd reads an empty array as "leave as it is" (measured, 26.05): [""] clears, as
        # scontrol's empty value does.
        body = {"weight": {"set": True, "infinite": False, "number": weight}, "features": available or [""],
                "features_act": active or [""]}
        return self._mutate("POST", self._node(node), body, nodes=[node])

    def signal_jobs(self, job_ids: Sequence[Any], signal: str = "TERM", full: bool = True,
                    batch: bool = False) -> CommandResult:
        """``DELETE .../job/<id>?signal=TERM&flags=FULL_JOB`` per job (FULL_JOB: the batch shell too,
        as ``scancel --full``; without it only the steps, as plain ``scancel --signal``; BATCH_JOB
        the batch step alone, as ``scancel --batch``)."""
        ids = check_job_ids(job_ids)
        signal = check_signal(signal)
        flags = (["BATCH_JOB"] if batch else []) + ["FULL_JOB" if full else "FULL_STEPS_ONLY"]
        query = urllib.parse.urlencode([("signal", signal)] + [("flags", flag) for flag in flags])
        return self._each("DELETE", ids, "job/%s?" + query.replace("%", "%%"))

    def requeue(self, job_ids: Sequence[Any]) -> CommandResult:
        """``POST .../jobs/requeue`` (data parser v0.0.45, Slurm 26.05, and later)."""
        ids = check_job_ids(job_ids)
        if _parser_key(self.parser()) < _parser_key(REQUEUE_SINCE):
            raise SlurmRestError(["POST", self.url + self._path("jobs/requeue")], None, message=(
                "requeue: slurmrestd's data parser %s has no requeue (from %s on, Slurm 26.05); use slurm_api cli"
                % (self.parser(), REQUEUE_SINCE)))
        return self._mutate("POST", "jobs/requeue", {"jobs": ids})

    def cancel(self, job_ids: Sequence[Any]) -> CommandResult:
        """``DELETE .../job/<id>`` per job (SIGKILL, as scancel)."""
        return self._each("DELETE", check_job_ids(job_ids), "job/%s")

    def cancel_unless_gone(self, job_id: Any) -> Optional[CommandResult]:
        """Cancel, or None when Slurm says the job has already ended or is unknown."""
        return unless_gone(lambda: self.cancel([job_id]))

    def reservation_exists(self, name: str) -> bool:
        """Whether ``GET .../reservations/`` lists it. Not ``GET .../reservation/<name>``: with no
        reservation at all, that answers HTTP 200 with the error "Unable to query reservations: No
        error", and 422 when others exist (measured, 26.05); the list is plain either way."""
        check_reservation(name)
        listed = self._call("GET", self._path("reservations/")).get("reservations") or []
        return any(isinstance(entry, dict) and entry.get("name") == name for entry in listed)

    def create_reservation(self, name: str, node: str, users: str) -> CommandResult:
        """``POST .../reservation``: what ``scontrol create reservation ... StartTime=now Duration=UNLIMITED
        Flags=MAINT,IGNORE_JOBS`` makes (the CLI client's docstring says why), from data parser v0.0.43
        (Slurm 25.05) on. slurmrestd's POST also updates a reservation of that name: callers look first."""
        check_node(node)
        if _parser_key(self.parser()) < _parser_key(RESERVATION_SINCE):
            raise SlurmRestError(["POST", self.url + self._path("reservation")], None, message=(
                "create a reservation: slurmrestd's data parser %s cannot (from %s on, Slurm 25.05); use slurm_api "
                "cli, or a validation backend of none" % (self.parser(), RESERVATION_SINCE)))
        body = {"name": name, "node_list": [node], "users": [users], "flags": ["MAINT", "IGNORE_JOBS"],
                "start_time": {"set": True, "infinite": False, "number": int(time.time())},
                "duration": {"set": False, "infinite": True, "number": 0}}
        return self._mutate("POST", "reservation", body, nodes=[node])

    def delete_reservation(self, name: str) -> Optional[CommandResult]:
        """``DELETE .../reservation/<name>``; None when it is not there (deleted before a crash)."""
        if not self.reservation_exists(name):
            return None
        return self._mutate("DELETE", self._reservation(name))

    @staticmethod
    def _reservation(name: str) -> str:
        return "reservation/%s" % urllib.parse.quote(check_reservation(name), safe="")

    def submit(self, job: BatchJob) -> Tuple[Optional[str], CommandResult]:
        """``POST .../job/submit``: the job id (None in check mode) and the call."""
        check_node(job.node)
        result, answer = self._mutate_document("POST", "job/submit", job.rest_body(), nodes=[job.node])
        if not result.ran:
            return None, result
        job_id = str(answer.get("job_id") or "")
        if not job_id:
            raise SlurmRestError(result.argv, 200, stderr="slurmrestd named no job id for %s: %s"
                                 % (job.name, json.dumps(answer)[:300]))
        return check_job_ids([job_id], "job_id")[0], result

    def job_stdout(self, job_id: Any) -> str:
        """The job's output file (``standard_output`` of ``GET .../job/<id>``)."""
        job_id = check_job_ids([job_id], "job_id")[0]
        path = self._path("job/%s" % urllib.parse.quote(job_id, safe=""))
        jobs = self._call("GET", path).get("jobs") or [{}]
        output = jobs[0].get("standard_output") if isinstance(jobs[0], dict) else None
        if not output:
            raise GpufleetError("slurmrestd names no standard_output for job %s" % job_id)
        return str(output)

    def _each(self, method: str, ids: List[str], tail: str) -> CommandResult:
        results = [self._mutate(method, tail % urllib.parse.quote(job_id, safe="")) for job_id in ids]
        argv = [word for result in results for word in result.argv]
        return CommandResult(argv=argv, rc=None if self.check_mode else 0, ran=not self.check_mode)


def _exit_codes(codes: Sequence[Any]) -> List[int]:
    return [check_int(code, "rest_requeue_exit[%d]" % index, 1, 255) for index, code in enumerate(codes)]


def _status_error(entry: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """A per-job answer's error as an ``errors`` entry, or None when it succeeded."""
    error = entry.get("error")
    if isinstance(error, dict) and error.get("code"):
        return {"description": "job %s" % entry.get("step_id", "?"),
                "error": error.get("message") or error.get("string"), "error_number": error.get("code")}
    code = entry.get("error_code")
    if code:
        return {"description": "job %s" % entry.get("job_id", "?"), "error": entry.get("error"), "error_number": code}
    return None


def _parser_key(version: str) -> Tuple[int, ...]:
    return tuple(int(part) for part in version.lstrip("v").split("."))
