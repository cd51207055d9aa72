# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The NCCL environment family on real temporary files: input checks (FieldError naming the field,
nothing written), the plan, inject -> revert byte-identical for a file that existed (mode kept) and
for one that did not (absent again, directory too), the revert of a controller killed mid-inject
(from the sidecar), the TaskProlog's shell filter, and all_reduce_perf's output.
tests/integration/chaos/test_nccl_env_drill.py runs it through Slurm in the lab."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from pathlib import Path

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import api, experiments, nccl_env, nccl_vars
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.context import FaultContext
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.health import burn_output

REPO = Path(__file__).resolve().parents[5]
NODE = "gpu-a-001"

# all_reduce_perf (nccl-tests 2.13) on 8 H100s, as it prints it.
ALL_REDUCE_PERF = (
    "# nThread 1 nGpus 8 minBytes 8388608 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
    "validation: 1 graph: 0\n") + """\
#
# Using devices
#  Rank  0 Group  0 Pid  41872 on   gpu-a-001 device  0 [0x18] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  41872 on   gpu-a-001 device  1 [0x2a] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     8388608       2097152     float     sum      -1    115.2   72.83  127.45      0    114.5   73.25  128.19      0
    16777216       4194304     float     sum      -1    180.4   93.00  162.75      0    179.9   93.26  163.21      0
    33554432       8388608     float     sum      -1    295.1  113.71  198.99      0    294.0  114.13  199.73      0
    67108864      16777216     float     sum      -1    538.6  124.60  218.05      0    537.9  124.76  218.33      0
   134217728      33554432     float     sum      -1   1004.3  133.64  233.87      0   1003.1  133.80  234.16      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 189.473
#
"""


def spec(tmp_path: Path, backend: str = "default", lab: bool = True, **params) -> dict:
    merged = {"vars": {"NCCL_ALGO": "Ring", "NCCL_IB_DISABLE": 1}, "measure": False}
    merged.update(params)
    return {"experiment": "nccl_env", "node": NODE, "backend": backend, "params": merged,
            "fault_id": "f-20261130-000000-ab12-%s" % NODE, "lab_dir": str(tmp_path) if lab else None}


def ctx(tmp_path: Path) -> dict:
    return FaultContext.of(lab_dir=str(tmp_path), check_mode=False)


def digest(path: Path):
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def listing(path: Path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


# ---- registration and input checks ---------------------------------------------------------------
def test_the_experiment_is_registered_without_a_metric() -> None:
    experiment = experiments.get("nccl_env")
    assert api.family_module(experiment.family) is nccl_env
    expect = experiments.loop_expectations(experiment, experiment.params)
    # No metric shows a job's NCCL settings: detection is not observable and the report names what to add.
    assert expect["detection"] is None and "NCCL_" in expect["missing_alert_hint"]
    assert not expect["fences"] and not expect["requeues"]


@pytest.mark.parametrize("given, field", [
    ({"NCCL_ALGO": "Ring\nNCCL_X=1"}, "params.vars.NCCL_ALGO"),
    ({"NCCL_ALGO": "Ring; rm -rf /"}, "params.vars.NCCL_ALGO"),
    ({"NCCL_ALGO": "$(id)"}, "params.vars.NCCL_ALGO"),
    ({"NCCL_ALGO": "`id`"}, "params.vars.NCCL_ALGO"),
    ({"NCCL_ALGO": "'Ring'"}, "params.vars.NCCL_ALGO"),
    ({"NCCL_ALGO": ""}, "params.vars.NCCL_ALGO"),
    ({"NCCL_IB_DISABLE": True}, "params.vars.NCCL_IB_DISABLE"),
    ({"NCCL_ALGO": ["Ring"]}, "params.vars.NCCL_ALGO"),
    ({"LD_PRELOAD": "/tmp/x.so"}, "params.vars.LD_PRELOAD"),
    ({"nccl_algo": "Ring"}, "params.vars.nccl_algo"),
    ({"NCCL_": "1"}, "params.vars.NCCL_"),
    ({"NCCL-ALGO": "Ring"}, "params.vars.NCCL-ALGO"),
    ({}, "params.vars"),
    ("NCCL_ALGO=Ring", "params.vars"),
])
def test_bad_variables_are_refused_naming_the_field_and_nothing_is_written(tmp_path, given, field) -> None:
    for call in (nccl_env.plan, lambda s: nccl_env.inject(s, ctx(tmp_path))):
        with pytest.raises(FieldError) as raised:
            call(spec(tmp_path, vars=given))
        assert raised.value.field == field
    assert listing(tmp_path) == []


def test_nccl_syntax_values_pass() -> None:
    assert nccl_vars.check_vars({"NCCL_SOCKET_IFNAME": "^lo,docker0", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1",
                                 "NCCL_PROTO": "^LL128", "NCCL_IB_TIMEOUT": 22, "NCCL_TOPO_FILE": "/etc/topo.xml"}) == {
        "NCCL_SOCKET_IFNAME": "^lo,docker0", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_PROTO": "^LL128",
        "NCCL_IB_TIMEOUT": "22", "NCCL_TOPO_FILE": "/etc/topo.xml"}


def test_bad_backend_knob_and_path_are_refused(tmp_path) -> None:
    for bad, field in ((spec(tmp_path, backend="nccl_conf+slurm_taskprolog"), "backend"),
                       (spec(tmp_path, backend="ld_preload"), "backend"),
                       (spec(tmp_path, bogus=1), "params.bogus"),
                       (spec(tmp_path, path="relative/nccl.conf"), "params.path"),
                       (dict(spec(tmp_path), node="../etc"), "target")):
        with pytest.raises(FieldError) as raised:
            nccl_env.inject(bad, ctx(tmp_path))
        assert raised.value.field == field
    assert listing(tmp_path) == []


# ---- the plan --------------------------------------------------------------------------------------
def test_plan_names_the_file_the_restore_and_the_missing_bandwidth_tool(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    lab_plan = nccl_env.plan(spec(tmp_path, measure=True))
    text = "\n".join(lab_plan["actions"])
    assert lab_plan["backends"] == ["slurm_taskprolog"] and lab_plan["missing"] == []
    assert str(tmp_path / "nccl" / NODE / "nccl.env") in text and "NCCL_ALGO=Ring, NCCL_IB_DISABLE=1" in text
    assert "absent: the rollback deletes it" in text and "TaskProlog" in text
    assert "sbatch -w %s --wrap 'env | grep ^NCCL_'" % NODE in text
    assert "bandwidth not measured: all_reduce_perf not found" in text
    assert lab_plan["simulated"] and "no NCCL" in lab_plan["simulated"][0]
    site_plan = nccl_env.plan(spec(tmp_path, lab=False))
    assert site_plan["backends"] == ["nccl_conf"] and "/etc/nccl.conf" in site_plan["actions"][0]
    assert site_plan["simulated"] == []
    # Kubernetes pod env: planned, listed as missing, so the gate refuses the drill before any change.
    pod_plan = nccl_env.plan(spec(tmp_path, backend="pod_env"))
    assert pod_plan["missing"] and "pod_env" in pod_plan["missing"][0]
    with pytest.raises(FieldError):
        nccl_env.inject(spec(tmp_path, backend="pod_env"), ctx(tmp_path))


def test_plan_measures_where_all_reduce_perf_exists(tmp_path) -> None:
    tool = tmp_path / "all_reduce_perf"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    text = "\n".join(nccl_env.plan(spec(tmp_path, measure=True, nccl_tests=str(tool)))["actions"])
    assert "bus bandwidth before and during: %s -b 8M -e 128M" % tool in text


# ---- inject and revert, byte for byte --------------------------------------------------------------
@pytest.mark.parametrize("backend, name, export", [("slurm_taskprolog", "nccl.env", True),
                                                   ("nccl_conf", "nccl.conf", False)])
def test_absent_before_is_absent_after(tmp_path, backend, name, export) -> None:
    (tmp_path / "nccl").mkdir()
    before = listing(tmp_path)
    the_spec = spec(tmp_path, backend=backend)
    undo = nccl_env.inject(the_spec, ctx(tmp_path))
    path = tmp_path / "nccl" / NODE / name
    prefix = "export " if export else ""
    assert path.read_text() == "%sNCCL_ALGO=Ring\n%sNCCL_IB_DISABLE=1\n" % (prefix, prefix)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert undo["previous"]["existed"] is False and undo["previous"]["made_dir"] is True
    done = nccl_env.revert(dict(the_spec, **undo), ctx(tmp_path))
    assert "removed %s (absent before the drill)" % path in done["reverted"]
    assert listing(tmp_path) == before  # the file, its sidecar and the directory it made are gone
    # Twice is harmless.
    assert nccl_env.revert(dict(the_spec, **undo), ctx(tmp_path)) == {"reverted": [], "already": True}


@pytest.mark.parametrize("backend, name", [("slurm_taskprolog", "nccl.env"), ("nccl_conf", "nccl.conf")])
def test_existing_file_comes_back_byte_identical_with_its_mode(tmp_path, backend, name) -> None:
    path = tmp_path / "nccl" / NODE / name
    path.parent.mkdir(parents=True)
    # Comments, CRLF, a duplicate, no final newline, bytes that are not UTF-8: all must survive.
    original = b"# site NCCL settings\r\nNCCL_DEBUG=WARN\nNCCL_ALGO=Tree\nNCCL_ALGO=Tree\n\n\xff\xfe odd\nNCCL_X=1"
    path.write_bytes(original)
    path.chmod(0o640)
    before_sha, before_list = digest(path), listing(tmp_path)
    the_spec = spec(tmp_path, backend=backend, vars={"NCCL_ALGO": "Ring", "NCCL_PROTO": "^LL128"})
    undo = nccl_env.inject(the_spec, ctx(tmp_path))
    written = path.read_bytes()
    settings = nccl_vars.parse_settings(written)
    assert settings["NCCL_ALGO"] == "Ring" and settings["NCCL_PROTO"] == "^LL128" and settings["NCCL_DEBUG"] == "WARN"
    assert b"# site NCCL settings\r\n" in written and b"\xff\xfe odd\n" in written
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    done = nccl_env.revert(dict(the_spec, **undo), ctx(tmp_path))
    assert digest(path) == before_sha and path.read_bytes() == original
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert listing(tmp_path) == before_list
    assert any(line.startswith("restored %s: %d bytes" % (path, len(original))) for line in done["reverted"])


def test_a_controller_killed_before_the_undo_was_recorded_is_reverted_from_the_sidecar(tmp_path) -> None:
    path = tmp_path / "nccl" / NODE / "nccl.env"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"export NCCL_DEBUG=INFO\n")
    before = digest(path)
    the_spec = spec(tmp_path)
    nccl_env.inject(the_spec, ctx(tmp_path))  # the undo never reached the ledger: only the spec did
    assert digest(path) != before
    done = nccl_env.revert(dict(the_spec), ctx(tmp_path))
    assert digest(path) == before and listing(tmp_path / "nccl") == [NODE, "%s/nccl.env" % NODE]
    assert done["reverted"]
    # Killed before even the sidecar was written: nothing was changed, nothing to do.
    assert nccl_env.revert(dict(the_spec), ctx(tmp_path)) == {"reverted": [], "already": True}


def test_a_file_created_by_the_drill_and_changed_by_someone_else_is_kept(tmp_path) -> None:
    the_spec = spec(tmp_path)
    undo = nccl_env.inject(the_spec, ctx(tmp_path))
    path = Path(undo["path"])
    path.write_text("export NCCL_ALGO=Tree\n")
    done = nccl_env.revert(dict(the_spec, **undo), ctx(tmp_path))
    # Issue 16, finding 4: the revert no longer deletes what someone wrote during the drill.
    assert path.read_text() == "export NCCL_ALGO=Tree\n"
    assert done["reverted"][0].startswith("CONFLICT: %s changed during the drill" % path)


@pytest.mark.parametrize("killed_before_the_undo", [False, True])
def test_a_file_changed_by_someone_else_is_kept_and_the_pre_drill_bytes_saved_beside_it(
        tmp_path, killed_before_the_undo) -> None:
    path = tmp_path / "nccl" / NODE / "nccl.env"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"export NCCL_DEBUG=INFO\n")
    path.chmod(0o640)
    the_spec = spec(tmp_path)
    undo = nccl_env.inject(the_spec, ctx(tmp_path))
    theirs = path.read_bytes() + b"export NCCL_SOCKET_IFNAME=ib0\n"
    path.write_bytes(theirs)
    done = nccl_env.revert(dict(the_spec) if killed_before_the_undo else dict(the_spec, **undo), ctx(tmp_path))
    assert path.read_bytes() == theirs
    kept = path.parent / ("nccl.env.gpufleet-pre-drill-%s" % the_spec["fault_id"])
    assert kept.read_bytes() == b"export NCCL_DEBUG=INFO\n" and stat.S_IMODE(kept.stat().st_mode) == 0o640
    assert "CONFLICT" in done["reverted"][0] and str(kept) in done["reverted"][0]
    # The sidecar is gone: a second rollback finds nothing of its own to undo and changes nothing.
    nccl_env.revert(dict(the_spec, **undo), ctx(tmp_path))
    assert path.read_bytes() == theirs


def test_bandwidth_is_measured_before_and_during_with_the_variables(tmp_path) -> None:
    """A stand-in all_reduce_perf (our own script) that prints the sample above, slower when NCCL_ALGO is set."""
    tool = tmp_path / "bin" / "all_reduce_perf"
    tool.parent.mkdir()
    sample = tmp_path / "sample.txt"
    sample.write_text(ALL_REDUCE_PERF)
    tool.write_text('#!/bin/sh\nif [ -n "$NCCL_ALGO" ]; then sed "s/189.473/94.7365/" %s; else cat %s; fi\n'
                    % (sample, sample))
    tool.chmod(0o755)
    the_spec = spec(tmp_path, measure=True, nccl_tests=str(tool))
    undo = nccl_env.inject(the_spec, ctx(tmp_path))
    assert undo["bandwidth"]["before"]["avg_busbw_gbps"] == pytest.approx(189.473)
    assert undo["bandwidth"]["during"]["avg_busbw_gbps"] == pytest.approx(94.7365)
    done = nccl_env.revert(dict(the_spec, **undo), ctx(tmp_path))
    assert "bus bandwidth (all_reduce_perf): before 189.47 GB/s, during 94.74 GB/s (-50.0%)" in done["reverted"]


# ---- the pure parts --------------------------------------------------------------------------------
def test_merge_replaces_in_place_and_appends() -> None:
    previous = b"# c\nexport NCCL_ALGO=Tree\nexport OTHER=1\nexport NCCL_ALGO=Tree"
    assert nccl_vars.merge(previous, {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}, export=True) == (
        b"# c\nexport NCCL_ALGO=Ring\nexport OTHER=1\nexport NCCL_PROTO=Simple\n")
    assert nccl_vars.merge(None, {"NCCL_P2P_DISABLE": "1"}, export=False) == b"NCCL_P2P_DISABLE=1\n"


def test_all_reduce_perf_output_is_parsed() -> None:
    parsed = burn_output.parse_all_reduce_perf(ALL_REDUCE_PERF)
    assert parsed["avg_busbw_gbps"] == pytest.approx(189.473)
    assert parsed["out_of_bounds"] == 0 and parsed["ok"] is True
    assert len(parsed["rows"]) == 5
    assert parsed["rows"][0]["size_bytes"] == 8388608 and parsed["rows"][0]["busbw_gbps"] == pytest.approx(127.45)
    assert parsed["rows"][-1]["in_place_busbw_gbps"] == pytest.approx(234.16)
    failed = burn_output.parse_all_reduce_perf("NCCL error: unhandled system error\n")
    assert failed == {"avg_busbw_gbps": None, "out_of_bounds": None, "ok": None, "rows": []}
    wrong = burn_output.parse_all_reduce_perf(ALL_REDUCE_PERF.replace("values : 0 OK", "values : 3 FAILED"))
    assert wrong["ok"] is False and wrong["out_of_bounds"] == 3


def test_env_output_keeps_only_nccl_variables() -> None:
    assert nccl_vars.parse_env_output("PATH=/bin\nNCCL_ALGO=Ring\nNCCL_CONF_FILE=/x/nccl.conf\nX=NCCL_A=1\n") == {
        "NCCL_ALGO": "Ring", "NCCL_CONF_FILE": "/x/nccl.conf"}


def test_the_task_prolog_passes_only_safe_nccl_exports(tmp_path) -> None:
    """The role's TaskProlog (rendered by hand: one variable) run by /bin/sh with no PATH, as slurmstepd runs it."""
    template = (REPO / "roles" / "slurm" / "templates" / "task-prolog.j2").read_text()
    script = tmp_path / "prolog"
    script.write_text(template.replace("{{ slurm__nccl_dir }}", str(tmp_path / "nccl")))
    node = tmp_path / "nccl" / NODE
    node.mkdir(parents=True)

    def run() -> str:
        return subprocess.run(["/bin/sh", str(script)], env={"SLURMD_NODENAME": NODE}, capture_output=True,
                              text=True, check=True).stdout

    assert run() == ""
    (node / "nccl.env").write_text("# comment\nexport NCCL_ALGO=Ring\nexport LD_PRELOAD=/x.so\n"
                                   "export NCCL_PROTO=$(id)\nexport NCCL_DEBUG=INFO;id\nNCCL_X=1\n"
                                   "export NCCL_SOCKET_IFNAME=^lo,docker0")
    (node / "nccl.conf").write_text("NCCL_DEBUG=WARN\n")
    assert run() == ("export NCCL_CONF_FILE=%s\nexport NCCL_ALGO=Ring\nexport NCCL_SOCKET_IFNAME=^lo,docker0\n"
                     % (node / "nccl.conf"))
    os.unlink(node / "nccl.conf")
    assert run().startswith("export NCCL_ALGO=Ring\n")
