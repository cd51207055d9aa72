"""The Slurm client through slurmrestd (slurm_api: rest) against the Slurm-only 26.05 lab's real
slurmrestd and slurmctld: the same models as the CLI client on the same cluster, the same effect of
each mutating call, and every refusal a clear typed error with nothing done.

Every test leaves the cluster as it found it: nodes resumed, jobs cancelled.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import pytest
import yaml
from lab_harness import VENV_BIN
from slurm_clusters import REASON, SlurmCluster, wait_for

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.batch import BatchJob
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.client import SlurmClient
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.errors import (
    SlurmCommandError,
    SlurmUnknownNodeError,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.rest import (
    SlurmRestAuthError,
    SlurmRestClient,
    SlurmRestError,
    SlurmRestVersionError,
    TokenSource,
    mint_token,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import SlurmRunner

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def url(slurm_lab) -> str:
    return "http://127.0.0.1:%d" % slurm_lab.extra_vars["slurm_slurmrestd_port"]


@pytest.fixture(scope="module")
def key_file(slurm_lab) -> Path:
    return slurm_lab.lab_dir / "slurm" / "jwt" / "jwt_hs256.key"


@pytest.fixture(scope="module")
def cli(slurm_lab) -> SlurmClient:
    return SlurmClient(SlurmRunner(slurm_conf=str(slurm_lab.slurm_conf), bin_dir=str(slurm_lab.lab_dir / "bin"),
                                   timeout=30))


@pytest.fixture(scope="module")
def rest(url, key_file) -> SlurmRestClient:
    return SlurmRestClient(url, TokenSource("root", jwt_key_file=str(key_file)), timeout=30)


@pytest.fixture(scope="module")
def names(slurm_lab) -> List[str]:
    pool = slurm_lab.extra_vars["gpufleet_node_pools"][0]
    return ["%s-%03d" % (pool["name"], index) for index in range(1, pool["count"] + 1)]


def wait_quiet(cli: SlurmClient) -> None:
    """No job left and no node flag (COMPLETING, NOT_RESPONDING after a resume): two reads a moment
    apart then see the same cluster, whichever transport makes them."""
    wait_for("the cluster quiet", lambda: not cli.jobs() and not any(
        node.flags for node in cli.nodes(with_jobs=False).values()), timeout=60)


def submit(slurm_lab, *args: str) -> str:
    return SlurmCluster(lab=slurm_lab, version="26.05").command(
        "sbatch", "--parsable", "--output=/dev/null", "--chdir=/tmp", *args).strip().split(";")[0]


def test_every_read_gives_the_cli_models_with_jobs_arrays_and_a_drained_node(slurm_lab, cli, rest, names):
    wait_quiet(cli)
    assert rest.parser() == "v0.0.45" and str(rest.version()) == str(cli.version())
    assert rest.ping() == cli.ping() and rest.ping()[0]["state"] == "UP"
    jobs: List[str] = []
    drained = names[-1]
    try:
        jobs.append(submit(slurm_lab, "--requeue", "--gres=gpu:1", "--nodelist=" + names[0], "--wrap", "sleep 300"))
        jobs.append(submit(slurm_lab, "--array=1-2", "--gres=gpu:1", "--nodelist=" + names[1], "--wrap", "sleep 300"))
        cli.set_node_state(drained, "DRAIN", REASON)
        wait_for("three jobs running", lambda: len([j for j in cli.jobs() if j.state == "RUNNING"]) == 3)
        for future in (False, True):
            assert rest.nodes(future=future) == cli.nodes(future=future)
        assert rest.nodes(names=[drained])[drained].reason == REASON
        listed = rest.jobs()
        assert listed == cli.jobs()
        assert sorted(job.job_id for job in listed) == sorted([jobs[0], jobs[1] + "_1", jobs[1] + "_2"])
        assert rest.jobs(nodes=[names[1]]) == cli.jobs(nodes=[names[1]])
    finally:
        for job_id in jobs:
            with contextlib.suppress(SlurmCommandError):
                cli.cancel([job_id])
        cli.set_node_state(drained, "RESUME")


def test_each_write_has_the_cli_effect(slurm_lab, cli, rest, names):
    node = names[-1]
    jobs: List[str] = []

    def state(job_id: str) -> str:
        found = [job for job in cli.jobs() if job.job_id == job_id]
        return found[0].state if found else "GONE"

    try:
        drained = rest.set_node_state(node, "DRAIN", REASON)
        assert drained.ran and drained.argv[:2] == ["POST", rest.url + "/slurm/v0.0.45/node/" + node]
        seen = cli.nodes(names=[node], with_jobs=False)[node]
        assert ("DRAIN" in seen.flags, seen.reason, seen.reason_user) == (True, REASON, "root")
        rest.set_node_state(node, "RESUME")
        wait_for("%s back without flags" % node, lambda: cli.nodes(names=[node], with_jobs=False)[node].flags == ())

        signalled = submit(slurm_lab, "--requeue", "--nodelist=" + names[0], "--wrap", "sleep 300")
        requeued = submit(slurm_lab, "--requeue", "--nodelist=" + names[0], "--wrap", "sleep 300")
        cancelled = submit(slurm_lab, "--requeue", "--nodelist=" + names[0], "--wrap", "sleep 300")
        jobs += [signalled, requeued, cancelled]
        wait_for("three jobs RUNNING", lambda: {state(j) for j in jobs} == {"RUNNING"})

        rest.requeue([requeued])
        wait_for("requeued job PENDING, done completing", lambda: [
            (j.state, j.restarts, "COMPLETING" in j.flags) for j in cli.jobs() if j.job_id == requeued]
            == [("PENDING", 1, False)])
        # SIGTERM with FULL_JOB reaches the batch shell, as scancel --full: the job ends FAILED on it.
        rest.signal_jobs([signalled], "TERM")
        wait_for("signalled job ended", lambda: state(signalled) == "GONE")
        ended = [j for j in cli.jobs(states=["FAILED", "CANCELLED", "COMPLETED"]) if j.job_id == signalled]
        assert ended and ended[0].state == "FAILED", ended
        rest.cancel([cancelled])
        wait_for("cancelled job gone", lambda: state(cancelled) == "GONE")
        # A job that has ended: nothing left to cancel, as the CLI client says.
        assert rest.cancel_unless_gone(cancelled) is None
    finally:
        for job_id in jobs:
            with contextlib.suppress(SlurmCommandError):
                cli.cancel([job_id])
        if cli.nodes(names=[node], with_jobs=False)[node].flags:
            cli.set_node_state(node, "RESUME")


def test_a_placement_write_has_the_cli_effect(cli, rest, names):
    """The variability publisher's write: weight and both feature lists, set and cleared through
    slurmrestd read back as the CLI's write of the same values reads."""
    node = names[1]
    before = cli.nodes(names=[node], with_jobs=False)[node]

    def placement():
        seen = cli.nodes(names=[node], with_jobs=False)[node]
        return seen.weight, seen.features, seen.active_features

    try:
        written = rest.set_node_placement(node, 1100, ["var_high", "gpufleet_test"], ["var_high"])
        assert written.ran and written.argv[:2] == ["POST", rest.url + "/slurm/v0.0.45/node/" + node]
        through_rest = placement()
        cli.set_node_placement(node, 1, [], [])
        cli.set_node_placement(node, 1100, ["var_high", "gpufleet_test"], ["var_high"])
        assert through_rest == placement() == (1100, ("var_high", "gpufleet_test"), ("var_high",))
        # Empty lists clear both, as scontrol's empty values do.
        rest.set_node_placement(node, 7, [], [])
        assert placement() == (7, (), ())
        assert rest.nodes(names=[node], with_jobs=False) == cli.nodes(names=[node], with_jobs=False)
    finally:
        cli.set_node_placement(node, before.weight or 1, list(before.features), list(before.active_features))
    assert placement() == (before.weight or 1, before.features, before.active_features)


def test_check_mode_sends_nothing(url, key_file, cli, names):
    node = names[-1]
    before = cli.nodes(names=[node], future=True)[node]
    dry = SlurmRestClient(url, TokenSource("root", jwt_key_file=str(key_file)), check_mode=True)
    result = dry.set_node_state(node, "DOWN", "gpufleet: check mode must not do this")
    assert (result.ran, result.rc) == (False, None)
    assert result.argv[0] == "POST" and '"state": ["DOWN"]' in result.argv[2]
    assert dry.cancel(["1"]).ran is False and dry.requeue(["1"]).ran is False
    assert dry.nodes(names=[node], future=True)[node] == before  # reads still run
    assert cli.nodes(names=[node], future=True)[node] == before


def test_refusals_name_the_cause_and_change_nothing(slurm_lab, url, key_file, cli, names, tmp_path):
    node = names[-1]
    wait_quiet(cli)  # a job left pending by the test before marks nodes PLANNED while backfill looks at it
    before = cli.nodes(future=True)

    # A token signed with another key: slurmctld refuses it, slurmrestd says so.
    other_key = tmp_path / "other.key"
    other_key.write_bytes(os.urandom(32))
    other_key.chmod(0o600)
    wrong = SlurmRestClient(url, TokenSource("root", jwt_key_file=str(other_key)))
    with pytest.raises(SlurmRestAuthError, match="refused the token for user root"):
        wrong.set_node_state(node, "DRAIN", "gpufleet: must not happen")

    # An expired token in a token file: refused here, naming the file, before anything is sent.
    expired = tmp_path / "token"
    expired.write_text(mint_token(key_file.read_bytes(), "root", 60, now=time.time() - 3600))
    stale = SlurmRestClient(url, TokenSource("root", token_file=str(expired)))
    with pytest.raises(FieldError, match=r"rest_token_file.*expired"):
        stale.set_node_state(node, "DRAIN", "gpufleet: must not happen")
    # ...and one that slurmctld sees expired (signed right, exp passed) is refused by it too.
    late = SlurmRestClient(url, TokenSource("root", jwt_key_file=str(key_file)))
    late.tokens._token = mint_token(key_file.read_bytes(), "root", 60, now=time.time() - 3600)
    late.tokens._expires = time.time() + 600  # pretend it is fresh: the server must still refuse it
    with pytest.raises(SlurmRestAuthError):
        late.nodes()

    # slurmrestd down (nothing listens on that port).
    down = SlurmRestClient("http://127.0.0.1:9", TokenSource("root", jwt_key_file=str(key_file)), timeout=5)
    with pytest.raises(SlurmRestError, match="cannot reach slurmrestd"):
        down.set_node_state(node, "DRAIN", "gpufleet: must not happen")

    # A node slurmctld does not know.
    rest = SlurmRestClient(url, TokenSource("root", jwt_key_file=str(key_file)))
    with pytest.raises(SlurmUnknownNodeError) as unknown:
        rest.set_node_state("gpu-z-999", "DRAIN", "gpufleet: no such node")
    assert unknown.value.nodes == ["gpu-z-999"] and "Invalid node name specified" in unknown.value.stderr

    # A server whose data parsers are all newer than the client knows: refused, naming both.
    newer = SlurmRestClient(url, TokenSource("root", jwt_key_file=str(key_file)), known_parsers=("v0.0.41",))
    with pytest.raises(SlurmRestVersionError, match=r"offers data parsers v0\.0\.42, .*v0\.0\.45; this client knows "
                                                    r"v0\.0\.41"):
        newer.set_node_state(node, "DRAIN", "gpufleet: must not happen")

    # Plain http to anything but loopback would send the token in clear.
    with pytest.raises(FieldError, match="rest_url"):
        SlurmRestClient("http://slurm.example.com:6820", TokenSource("root", jwt_key_file=str(key_file)))

    assert cli.nodes(future=True) == before


def test_slurm_node_info_reads_the_same_through_either_api(slurm_lab, cli, url, key_file, names, tmp_path):
    """The module through ansible-playbook: slurm_api cli and rest give the same nodes; a rest run with a
    CLI option is refused naming it."""
    wait_quiet(cli)
    out = tmp_path / "result.json"
    playbook = tmp_path / "node_info.yml"
    module = "gpufleet.resilience.slurm_node_info"
    rest = {"slurm_api": "rest", "rest_url": url, "rest_jwt_key_file": str(key_file), "future": True}
    playbook.write_text(yaml.safe_dump([{
        "name": "slurm_node_info through both APIs", "hosts": "localhost", "gather_facts": False,
        "vars": {"ansible_python_interpreter": sys.executable},
        "tasks": [
            {"name": "CLI", module: {"slurm_conf": str(slurm_lab.slurm_conf), "bin_dir": str(slurm_lab.lab_dir / "bin"),
                                     "future": True}, "register": "cli"},
            {"name": "REST", module: rest, "register": "rest"},
            {"name": "REST with a CLI option", module: dict(rest, bin_dir="/usr/bin"), "register": "mixed",
             "ignore_errors": True},
            {"name": "Save", "ansible.builtin.copy": {
                "content": "{{ {'cli': cli, 'rest': rest, 'mixed': mixed} | to_json }}", "dest": str(out)}},
        ],
    }]))
    done = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook)],
                          env=slurm_lab.env(), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert result["rest"]["nodes"] == result["cli"]["nodes"] and result["rest"]["slurm_version"].startswith("26.05.")
    assert [node["name"] for node in result["rest"]["nodes"]][:len(names)] == names
    assert result["mixed"]["failed"] and result["mixed"]["field"] == "bin_dir"
    assert str(key_file.read_bytes()) not in done.stdout


def test_a_batch_job_runs_alike_through_either_api_and_its_batch_step_is_killed(cli, rest, names, tmp_path):
    """The drills' job (a burn, a NUMA load, a neighbour): submitted through sbatch and through
    job/submit, the same job on the same node with the same GRES, time limit and output; a KILL to the
    batch step ends it FAILED at once (no SIGTERM grace), as scancel --batch does."""
    wait_quiet(cli)
    tmp_path.chmod(0o777)
    ids = {}
    try:
        for name, client in (("cli", cli), ("rest", rest)):
            job = BatchJob(name="gpufleet-test-%s" % name, node=names[1], gpus=2, minutes=3,
                           command=("sh", "-c", "echo started $0; sleep 300", name),
                           output=str(tmp_path / ("%s.out" % name)))
            ids[name], result = client.submit(job)
            assert result.ran and ids[name]
        wait_for("both jobs RUNNING and printing", lambda: {
            j.job_id for j in cli.jobs() if j.state == "RUNNING"} == set(ids.values()) and all(
            (tmp_path / ("%s.out" % name)).exists() for name in ids))
        listed = {j.job_id: j for j in rest.jobs()}
        assert listed == {j.job_id: j for j in cli.jobs()}
        assert [listed[ids[name]].nodes for name in ("cli", "rest")] == [(names[1],)] * 2

        def asked(job_id: str) -> List[str]:
            text = cli.runner.run("scontrol", "oneliner action", oneliner=True, action=["show", "job", job_id]).stdout
            return sorted(word for word in text.split() if word.split("=")[0] in ("TresPerNode", "TimeLimit"))

        assert asked(ids["cli"]) == asked(ids["rest"]) == ["TimeLimit=00:03:00", "TresPerNode=gres/gpu:2"]
        for name in ids:
            assert cli.job_stdout(ids[name]) == rest.job_stdout(ids[name]) == str(tmp_path / ("%s.out" % name))
            assert (tmp_path / ("%s.out" % name)).read_text().startswith("started %s" % name)
        rest.signal_jobs([ids["rest"]], "KILL", batch=True)
        cli.signal_jobs([ids["cli"]], "KILL", batch=True)
        wait_for("both killed", lambda: not [j for j in cli.jobs() if j.job_id in ids.values()])
        ended = {j.job_id: j.state for j in cli.jobs(states=["FAILED", "CANCELLED"]) if j.job_id in ids.values()}
        assert ended == {ids["cli"]: "FAILED", ids["rest"]: "FAILED"}, ended
    finally:
        for job_id in ids.values():
            cli.cancel_unless_gone(job_id)
