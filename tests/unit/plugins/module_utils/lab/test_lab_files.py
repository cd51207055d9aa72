# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""lab_files: many paths in one run, only what differs written, check mode writes nothing, a bad
entry named by its field, a refused validation leaves the old file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab.lab_files import (
    LabFilesError,
    ensure,
    parse,
    plan,
)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def wanted(tmp_path: Path):
    return [
        {"path": str(tmp_path / "lab"), "mode": "0755"},
        {"path": str(tmp_path / "lab" / "kube"), "mode": "0700"},
        {"path": str(tmp_path / "lab" / "env.d" / "k.sh"), "content": "export A=1\n", "mode": "0644"},
        {"path": str(tmp_path / "lab" / "kmsg.log"), "content": "", "force": False, "mode": "0644"},
    ]


def test_lab_files_first_run_creates_then_a_rerun_changes_nothing(tmp_path):
    specs = parse(wanted(tmp_path))
    changes = ensure(specs, check_mode=False)
    assert [change["path"] for change in changes] == [spec.path for spec in specs]
    assert mode_of(tmp_path / "lab" / "kube") == 0o700
    assert (tmp_path / "lab" / "env.d" / "k.sh").read_text() == "export A=1\n"
    assert mode_of(tmp_path / "lab" / "env.d" / "k.sh") == 0o644
    assert ensure(specs, check_mode=False) == []


def test_lab_files_repairs_exactly_the_drift(tmp_path):
    specs = parse(wanted(tmp_path))
    ensure(specs, check_mode=False)
    (tmp_path / "lab" / "env.d" / "k.sh").write_text("tampered\n")
    os.chmod(tmp_path / "lab" / "kube", 0o755)
    (tmp_path / "lab" / "kmsg.log").write_text("a driver line\n")
    planned = ensure(specs, check_mode=True)
    assert {change["path"]: change["needs"] for change in planned} == {
        str(tmp_path / "lab" / "kube"): ["mode"],
        str(tmp_path / "lab" / "env.d" / "k.sh"): ["content"],
    }
    assert planned[1]["before"] == "tampered\n" and planned[1]["after"] == "export A=1\n"
    assert (tmp_path / "lab" / "env.d" / "k.sh").read_text() == "tampered\n", "check mode wrote"
    assert ensure(specs, check_mode=False) == planned
    assert (tmp_path / "lab" / "env.d" / "k.sh").read_text() == "export A=1\n"
    # force: false keeps what drills appended.
    assert (tmp_path / "lab" / "kmsg.log").read_text() == "a driver line\n"
    assert ensure(specs, check_mode=False) == []


def test_lab_files_absent_and_another_kind_refused(tmp_path):
    old = tmp_path / "old.kubeconfig"
    old.write_text("token")
    specs = parse([{"path": str(old), "state": "absent"}])
    assert plan(specs[0]) == ["remove"]
    ensure(specs, check_mode=False)
    assert not old.exists() and ensure(specs, check_mode=False) == []
    (tmp_path / "dir-wanted").write_text("")
    with pytest.raises(LabFilesError, match="dir-wanted: is a regular file, not a directory"):
        ensure(parse([{"path": str(tmp_path / "dir-wanted"), "state": "directory"}]), check_mode=True)


def test_lab_files_validation_refusal_keeps_the_old_file(tmp_path):
    path = tmp_path / "slurm.conf"
    path.write_text("good\n")
    seen = []

    def refuse(command, temp):
        seen.append((command, Path(temp).read_text()))
        raise LabFilesError("validate refused")

    specs = parse([{"path": str(path), "content": "bad\n", "validate": "check %s"}])
    with pytest.raises(LabFilesError, match="validate refused"):
        ensure(specs, check_mode=False, validate=refuse)
    assert seen == [("check %s", "bad\n")]
    assert path.read_text() == "good\n"
    assert [entry.name for entry in tmp_path.iterdir()] == ["slurm.conf"], "a temporary file was left"


@pytest.mark.parametrize("entry, field", [
    ({"path": "relative"}, "files[0].path"),
    ({"path": "/x", "mode": "rw-r--r--"}, "files[0].mode"),
    ({"path": "/x", "mode": "0999"}, "files[0].mode"),
    ({"path": "/x", "state": "link"}, "files[0].state"),
    ({"path": "/x", "state": "file"}, "files[0].content"),
    ({"path": "/x", "content": "a", "validate": "check"}, "files[0].validate"),
    ({"path": "/x", "owner": "no-such-user-gpufleet"}, "files[0].owner"),
    ({"path": "/x", "colour": "red"}, "files[0].colour"),
    ({"path": "/x", "diff": "no"}, "files[0].diff"),
    ({"path": "/x", "owned_by_runner": 1}, "files[0].owned_by_runner"),
])
def test_lab_files_bad_entry_names_the_field(entry, field):
    with pytest.raises(FieldError) as raised:
        parse([entry])
    assert raised.value.field == field


def test_lab_files_same_path_twice_is_refused():
    with pytest.raises(FieldError, match=r"files\[1\].path: /x is also files\[0\]"):
        parse([{"path": "/x"}, {"path": "/x/"}])


def test_lab_files_an_owned_path_that_is_a_symlink_is_refused_before_anything_is_written(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "lab").symlink_to(elsewhere)
    specs = parse([{"path": str(tmp_path / "first"), "mode": "0755"},
                   {"path": str(tmp_path / "lab"), "mode": "0755", "owned_by_runner": True}])
    with pytest.raises(LabFilesError, match="lab is a symlink"):
        ensure(specs, check_mode=False)
    assert not (tmp_path / "first").exists()


def test_lab_files_an_owned_path_of_our_own_or_none_passes(tmp_path):
    specs = parse([{"path": str(tmp_path / "lab"), "mode": "0755", "owned_by_runner": True},
                   {"path": str(tmp_path / "lab" / "kube"), "mode": "0700"}])
    assert [change["path"] for change in ensure(specs, check_mode=False)] == [str(tmp_path / "lab"),
                                                                               str(tmp_path / "lab" / "kube")]
    assert ensure(specs, check_mode=False) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="making a directory another user owns needs root")
def test_lab_files_an_owned_path_of_another_user_is_refused_naming_its_owner(tmp_path):
    (tmp_path / "lab").mkdir()
    os.chown(tmp_path / "lab", 65534, 65534)
    specs = parse([{"path": str(tmp_path / "lab"), "mode": "0755", "owned_by_runner": True},
                   {"path": str(tmp_path / "lab" / "kube"), "mode": "0700"}])
    with pytest.raises(LabFilesError, match="already exists and is owned by uid 65534, not by uid 0"):
        ensure(specs, check_mode=False)
    assert not (tmp_path / "lab" / "kube").exists()


def test_lab_files_a_secret_file_changes_without_its_content_in_the_diff(tmp_path):
    specs = parse([{"path": str(tmp_path / "vars.yml"), "content": "token: s3cret\n", "diff": False},
                   {"path": str(tmp_path / "rules.yml"), "content": "rule: 1\n"}])
    changes = ensure(specs, check_mode=False)
    assert [sorted(change) for change in changes] == [["needs", "path", "state"],
                                                      ["after", "before", "needs", "path", "state"]]
    assert "s3cret" not in repr(changes)
