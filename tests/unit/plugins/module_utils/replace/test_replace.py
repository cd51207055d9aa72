# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""node_replace's input rules and its command provider, run with real (tiny) commands."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.replace.api import ReplaceRequest, check_request
from ansible_collections.gpufleet.resilience.plugins.module_utils.replace.command import (
    CommandFailed,
    command_argv,
    run_replace_command,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import subprocess_run


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        (dict(provider="cloud"), "provider", "must be one of lab, clusterapi, command"),
        (dict(state="gone"), "state", "must be one of replaced, restored"),
        (dict(name="GPU_A"), "name", "must be a node name"),
        (dict(name=""), "name", "must be a node name"),
        (dict(spare="-x"), "spare", "must be a node name"),
        (dict(remediation_id="a b"), "remediation_id", "must be 1-63"),
        (dict(wait_timeout=0), "wait_timeout", "more than 0"),
        (dict(boot_delay=-1), "boot_delay", "0 or more"),
        (dict(lab_dir=None), "lab_dir", "is required with provider lab"),
        (dict(command=["x"]), "command", "is for provider command only"),
        (dict(provider="clusterapi", state="restored"), "state", "restored is for provider lab only"),
        (dict(provider="command", command=["x"], state="retired"), "state", "retired is for provider lab only"),
        (dict(state="retired", spare="gpu-a-005"), "spare", "is not used with state retired"),
        (dict(provider="clusterapi", spare="gpu-a-005"), "spare", "is for provider lab only"),
        (dict(provider="command"), "command", "is required with provider command"),
        (dict(provider="command", command=["x"], command_timeout=0), "command_timeout", "more than 0"),
    ],
)
def test_bad_input_names_its_option(changes, field, words) -> None:
    request = ReplaceRequest(**dict(dict(name="gpu-a-001", provider="lab", lab_dir="/lab"), **changes))
    with pytest.raises(FieldError) as err:
        check_request(request)
    assert err.value.field == field and words in err.value.message


def test_good_requests_pass() -> None:
    check_request(ReplaceRequest(name="gpu-a-001", provider="lab", lab_dir="/lab", spare="gpu-a-005",
                                 remediation_id="r-20261130-0001", boot_delay=2))
    # The remediation passes its lab settings whatever the provider: they are ignored.
    check_request(ReplaceRequest(name="node.example", provider="clusterapi", lab_dir="/lab", boot_delay=3))
    check_request(ReplaceRequest(name="n1", provider="command", command=["true"]))
    check_request(ReplaceRequest(name="gpu-b-002", provider="lab", lab_dir="/lab", state="retired"))


def test_placeholders_are_words_not_a_format_string() -> None:
    argv = command_argv(["cli", "--node={node}", '{"id": "{remediation_id}"}', "{other}"], "gpu-a-003", "r-1")
    assert argv == ["cli", "--node=gpu-a-003", '{"id": "r-1"}', "{other}"]
    with pytest.raises(FieldError, match=r"remediation_id: is required: command\[1\] uses"):
        command_argv(["cli", "{remediation_id}"], "n", None)
    for bad, field in (([], "command"), ("cli {node}", "command"), (["cli", 3], "command[1]"), ([""], "command[0]")):
        with pytest.raises(FieldError) as err:
            command_argv(bad, "n", None)
        assert err.value.field == field


def test_the_command_runs_with_the_node_in_its_argv_and_environment(tmp_path: Path) -> None:
    out = tmp_path / "out"
    script = "import os, sys; open(sys.argv[1], 'w').write(sys.argv[2] + ' ' + os.environ['GPUFLEET_REMEDIATION_ID'])"
    template = [sys.executable, "-c", script, str(out), "{node}"]
    planned = run_replace_command(subprocess_run, template, "gpu-a-003", "r-7", timeout=30, check_mode=True)
    assert planned.changed and planned.rc is None and not out.exists()
    assert planned.actions == ["run %s" % " ".join(planned.argv)]
    done = run_replace_command(subprocess_run, template, "gpu-a-003", "r-7", timeout=30)
    assert done.changed and done.rc == 0 and out.read_text() == "gpu-a-003 r-7"


def test_a_failing_missing_or_slow_command_fails_with_its_words(tmp_path: Path) -> None:
    failing = [sys.executable, "-c", "import sys; sys.stderr.write('no capacity'); sys.exit(4)"]
    with pytest.raises(CommandFailed, match=r"command exited 4: .*: no capacity") as err:
        run_replace_command(subprocess_run, failing, "n", timeout=30)
    assert err.value.rc == 4 and err.value.details()["stderr"] == "no capacity"
    with pytest.raises(FieldError, match=r"command\[0\]: '/nonexistent/cli' is not an executable program"):
        run_replace_command(subprocess_run, ["/nonexistent/cli"], "n", check_mode=True)
    with pytest.raises(CommandFailed, match=r"command timed out after 0\.5s"):
        run_replace_command(subprocess_run, [sys.executable, "-c", "import time; time.sleep(30)"], "n", timeout=0.5)
