"""train_sim: resume, corrupt checkpoints, SIGTERM. Runs the real script as a subprocess."""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import io
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


def test_repeated_sigterms_until_it_exits_still_end_in_the_requeue_code(tmp_path: Path) -> None:
    """A batch script's trap forwards TERM to a program that Slurm's --full signalled already: a
    repeat that lands while Python shuts down (default action back) once ended the job with 143."""
    argv = [sys.executable, str(SCRIPT), "--checkpoint-dir", str(tmp_path), "--hash-rounds", str(ROUNDS),
            "--steps", "100000", "--checkpoint-every", "1000", "--step-seconds", "0.01"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if events(line, "step") and events(line, "step")[0]["step"] == "3":
            break
    while proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        time.sleep(0.0005)
    out, _stderr = proc.communicate(timeout=10)
    assert proc.returncode == 75, out[-2000:]
    assert events(out, "interrupted")[0]["signal"] == "SIGTERM"


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


# ---- failed saves, slow saves, torn writes, padding --------------------------------------------


class _Stream(io.StringIO):
    """The job's log; with ``stop``, SIGTERM's flag goes up once step ``at_step`` is logged, as if Slurm sent it."""

    def __init__(self, stop=None, at_step: int = 0) -> None:
        super().__init__()
        self.stop = stop
        self.at_step = at_step

    def write(self, text: str) -> int:
        if self.stop is not None and text.startswith("step ") and (" step=%d " % self.at_step) in text:
            self.stop.signal_name = "SIGTERM"
        return super().write(text)


def _config(tmp_path: Path, steps: int, every: int, keep: int = 3, **extra) -> object:
    return train_sim.RunConfig(
        checkpoint_dir=tmp_path,
        steps=steps,
        checkpoint_every=every,
        step_seconds=0,
        hash_rounds=ROUNDS,
        keep=keep,
        **extra,
    )


def _fail_saves(monkeypatch, where: str, failing_steps: set, code: int = errno.ENOSPC) -> None:
    """Make the saves of ``failing_steps`` raise OSError(code) at ``where`` (open, fsync or replace)."""
    real_open, real_fsync, real_replace = open, os.fsync, os.replace
    failing = {train_sim.checkpoint_name(step) for step in failing_steps}

    def doomed(name: str) -> bool:
        return any(final in str(name) for final in failing)

    def fake_open(file, *args, **kwargs):
        if where == "open" and doomed(file):
            raise OSError(code, os.strerror(code), str(file))
        return real_open(file, *args, **kwargs)

    def fake_fsync(fd: int) -> None:
        if where == "fsync" and doomed(os.readlink("/proc/self/fd/%d" % fd)):
            raise OSError(code, os.strerror(code))
        real_fsync(fd)

    def fake_replace(src, dst) -> None:
        if where == "replace" and doomed(dst):
            raise OSError(code, os.strerror(code))
        real_replace(src, dst)

    monkeypatch.setattr(train_sim, "open", fake_open, raising=False)
    monkeypatch.setattr(train_sim.os, "fsync", fake_fsync)
    monkeypatch.setattr(train_sim.os, "replace", fake_replace)


@pytest.mark.parametrize(("where", "code"), [("open", errno.EROFS), ("fsync", errno.ENOSPC), ("replace", errno.EIO)])
def test_a_failed_save_keeps_the_job_and_the_last_good_checkpoint(tmp_path, monkeypatch, where, code) -> None:
    _fail_saves(monkeypatch, where, {20, 30}, code)
    log = _Stream()
    rc = train_sim.train(_config(tmp_path, steps=45, every=10, keep=1), train_sim.StopRequest(), train_sim.Logger(log))
    out = log.getvalue()
    assert rc == train_sim.EXIT_DONE, out
    failed = events(out, "checkpoint_failed")
    name = errno.errorcode[code]
    assert [(f["step"], f["reason"], f["kept"]) for f in failed] == [
        ("20", name, "ckpt-000000010.json"),
        ("30", name, "ckpt-000000010.json"),
    ]
    # Training went on through both failures, and the next checkpoint step tried again.
    assert [int(e["step"]) for e in events(out, "step")] == list(range(1, 46))
    assert [e["step"] for e in events(out, "checkpoint")] == ["10", "40"]
    assert [e["step"] for e in events(out, "checkpoint_begin")] == ["10", "20", "30", "40", "45"]
    assert events(out, "done")[0]["state"] == train_sim.expected_state(45, ROUNDS).state
    # No temporary file is left behind; keep=1 pruned only after the saves that worked.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-000000045.json"]


def test_failed_saves_never_prune_the_last_good_checkpoint(tmp_path, monkeypatch) -> None:
    # Every save after step 10 fails: with keep=1, step 10 must still be there at the end.
    _fail_saves(monkeypatch, "fsync", set(range(11, 100)))
    log = _Stream()
    rc = train_sim.train(_config(tmp_path, steps=40, every=10, keep=1), train_sim.StopRequest(), train_sim.Logger(log))
    out = log.getvalue()
    # The final save failed too: the job did its work but could not keep it.
    assert rc == train_sim.EXIT_ERROR
    assert events(out, "error")[0]["reason"] == "final_checkpoint_failed"
    assert not events(out, "done")
    assert {f["kept"] for f in events(out, "checkpoint_failed")} == {"ckpt-000000010.json"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-000000010.json"]
    restored = train_sim.decode_checkpoint((tmp_path / "ckpt-000000010.json").read_bytes(), ROUNDS)
    assert restored == train_sim.expected_state(10, ROUNDS)


def test_a_failed_first_save_keeps_nothing(tmp_path, monkeypatch) -> None:
    _fail_saves(monkeypatch, "open", {5}, errno.ENOSPC)
    log = _Stream()
    train_sim.train(_config(tmp_path, steps=6, every=5), train_sim.StopRequest(), train_sim.Logger(log))
    assert events(log.getvalue(), "checkpoint_failed")[0]["kept"] == "-"


def test_sigterm_with_a_failing_save_still_exits_for_requeue_and_resumes_from_the_good_one(
    tmp_path, monkeypatch
) -> None:
    _fail_saves(monkeypatch, "fsync", {7}, errno.ENOSPC)
    stop = train_sim.StopRequest()
    # SIGTERM arrives after step 7 (not a checkpoint step: the SIGTERM save is the one that fails).
    log = _Stream(stop, at_step=7)
    rc = train_sim.train(_config(tmp_path, steps=1000, every=5), stop, train_sim.Logger(log))
    out = log.getvalue()
    assert rc == train_sim.EXIT_REQUEUE == 75
    failed = events(out, "checkpoint_failed")[0]
    assert (failed["step"], failed["reason"], failed["kept"]) == ("7", "ENOSPC", "ckpt-000000005.json")
    stopped = events(out, "interrupted")[0]
    assert (stopped["step"], stopped["checkpoint"], stopped["exit"]) == ("7", "ckpt-000000005.json", "75")
    monkeypatch.undo()
    # The requeued run resumes from step 5 and redoes 6 and 7: two steps lost, none corrupted.
    again = run(tmp_path, "--steps", "9", "--checkpoint-every", "5")
    assert events(again.stdout, "resume")[0]["step"] == "5"
    assert events(again.stdout, "done")[0]["state"] == train_sim.expected_state(9, ROUNDS).state


def test_a_kill_during_a_slow_save_leaves_a_partial_file_that_the_resume_skips(tmp_path: Path) -> None:
    argv = [
        sys.executable,
        str(SCRIPT),
        "--checkpoint-dir",
        str(tmp_path),
        "--hash-rounds",
        str(ROUNDS),
        "--steps",
        "1000",
        "--checkpoint-every",
        "5",
        "--step-seconds",
        "0",
        "--checkpoint-write-seconds",
        "1",
        "--checkpoint-pad-bytes",
        "4096",
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            begin = events(line, "checkpoint_begin")
            if begin and begin[0]["step"] == "10":
                assert begin[0]["file"] == "ckpt-000000010.json"
                break
        partial = tmp_path / (".ckpt-000000010.json.%d.tmp" % proc.pid)
        deadline = time.monotonic() + 5
        # The first half is fsynced before the pause; kill inside the pause.
        while not (partial.exists() and partial.stat().st_size > 2048) and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.kill()
    finally:
        proc.communicate(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    assert sorted(p.name for p in tmp_path.iterdir()) == [partial.name, "ckpt-000000005.json"]
    again = run(tmp_path, "--steps", "12", "--checkpoint-every", "5")
    assert again.returncode == 0, again.stderr
    assert [e["file"] for e in events(again.stdout, "skip_partial")] == [partial.name]
    assert events(again.stdout, "resume")[0]["source"] == "ckpt-000000005.json"
    assert events(again.stdout, "done")[0]["state"] == train_sim.expected_state(12, ROUNDS).state
    # The partial file is named, never trusted, and left for whoever investigates.
    assert partial.exists()


def test_a_slow_save_writes_half_then_pauses(tmp_path: Path) -> None:
    paused = []

    def sleep(seconds: float) -> None:
        partial = next(tmp_path.glob(train_sim.PARTIAL_GLOB))
        paused.append((seconds, partial.stat().st_size))

    current = train_sim.expected_state(3, ROUNDS)
    path = train_sim.write_checkpoint(tmp_path, current, ROUNDS, pad_bytes=1000, write_seconds=2.5, sleep=sleep)
    size = path.stat().st_size
    assert paused == [(2.5, size // 2)]
    assert train_sim.decode_checkpoint(path.read_bytes(), ROUNDS) == current


def test_padding_makes_checkpoints_large_and_stays_checked(tmp_path: Path) -> None:
    assert run(tmp_path, "--steps", "5", "--checkpoint-every", "5", "--checkpoint-pad-bytes", "100000").returncode == 0
    path = tmp_path / "ckpt-000000005.json"
    raw = path.read_bytes()
    assert len(raw) > 100000
    assert train_sim.decode_checkpoint(raw, ROUNDS) == train_sim.expected_state(5, ROUNDS)
    with pytest.raises(train_sim.CorruptCheckpoint):
        train_sim.decode_checkpoint(raw[: len(raw) - 10], ROUNDS)
    # A document whose checksum matches but whose padding is not padding is not trusted either.
    document = json.loads(raw)
    for bad in ("00x0", 7):
        document["payload"]["pad"] = bad
        document["sha256"] = train_sim._payload_checksum(document["payload"])
        with pytest.raises(train_sim.CorruptCheckpoint, match="bad padding"):
            train_sim.decode_checkpoint(json.dumps(document).encode(), ROUNDS)
    document["payload"]["pad"] = "00"
    document["payload"]["extra"] = 1
    document["sha256"] = train_sim._payload_checksum(document["payload"])
    with pytest.raises(train_sim.CorruptCheckpoint, match="unknown fields extra"):
        train_sim.decode_checkpoint(json.dumps(document).encode(), ROUNDS)


@pytest.mark.parametrize("argv", [["--checkpoint-pad-bytes", "-1"], ["--checkpoint-write-seconds", "-0.5"]])
def test_bad_drill_knobs_are_usage_errors(tmp_path: Path, argv: list[str]) -> None:
    result = run(tmp_path, *argv)
    assert result.returncode == 2
    assert "usage:" in result.stderr


def test_progress_reaches_the_agents_reader_and_is_removed_at_exit(tmp_path: Path) -> None:
    """train_sim's heartbeat file is the format health/job_progress reads: the two stay in step."""
    from ansible_collections.gpufleet.resilience.plugins.module_utils.health.job_progress import read_progress

    progress_dir = tmp_path / "progress"
    progress_dir.mkdir()
    argv = [sys.executable, str(SCRIPT), "--checkpoint-dir", str(tmp_path / "ckpt"), "--hash-rounds", str(ROUNDS),
            "--step-seconds", "0.01", "--steps", "100000", "--stall-after-seconds", "45"]
    env = dict(os.environ, GPUFLEET_PROGRESS_FILE=str(progress_dir / "4242.0"))
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env) as job:
        deadline = time.monotonic() + 20
        ranks: list = []
        while time.monotonic() < deadline and not (ranks and ranks[0].step):
            time.sleep(0.1)
            ranks, _ignored = read_progress(str(progress_dir))
        job.send_signal(signal.SIGTERM)
        job.communicate(timeout=20)
    assert [(r.job_id, r.rank, r.stall_after_s, r.error) for r in ranks] == [("4242", 0, 45.0, None)]
    assert ranks[0].step > 0
    assert job.returncode == train_sim.EXIT_REQUEUE
    assert list(progress_dir.iterdir()) == []  # removed at exit, no temporary file left


def test_a_progress_file_that_cannot_be_written_never_ends_the_job(tmp_path: Path) -> None:
    result = run(tmp_path, "--steps", "20", "--progress-file", str(tmp_path / "missing" / "7.0"))
    assert result.returncode == train_sim.EXIT_DONE, result.stderr
    (failed,) = events(result.stdout, "progress_failed")
    assert failed["reason"] == "ENOENT"
