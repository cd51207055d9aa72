"""train_sim: resume, corrupt checkpoints, SIGTERM. Runs the real script as a subprocess."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "roles" / "slurm" / "files" / "train_sim.py"
ROUNDS = 50


def _load_module():
    spec = importlib.util.spec_from_file_location("train_sim", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["train_sim"] = module
    spec.loader.exec_module(module)
    return module


train_sim = _load_module()


def run(ckpt: Path, *extra: str, timeout: float = 30) -> subprocess.CompletedProcess:
    argv = [
        sys.executable,
        str(SCRIPT),
        "--checkpoint-dir",
        str(ckpt),
        "--hash-rounds",
        str(ROUNDS),
        "--step-seconds",
        "0",
        *extra,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def events(stdout: str, name: str) -> list[dict[str, str]]:
    found = []
    for line in stdout.splitlines():
        head, *fields = line.split()
        if head == name:
            found.append(dict(field.split("=", 1) for field in fields))
    return found


def test_fresh_run_reaches_the_uninterrupted_state(tmp_path: Path) -> None:
    result = run(tmp_path, "--steps", "30", "--checkpoint-every", "10")
    assert result.returncode == train_sim.EXIT_DONE, result.stderr
    assert events(result.stdout, "start")[0]["step"] == "0"
    assert [e["step"] for e in events(result.stdout, "checkpoint")] == ["10", "20", "30"]
    assert events(result.stdout, "done")[0]["state"] == train_sim.expected_state(30, ROUNDS).state
    assert [p.name for p in train_sim.checkpoint_files(tmp_path)] == [
        "ckpt-000000030.json",
        "ckpt-000000020.json",
        "ckpt-000000010.json",
    ]


def test_resume_continues_from_newest_checkpoint_without_repeating_steps(tmp_path: Path) -> None:
    first = run(tmp_path, "--steps", "20", "--checkpoint-every", "10")
    assert first.returncode == 0
    second = run(tmp_path, "--steps", "45", "--checkpoint-every", "10")
    assert second.returncode == 0, second.stderr
    resume = events(second.stdout, "resume")[0]
    assert (resume["step"], resume["source"]) == ("20", "ckpt-000000020.json")
    steps = [int(e["step"]) for e in events(second.stdout, "step")]
    assert steps == list(range(21, 46))
    # The final step (45) is not a checkpoint multiple but is still saved.
    assert train_sim.checkpoint_files(tmp_path)[0].name == "ckpt-000000045.json"
    assert events(second.stdout, "done")[0]["state"] == train_sim.expected_state(45, ROUNDS).state


@pytest.mark.parametrize("damage", ["truncate", "flip_state", "garbage", "empty"])
def test_corrupt_newest_checkpoint_is_skipped(tmp_path: Path, damage: str) -> None:
    assert run(tmp_path, "--steps", "30", "--checkpoint-every", "10").returncode == 0
    newest = tmp_path / "ckpt-000000030.json"
    raw = newest.read_bytes()
    if damage == "truncate":
        newest.write_bytes(raw[: len(raw) // 2])
    elif damage == "flip_state":
        document = json.loads(raw)
        state = document["payload"]["state"]
        document["payload"]["state"] = ("0" if state[0] != "0" else "1") + state[1:]
        newest.write_text(json.dumps(document))
    elif damage == "garbage":
        newest.write_bytes(os.urandom(64))
    else:
        newest.write_bytes(b"")
    result = run(tmp_path, "--steps", "35", "--checkpoint-every", "10")
    assert result.returncode == 0, result.stderr
    skipped = events(result.stdout, "skip_checkpoint")
    assert [s["file"] for s in skipped] == ["ckpt-000000030.json"]
    assert events(result.stdout, "resume")[0]["step"] == "20"
    assert events(result.stdout, "done")[0]["state"] == train_sim.expected_state(35, ROUNDS).state


def test_checkpoint_with_other_work_per_step_is_not_trusted(tmp_path: Path) -> None:
    current = train_sim.expected_state(5, ROUNDS + 1)
    train_sim.write_checkpoint(tmp_path, current, ROUNDS + 1)
    result = run(tmp_path, "--steps", "6")
    assert events(result.stdout, "skip_checkpoint")[0]["file"] == "ckpt-000000005.json"
    assert events(result.stdout, "start")


def test_sigterm_saves_a_checkpoint_and_exits_for_requeue(tmp_path: Path) -> None:
    argv = [
        sys.executable,
        str(SCRIPT),
        "--checkpoint-dir",
        str(tmp_path),
        "--hash-rounds",
        str(ROUNDS),
        "--steps",
        "100000",
        "--checkpoint-every",
        "1000",
        "--step-seconds",
        "0.01",
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    seen = []
    # Wait for real progress that is not on a checkpoint boundary.
    for line in proc.stdout:
        seen.append(line)
        if events(line, "step") and events(line, "step")[0]["step"] == "7":
            break
    proc.send_signal(signal.SIGTERM)
    rest, _stderr = proc.communicate(timeout=10)
    out = "".join(seen) + rest
    assert proc.returncode == train_sim.EXIT_REQUEUE == 75
    stopped = events(out, "interrupted")[0]
    assert stopped["signal"] == "SIGTERM"
    last_step = int(events(out, "step")[-1]["step"])
    assert int(stopped["step"]) == last_step >= 7
    saved = train_sim.checkpoint_files(tmp_path)
    assert saved[0].name == train_sim.checkpoint_name(last_step)
    restored = train_sim.decode_checkpoint(saved[0].read_bytes(), ROUNDS)
    assert restored == train_sim.expected_state(last_step, ROUNDS)
    # And the next run picks up exactly there: zero lost steps.
    again = run(tmp_path, "--steps", str(last_step + 3))
    assert events(again.stdout, "resume")[0]["step"] == str(last_step)
    assert [int(e["step"]) for e in events(again.stdout, "step")] == [last_step + 1, last_step + 2, last_step + 3]


def test_sigterm_during_a_long_sleep_is_handled_promptly(tmp_path: Path) -> None:
    argv = [
        sys.executable,
        str(SCRIPT),
        "--checkpoint-dir",
        str(tmp_path),
        "--hash-rounds",
        str(ROUNDS),
        "--steps",
        "10",
        "--step-seconds",
        "30",
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith("start ")
    assert events(proc.stdout.readline(), "step")[0]["step"] == "1"
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=10)
    assert proc.returncode == 75
    assert time.monotonic() - began < 5
    assert train_sim.checkpoint_files(tmp_path)[0].name == "ckpt-000000001.json"


def test_atomic_write_leaves_no_temporary_files(tmp_path: Path) -> None:
    assert run(tmp_path, "--steps", "12", "--checkpoint-every", "3", "--keep", "2").returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-000000009.json", "ckpt-000000012.json"]


@pytest.mark.parametrize("argv", [["--steps", "0"], ["--checkpoint-every", "-1"], ["--step-seconds", "-1"], []])
def test_bad_arguments_are_usage_errors(tmp_path: Path, argv: list[str]) -> None:
    full = [sys.executable, str(SCRIPT), *(["--checkpoint-dir", str(tmp_path)] if argv else []), *argv]
    result = subprocess.run(full, capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2
    assert "usage:" in result.stderr
