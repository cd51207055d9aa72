"""The REST transport's own logic: tokens, data parser choice, error mapping, and the calls it
sends. Answers are slurmrestd 26.05's captured ones (tests/fixtures/slurm-captures/26.05/rest)
served through the client's HTTP function; the live server is tests/integration/slurm/test_slurm_rest.py."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from typing import Dict, List, Optional, Tuple

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.batch import BatchJob
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.client import SlurmClient
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.connect import slurm_client, slurm_options
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.errors import SlurmUnknownNodeError
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.rest import (
    SlurmRestAuthError,
    SlurmRestClient,
    SlurmRestError,
    SlurmRestVersionError,
    TokenSource,
    mint_token,
    token_expiry,
)

KEY = b"k" * 32
OPENAPI = {"paths": {"/slurm/v0.0.42/ping/": {}, "/slurm/v0.0.44/nodes/": {}, "/slurm/v0.0.45/nodes/": {},
                     "/slurmdb/v0.0.45/jobs/": {}}}


def _claims(token: str) -> dict:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def test_a_minted_token_is_hs256_signed_with_the_key_for_the_user():
    token = mint_token(KEY, "slurm-op", 600, now=1000)
    header, payload, signature = token.split(".")
    expected = hmac.new(KEY, ("%s.%s" % (header, payload)).encode(), hashlib.sha256).digest()
    assert base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4)) == expected
    assert _claims(token) == {"iat": 1000, "exp": 1600, "sun": "slurm-op"}
    assert token_expiry(token) == 1600
    with pytest.raises(FieldError, match="token"):
        token_expiry("not-a-token")


def test_a_minted_token_is_renewed_when_a_third_of_its_life_is_left(tmp_path):
    key = tmp_path / "jwt.key"
    key.write_bytes(KEY)
    now = [1000.0]
    tokens = TokenSource("root", jwt_key_file=str(key), lifespan=300, clock=lambda: now[0])
    first = tokens.token()
    now[0] += 150
    assert tokens.token() == first
    now[0] += 60  # 90 s of 300 left
    renewed = tokens.token()
    assert renewed != first and token_expiry(renewed) == 1210 + 300


def test_a_token_file_is_read_again_when_it_changes_and_an_expired_one_refused(tmp_path):
    path = tmp_path / "token"
    path.write_text(mint_token(KEY, "root", 600, now=1000) + "\n")
    now = [1100.0]
    tokens = TokenSource("root", token_file=str(path), clock=lambda: now[0])
    assert token_expiry(tokens.token()) == 1600
    path.write_text(mint_token(KEY, "root", 6000, now=1000))
    assert token_expiry(tokens.token()) == 7000
    now[0] = 8000
    with pytest.raises(FieldError, match=r"rest_token_file: the token in .* expired at"):
        tokens.token()


@pytest.mark.parametrize("kwargs, field", [
    ({}, "rest_jwt_key_file"),
    ({"jwt_key_file": "/a", "token_file": "/b"}, "rest_jwt_key_file"),
    ({"jwt_key_file": "/nonexistent/key"}, "rest_jwt_key_file"),
])
def test_a_token_source_needs_exactly_one_readable_secret(kwargs, field):
    with pytest.raises(FieldError) as bad:
        TokenSource("root", **kwargs).token()
    assert bad.value.field == field


class Server:
    """The HTTP function the client calls: canned answers by (method, path); records each call."""

    def __init__(self, answers: Dict[Tuple[str, str], Tuple[int, object]]) -> None:
        self.answers = answers
        self.calls: List[Tuple[str, str, Optional[dict], Dict[str, str]]] = []

    def __call__(self, method, url, body, headers, timeout):
        path = url.split("127.0.0.1:6820", 1)[1]
        self.calls.append((method, path, json.loads(body) if body else None, headers))
        # A version's ping is served where the OpenAPI document lists that version, as slurmrestd does.
        served = {m.group(1) for m in map(re.compile(r"^/slurm/(v[0-9.]+)/").match,
                                          self.answers.get(("GET", "/openapi/v3"), (0, {}))[1].get("paths", {})) if m}
        ping = re.fullmatch(r"/slurm/(v[0-9.]+)/ping/", path)
        if method == "GET" and ping and ping.group(1) in served and (method, path) not in self.answers:
            return 200, json.dumps({"pings": [], "meta": {"slurm": {"release": "26.05.5"}}, "errors": []})
        status, document = self.answers.get((method, path), (404, {"errors": [{"error": "no such path"}]}))
        return status, document if isinstance(document, str) else json.dumps(document)


def client(tmp_path, answers, **kwargs) -> Tuple[SlurmRestClient, Server]:
    key = tmp_path / "jwt.key"
    key.write_bytes(KEY)
    server = Server({("GET", "/openapi/v3"): (200, OPENAPI), **answers})
    return SlurmRestClient("http://127.0.0.1:6820", TokenSource("root", jwt_key_file=str(key)), http=server,
                           **kwargs), server


def test_the_newest_known_parser_is_used_and_every_call_carries_the_token(tmp_path, captures):
    nodes = json.loads(captures.text("26.05/rest/nodes.json"))
    rest, server = client(tmp_path, {("GET", "/slurm/v0.0.45/nodes/?flags=MIXED"): (200, nodes),
                                     ("GET", "/slurm/v0.0.45/jobs/"): (200, {"jobs": []})})
    assert rest.parser() == "v0.0.45"
    assert list(rest.nodes()) == [node["name"] for node in nodes["nodes"]]
    # The newest known version's ping answers: the 270 kB OpenAPI document is not read.
    assert [call[1] for call in server.calls] == ["/slurm/v0.0.45/ping/", "/slurm/v0.0.45/nodes/?flags=MIXED",
                                                  "/slurm/v0.0.45/jobs/"]
    for _method, _path, _body, headers in server.calls:
        assert headers["X-SLURM-USER-NAME"] == "root" and _claims(headers["X-SLURM-USER-TOKEN"])["sun"] == "root"


def test_a_server_with_only_unknown_parsers_is_refused_naming_both(tmp_path):
    rest, server = client(tmp_path, {("GET", "/openapi/v3"): (200, {"paths": {"/slurm/v0.0.46/nodes/": {}}})})
    with pytest.raises(SlurmRestVersionError, match=r"offers data parsers v0\.0\.46; this client knows v0\.0\.42"):
        rest.set_node_state("gpu-a-001", "DRAIN", "gpufleet: test")
    # Each known version's ping, newest first, then the document that names what is served; nothing changed.
    assert [call[:2] for call in server.calls] == [("GET", "/slurm/v0.0.45/ping/"), ("GET", "/slurm/v0.0.44/ping/"),
                                                   ("GET", "/slurm/v0.0.43/ping/"), ("GET", "/slurm/v0.0.42/ping/"),
                                                   ("GET", "/openapi/v3")]


def test_writes_send_what_scontrol_and_scancel_would_do(tmp_path):
    ok = (200, {"errors": [], "status": []})
    rest, server = client(tmp_path, {
        ("POST", "/slurm/v0.0.45/node/gpu-a-001"): ok,
        ("DELETE", "/slurm/v0.0.45/job/12?signal=TERM&flags=FULL_JOB"): ok,
        ("DELETE", "/slurm/v0.0.45/job/13_2?signal=USR1&flags=FULL_STEPS_ONLY"): ok,
        ("POST", "/slurm/v0.0.45/jobs/requeue"): ok,
        ("DELETE", "/slurm/v0.0.45/job/12"): ok})
    rest.set_node_state("gpu-a-001", "drain", "gpufleet: Xid79 | $HOME")
    rest.signal_jobs([12], "TERM")
    rest.signal_jobs(["13_2"], "usr1", full=False)
    rest.requeue(["12", "13"])
    rest.cancel(["12"])
    rest.set_node_placement("gpu-a-001", 1100, ["var_high", "h100"], ["var_high"])
    rest.set_node_placement("gpu-a-001", 1, [], [])
    sent = [(method, path, body) for method, path, body, _headers in server.calls[1:]]
    assert sent == [
        ("POST", "/slurm/v0.0.45/node/gpu-a-001", {"state": ["DRAIN"], "reason": "gpufleet: Xid79 | $HOME"}),
        ("DELETE", "/slurm/v0.0.45/job/12?signal=TERM&flags=FULL_JOB", None),
        ("DELETE", "/slurm/v0.0.45/job/13_2?signal=USR1&flags=FULL_STEPS_ONLY", None),
        ("POST", "/slurm/v0.0.45/jobs/requeue", {"jobs": ["12", "13"]}),
        ("DELETE", "/slurm/v0.0.45/job/12", None),
        ("POST", "/slurm/v0.0.45/node/gpu-a-001", {"weight": {"set": True, "infinite": False, "number": 1100},
                                                   "features": ["var_high", "h100"], "features_act": ["var_high"]}),
        # An empty array is "leave as it is" to slurmrestd; [""] clears, as scontrol's empty value.
        ("POST", "/slurm/v0.0.45/node/gpu-a-001", {"weight": {"set": True, "infinite": False, "number": 1},
                                                   "features": [""], "features_act": [""]})]


def test_a_batch_job_is_submitted_as_sbatch_wraps_it_and_its_batch_step_killed(tmp_path):
    ok = (200, {"errors": [], "status": []})
    rest, server = client(tmp_path, {
        ("POST", "/slurm/v0.0.45/job/submit"): (200, {"job_id": 31, "step_id": "batch", "errors": []}),
        ("DELETE", "/slurm/v0.0.45/job/31?signal=KILL&flags=BATCH_JOB&flags=FULL_JOB"): ok,
        ("GET", "/slurm/v0.0.45/job/31"): (200, {"jobs": [{"job_id": 31, "standard_output": "/scratch/burn.out"}]})})
    job = BatchJob(name="gpufleet-chaos-burn-f1", node="gpu-a-002", command=("gpu_burn", "-d", "-m", "90%", "60"),
                   minutes=3, output="/scratch/burn.out", gpus=2)
    job_id, result = rest.submit(job)
    assert job_id == "31" and result.ran
    rest.signal_jobs([31], "KILL", batch=True)
    assert rest.job_stdout("31") == "/scratch/burn.out"
    body = server.calls[1][2]["job"]
    assert body["script"] == "#!/bin/sh\ngpu_burn -d -m 90% 60\n"
    assert (body["required_nodes"], body["tres_per_node"], body["time_limit"]["number"], body["standard_output"]) \
        == (["gpu-a-002"], "gres/gpu:2", 3, "/scratch/burn.out")
    # No --export from a REST call: the job gets a PATH of its own, never the caller's environment.
    assert [e.split("=")[0] for e in body["environment"]] == ["PATH", "LC_ALL"]
    assert [call[:2] for call in server.calls[2:]] == [
        ("DELETE", "/slurm/v0.0.45/job/31?signal=KILL&flags=BATCH_JOB&flags=FULL_JOB"),
        ("GET", "/slurm/v0.0.45/job/31")]
    # Check mode submits nothing, and a bad node never reaches the server.
    dry, dry_server = client(tmp_path, {}, check_mode=True)
    assert dry.submit(job)[0] is None and [c[0] for c in dry_server.calls] == ["GET"]
    with pytest.raises(FieldError, match="node"):
        rest.submit(BatchJob(name="x", node="-w", command=("true",), minutes=1, output="/dev/null"))


def test_bad_input_is_refused_before_anything_is_sent(tmp_path):
    rest, server = client(tmp_path, {})
    with pytest.raises(FieldError, match="node"):
        rest.set_node_state("gpu-[1-4]", "DRAIN", "x")
    with pytest.raises(FieldError, match="reason"):
        rest.set_node_state("gpu-a-001", "DRAIN")
    with pytest.raises(FieldError, match="job_ids"):
        rest.cancel(["--me"])
    assert server.calls == []
    for url in ("ftp://127.0.0.1:6820", "http://slurm.example.com:6820", ""):
        with pytest.raises(FieldError, match="rest_url"):
            SlurmRestClient(url, rest.tokens)
    # Slinky's RestApi Service serves plain http inside the cluster: only when asked for.
    inside = SlurmRestClient("http://slurm-restapi.slurm.svc.cluster.local:6820", rest.tokens, allow_http=True)
    assert inside.url == "http://slurm-restapi.slurm.svc.cluster.local:6820"
    with pytest.raises(FieldError, match="ftp"):
        SlurmRestClient("ftp://127.0.0.1:6820", rest.tokens, allow_http=True)


def test_check_mode_sends_no_write(tmp_path):
    rest, server = client(tmp_path, {}, check_mode=True)
    result = rest.set_node_state("gpu-a-001", "DOWN", "gpufleet: dry")
    assert (result.ran, result.rc) == (False, None)
    assert result.argv == ["POST", "http://127.0.0.1:6820/slurm/v0.0.45/node/gpu-a-001",
                           '{"reason": "gpufleet: dry", "state": ["DOWN"]}']
    assert rest.cancel(["1", "2"]).ran is False
    assert [call[0] for call in server.calls] == ["GET"]  # the parser choice only


def test_answers_become_the_typed_errors(tmp_path, captures):
    bad_token = json.loads(captures.text("26.05/rest/bad_token.json"))
    unknown = json.loads(captures.text("26.05/rest/node_unknown.json"))
    gone = {"errors": [], "status": [{"error": {"code": 2021, "message": "Job/step already completing or completed"},
                                      "step_id": "7"}]}
    rest, _server = client(tmp_path, {
        ("GET", "/slurm/v0.0.45/nodes/?flags=MIXED"): (511, bad_token),
        ("POST", "/slurm/v0.0.45/node/nosuch"): (200, {"errors": [{
            "description": "Failure to update node nosuch", "error": "Invalid node name specified"}]}),
        ("GET", "/slurm/v0.0.45/node/nosuch"): (200, unknown),
        ("DELETE", "/slurm/v0.0.45/job/7"): (200, gone),
        ("DELETE", "/slurm/v0.0.45/job/8"): (500, "internal error")})
    with pytest.raises(SlurmRestAuthError, match=r"refused the token for user root \(HTTP 511: .*Protocol "
                                                 r"authentication error"):
        rest.nodes()
    with pytest.raises(SlurmUnknownNodeError) as missing:
        rest.set_node_state("nosuch", "DRAIN", "gpufleet: test")
    assert missing.value.nodes == ["nosuch"]
    assert rest.cancel_unless_gone("7") is None
    with pytest.raises(SlurmRestError, match=r"rc 200.*already completing"):
        rest.cancel(["7"])
    with pytest.raises(SlurmRestError, match=r"rc 500.*internal error"):
        rest.cancel(["8"])


def test_an_unreachable_server_is_a_typed_error(tmp_path):
    def refused(*_args):
        raise ConnectionRefusedError(111, "Connection refused")

    rest, _server = client(tmp_path, {})
    rest.http = refused
    with pytest.raises(SlurmRestError, match="cannot reach slurmrestd") as unreachable:
        rest.ping()
    assert unreachable.value.rc is None and "X-SLURM-USER-TOKEN" not in str(unreachable.value)


@pytest.mark.parametrize("params, field", [
    ({"slurm_api": "rest"}, "rest_url"),
    ({"slurm_api": "rest", "rest_url": "http://127.0.0.1:6820", "bin_dir": "/usr/bin"}, "bin_dir"),
    ({"slurm_api": "cli", "rest_url": "https://slurm:6820"}, "rest_url"),
    ({"slurm_api": "cli", "rest_jwt_key_file": "/key"}, "rest_jwt_key_file"),
    ({"slurm_api": "rest", "rest_url": "http://127.0.0.1:6820"}, "rest_jwt_key_file"),
    ({"slurm_api": "grpc"}, "slurm_api"),
    ({"slurm_api": "cli", "rest_requeue_exit": [75]}, "rest_requeue_exit"),
    ({"slurm_api": "cli", "rest_allow_http": True}, "rest_allow_http"),
])
def test_the_connection_options_name_the_one_that_is_wrong(params, field):
    with pytest.raises(FieldError) as bad:
        slurm_client(params, run=lambda *_: (0, "", ""))
    assert bad.value.field == field


def test_a_dict_of_connection_options_is_checked_by_name():
    assert slurm_options(None) is None
    assert slurm_options({"slurm_api": "cli", "slurm_conf": "/lab/slurm.conf", "bin_dir": None}) == {
        "slurm_api": "cli", "slurm_conf": "/lab/slurm.conf"}
    with pytest.raises(FieldError) as bad:
        slurm_options({"slurm_api": "cli", "slurmconf": "/lab/slurm.conf"})
    assert bad.value.field == "slurm.slurmconf"


def test_the_connection_options_make_the_client_they_ask_for(tmp_path):
    key = tmp_path / "jwt.key"
    key.write_bytes(KEY)
    cli = slurm_client({"slurm_conf": "/lab/slurm.conf", "bin_dir": "/lab/bin", "timeout": 9},
                       run=lambda *_: (0, "", ""), check_mode=True)
    assert isinstance(cli, SlurmClient) and cli.runner.binary("scontrol") == "/lab/bin/scontrol"
    assert (cli.runner.slurm_conf, cli.runner.timeout, cli.check_mode) == ("/lab/slurm.conf", 9, True)
    rest = slurm_client({"slurm_api": "rest", "rest_url": "https://slurm:6820/", "rest_user": "gpufleet",
                         "rest_jwt_key_file": str(key), "timeout": 9}, run=lambda *_: (0, "", ""))
    assert isinstance(rest, SlurmRestClient) and rest.url == "https://slurm:6820"
    assert (rest.tokens.user, rest.timeout, rest.check_mode) == ("gpufleet", 9, False)


def test_requeue_exit_codes_are_the_ones_given_since_slurmrestd_does_not_show_them(tmp_path):
    unknown, _server = client(tmp_path, {})
    with pytest.raises(SlurmRestError, match="give its codes as rest_requeue_exit"):
        unknown.requeue_exit_codes()
    given, server = client(tmp_path, {}, requeue_exit=[75, 80])
    assert given.requeue_exit_codes() == [75, 80] and server.calls == []
    assert client(tmp_path, {}, requeue_exit=[])[0].requeue_exit_codes() == []
    with pytest.raises(FieldError) as bad:
        client(tmp_path, {}, requeue_exit=[75, 256])
    assert bad.value.field == "rest_requeue_exit[1]"


def test_one_node_is_read_by_its_own_path_and_an_unknown_one_named(tmp_path, captures):
    nodes = json.loads(captures.text("26.05/rest/nodes.json"))
    first = nodes["nodes"][0]["name"]
    one = dict(nodes, nodes=nodes["nodes"][:1])
    unknown = json.loads(captures.text("26.05/rest/node_unknown.json"))  # HTTP 200, "Failure to query node nosuch"
    rest, server = client(tmp_path, {("GET", "/slurm/v0.0.45/node/%s?flags=MIXED" % first): (200, one),
                                     ("GET", "/slurm/v0.0.45/node/nosuch?flags=MIXED"): (200, unknown)})
    assert list(rest.nodes([first], with_jobs=False)) == [first]
    paths = [path for _method, path, _body, _headers in server.calls[1:]]
    assert paths == ["/slurm/v0.0.45/node/%s?flags=MIXED" % first]
    with pytest.raises(SlurmUnknownNodeError, match=r"nosuch \(FUTURE nodes are listed only with future\)") as missing:
        rest.nodes(["nosuch"], with_jobs=False)
    assert missing.value.nodes == ["nosuch"]


def test_a_reservation_is_made_looked_up_and_deleted_as_scontrol_would(tmp_path):
    name, path = "gpufleet-validate-0a1b2c3d4e5f", "/slurm/v0.0.45/reservation/gpufleet-validate-0a1b2c3d4e5f"
    listed = {"reservations": [{"name": "maintenance-window"}], "errors": []}
    rest, server = client(tmp_path, {("GET", "/slurm/v0.0.45/reservations/"): (200, listed),
                                     ("POST", "/slurm/v0.0.45/reservation"): (200, {"reservations": []})})
    assert rest.reservation_exists(name) is False and rest.delete_reservation(name) is None
    rest.create_reservation(name, "gpu-a-003", "slurm")
    method, _path, body, _headers = server.calls[-1]
    assert method == "POST" and body["name"] == name and body["node_list"] == ["gpu-a-003"]
    assert body["users"] == ["slurm"] and body["flags"] == ["MAINT", "IGNORE_JOBS"]
    assert body["duration"] == {"set": False, "infinite": True, "number": 0} and body["start_time"]["set"] is True
    listed["reservations"].append({"name": name})
    server.answers[("DELETE", path)] = (200, {"errors": []})
    assert rest.reservation_exists(name) is True
    assert rest.delete_reservation(name).argv == ["DELETE", "http://127.0.0.1:6820" + path]
    with pytest.raises(FieldError) as bad:
        rest.reservation_exists("x/../../nodes")
    assert bad.value.field == "reservation"


def test_a_server_before_25_05_cannot_make_a_reservation(tmp_path):
    old = {"paths": {"/slurm/v0.0.42/ping/": {}}}
    rest, server = client(tmp_path, {("GET", "/openapi/v3"): (200, old)})
    with pytest.raises(SlurmRestError, match=r"data parser v0\.0\.42 cannot \(from v0\.0\.43 on, Slurm 25\.05"):
        rest.create_reservation("gpufleet-validate-0a1b2c3d4e5f", "gpu-a-003", "slurm")
    assert not [call for call in server.calls if call[0] == "POST"]
