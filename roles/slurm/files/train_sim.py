# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""train_sim: a stand-in training job that the lab's drills protect.

It behaves the way a well-written training job must behave on a fleet that
heals itself:

* every step does real work: it folds the step number into a running SHA-256
  state, so the final state proves that no step was skipped or repeated;
* every ``--checkpoint-every`` steps it writes a checkpoint atomically
  (temporary file, fsync, rename, fsync of the directory) with a checksum;
* on SIGTERM (or SIGINT) it finishes the current step, saves a checkpoint and
  exits with ``EXIT_REQUEUE`` (75, EX_TEMPFAIL). The lab's slurm.conf lists 75
  in ``RequeueExit``, so Slurm puts the job back in the queue by itself;
* on start it resumes from the newest checkpoint that passes its checksum and
  skips corrupt or truncated ones, and names each leftover temporary file of an
  interrupted save (``skip_partial``) without trusting or deleting it;
* a save that fails (ENOSPC on a full volume, EROFS on a read-only one, EIO)
  does not end the job: the temporary file is removed, ``checkpoint_failed``
  names the last good checkpoint, nothing is pruned (that one must survive),
  and the next checkpoint step tries again. On SIGTERM it still exits 75, and
  the requeued run resumes from the last good checkpoint.

It reports its progress to the node's health agent: when ``GPUFLEET_PROGRESS_FILE`` is set (the
site's TaskProlog exports ``<progress dir>/<job id>.<rank>``) or ``--progress-file`` is given, it
replaces that file with ``{"step": N}`` at most once per ``--progress-every`` seconds and removes it
when it exits. A rank that stops (SIGSTOP, a stuck collective) stops touching it, and the agent calls
the job stalled after its window (``--stall-after-seconds`` puts the job's own window in the file).
A file that cannot be written never ends the job (``progress_failed`` names why, once).

Drills use two knobs: ``--checkpoint-write-seconds`` makes each save slow (half
the bytes, fsync, a pause, the rest), so a SIGKILL can land while a checkpoint
is being written; ``--checkpoint-pad-bytes`` makes checkpoints as large as a
real one, so a volume fills the way it would.

Each line it prints is ``<event> key=value ...`` so drills can parse it:
``resume step=120 source=ckpt-000000120.json``, ``step step=121 ...``,
``checkpoint_begin step=150 file=ckpt-000000150.json``, ``checkpoint step=150 ...``,
``checkpoint_failed step=200 reason=ENOSPC kept=ckpt-000000150.json``,
``interrupted step=163 signal=SIGTERM ...``, ``done step=1000 ...`` (a first run starts with
``start step=0``; a resume first names what it skipped: ``skip_checkpoint``, ``skip_partial``).

Standard library only: it runs inside sbatch with whatever Python the node has.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import hashlib
import json
import os
import select
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

EXIT_DONE = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
# EX_TEMPFAIL from sysexits.h: "try again later". slurm.conf RequeueExit=75.
EXIT_REQUEUE = 75

CHECKPOINT_PREFIX = "ckpt-"
CHECKPOINT_SUFFIX = ".json"
CHECKPOINT_FORMAT = 1
# The temporary file of a save in progress: hidden, so it never matches a checkpoint.
PARTIAL_GLOB = "." + CHECKPOINT_PREFIX + "*.tmp"
INITIAL_STATE = hashlib.sha256(b"gpufleet train_sim").hexdigest()


@dataclass(frozen=True)
class TrainingState:
    step: int
    state: str

    def advance(self, rounds: int) -> TrainingState:
        """One training step: ``rounds`` chained SHA-256 hashes seeded with the step number."""
        step = self.step + 1
        digest = bytes.fromhex(self.state) + step.to_bytes(8, "big")
        for _round in range(max(1, rounds)):
            digest = hashlib.sha256(digest).digest()
        return TrainingState(step=step, state=digest.hex())


def expected_state(steps: int, rounds: int) -> TrainingState:
    """The state an uninterrupted run reaches after ``steps`` steps."""
    current = TrainingState(step=0, state=INITIAL_STATE)
    for _step in range(steps):
        current = current.advance(rounds)
    return current


def _payload_checksum(payload: dict) -> str:
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(canonical).hexdigest()


def checkpoint_name(step: int) -> str:
    return f"{CHECKPOINT_PREFIX}{step:09d}{CHECKPOINT_SUFFIX}"


def encode_checkpoint(current: TrainingState, rounds: int, pad_bytes: int = 0) -> bytes:
    payload = {"format": CHECKPOINT_FORMAT, "step": current.step, "state": current.state, "rounds": rounds}
    if pad_bytes > 0:
        # Inside the checksummed payload: padding that was cut short is caught like any other damage.
        payload["pad"] = "0" * pad_bytes
    return (json.dumps({"payload": payload, "sha256": _payload_checksum(payload)}, sort_keys=True) + "\n").encode()


class CorruptCheckpoint(ValueError):
    """A checkpoint file that cannot be trusted."""


def decode_checkpoint(raw: bytes, rounds: int) -> TrainingState:
    try:
        document = json.loads(raw)
        payload = document["payload"]
        checksum = document["sha256"]
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptCheckpoint(f"unreadable: {exc}") from exc
    if not isinstance(payload, dict) or _payload_checksum(payload) != checksum:
        raise CorruptCheckpoint("checksum mismatch")
    if payload.get("format") != CHECKPOINT_FORMAT:
        raise CorruptCheckpoint(f"format {payload.get('format')!r}")
    # A checkpoint made with other work per step would resume into a different trajectory.
    if payload.get("rounds") != rounds:
        raise CorruptCheckpoint(f"made with --hash-rounds {payload.get('rounds')!r}, not {rounds}")
    pad = payload.get("pad", "")
    if not isinstance(pad, str) or pad.strip("0"):
        raise CorruptCheckpoint("bad padding")
    unknown = sorted(set(payload) - {"format", "step", "state", "rounds", "pad"})
    if unknown:
        raise CorruptCheckpoint(f"unknown fields {','.join(unknown)}")
    step, state = payload.get("step"), payload.get("state")
    if not isinstance(step, int) or step < 0 or not isinstance(state, str) or len(state) != 64:
        raise CorruptCheckpoint("bad step or state")
    return TrainingState(step=step, state=state)


def partial_name(final: Path) -> str:
    return f".{final.name}.{os.getpid()}.tmp"


def write_checkpoint(
    directory: Path,
    current: TrainingState,
    rounds: int,
    pad_bytes: int = 0,
    write_seconds: float = 0.0,
    sleep: Callable[[float], None] = time.sleep,
) -> Path:
    """Write atomically: readers see the old set of files or the new one, never half a file.

    With ``write_seconds`` the first half of the bytes is made durable, then the save pauses:
    a job killed in that window leaves only the hidden temporary file, as a job killed in the
    middle of a real multi-gigabyte save would. An OSError removes the temporary file (when it
    can) and propagates.
    """
    final = directory / checkpoint_name(current.step)
    tmp = directory / partial_name(final)
    raw = encode_checkpoint(current, rounds, pad_bytes)
    try:
        with open(tmp, "wb") as handle:
            if write_seconds > 0:
                half = len(raw) // 2
                handle.write(raw[:half])
                handle.flush()
                os.fsync(handle.fileno())
                sleep(write_seconds)
                handle.write(raw[half:])
            else:
                handle.write(raw)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, final)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    # The rename itself is only durable once the directory entry is on disk.
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return final


def checkpoint_files(directory: Path) -> list[Path]:
    """Checkpoints, newest (highest step) first."""
    found = []
    for path in directory.glob(CHECKPOINT_PREFIX + "*" + CHECKPOINT_SUFFIX):
        number = path.name[len(CHECKPOINT_PREFIX) : -len(CHECKPOINT_SUFFIX)]
        if number.isdigit():
            found.append((int(number), path))
    return [path for _step, path in sorted(found, reverse=True)]


def newest_valid_checkpoint(
    directory: Path, rounds: int, log: Logger
) -> tuple[Optional[TrainingState], Optional[Path]]:
    for path in checkpoint_files(directory):
        try:
            current = decode_checkpoint(path.read_bytes(), rounds)
        except (OSError, CorruptCheckpoint) as exc:
            log.event("skip_checkpoint", file=path.name, reason=str(exc).replace(" ", "_"))
            continue
        return current, path
    return None, None


def partial_files(directory: Path) -> list[Path]:
    """Temporary files that saves left behind when they were killed, oldest name first."""
    return sorted(directory.glob(PARTIAL_GLOB))


def errno_name(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno, "OSError") if exc.errno is not None else type(exc).__name__


def prune_checkpoints(directory: Path, keep: int) -> None:
    for path in checkpoint_files(directory)[keep:]:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


class Logger:
    def __init__(self, stream=None) -> None:
        self.stream = stream if stream is not None else sys.stdout

    def event(self, name: str, **fields: object) -> None:
        parts = [name, f"time={time.time():.3f}"] + [f"{key}={value}" for key, value in fields.items()]
        self.stream.write(" ".join(parts) + "\n")
        # Slurm's output file is what drills read, possibly while we still run.
        self.stream.flush()


class StopRequest:
    """Turns SIGTERM/SIGINT into a flag the step loop checks between steps.

    time.sleep() resumes after a signal (PEP 475), so the pause between steps
    waits on a self-pipe that the signal wakes instead: a job with long steps
    still checkpoints as soon as Slurm's SIGTERM arrives.
    """

    def __init__(self) -> None:
        self.signal_name: Optional[str] = None
        self._wakeup_read: Optional[int] = None

    def install(self) -> None:
        read_end, write_end = os.pipe()
        os.set_blocking(read_end, False)
        os.set_blocking(write_end, False)
        signal.set_wakeup_fd(write_end)
        self._wakeup_read = read_end
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, _frame: object) -> None:
        self.signal_name = signal.Signals(signum).name

    def ignore_more(self) -> None:
        """Ignore SIGTERM and SIGINT from now on: for the exit after the loop.

        While Python shuts down it puts back the default action of a signal it had a handler for,
        so a repeated SIGTERM then (a batch script's trap forwarding the one Slurm sent the whole
        job, or a second scancel) would kill the job with 143 instead of its 75, and slurmctld
        would not requeue it. An ignored signal stays ignored.
        """
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    def pause(self, seconds: float) -> None:
        if self._wakeup_read is None:
            time.sleep(seconds)
            return
        deadline = time.monotonic() + seconds
        while self.signal_name is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            ready, _w, _x = select.select([self._wakeup_read], [], [], left)
            if ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._wakeup_read, 512)


class Progress:
    """The job's heartbeat file for the node's health agent (health/job_progress.py reads it)."""

    def __init__(self, path: Optional[Path], every: float = 1.0, stall_after_s: Optional[float] = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.every = every
        self.stall_after_s = stall_after_s
        self.clock = clock
        self._last: Optional[float] = None
        self._failed = False

    def report(self, step: int, log: Logger, force: bool = False) -> None:
        if self.path is None or self._failed:
            return
        now = self.clock()
        if not force and self._last is not None and now - self._last < self.every:
            return
        document: dict = {"step": step}
        if self.stall_after_s is not None:
            document["stall_after_s"] = self.stall_after_s
        # A hidden temporary name, which the agent ignores; the rename makes the new heartbeat whole.
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(document) + "\n")
            os.replace(tmp, self.path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            self._failed = True
            log.event("progress_failed", file=self.path, reason=errno_name(exc))
            return
        self._last = now

    def close(self) -> None:
        if self.path is not None:
            with contextlib.suppress(OSError):
                self.path.unlink()


@dataclass(frozen=True)
class RunConfig:
    checkpoint_dir: Path
    steps: int
    checkpoint_every: int
    step_seconds: float
    hash_rounds: int
    keep: int
    checkpoint_write_seconds: float = 0.0
    checkpoint_pad_bytes: int = 0
    progress_file: Optional[Path] = None
    progress_every: float = 1.0
    stall_after_seconds: Optional[float] = None


class _Quiet:
    def event(self, name: str, **fields: object) -> None:
        pass


def save_checkpoint(config: RunConfig, current: TrainingState, log: Logger) -> Optional[Path]:
    """One save; None when it failed (logged as ``checkpoint_failed``), the job goes on either way.

    Pruning happens only after a save that succeeded: after a failed one, the newest valid
    checkpoint may be the only good one left.
    """
    final = config.checkpoint_dir / checkpoint_name(current.step)
    log.event("checkpoint_begin", step=current.step, file=final.name)
    try:
        path = write_checkpoint(
            config.checkpoint_dir,
            current,
            config.hash_rounds,
            pad_bytes=config.checkpoint_pad_bytes,
            write_seconds=config.checkpoint_write_seconds,
        )
    except OSError as exc:
        _good, kept = newest_valid_checkpoint(config.checkpoint_dir, config.hash_rounds, _Quiet())
        fields: dict = {"step": current.step, "reason": errno_name(exc), "kept": kept.name if kept else "-"}
        tmp = config.checkpoint_dir / partial_name(final)
        if tmp.exists():
            fields["left"] = tmp.name  # e.g. a volume that went read-only mid-write
        log.event("checkpoint_failed", **fields)
        return None
    prune_checkpoints(config.checkpoint_dir, config.keep)
    return path


def train(config: RunConfig, stop: StopRequest, log: Logger, progress: Optional[Progress] = None) -> int:
    progress = progress or Progress(None)
    config.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    # A save killed mid-write leaves its hidden temporary file; it is never a checkpoint.
    for partial in partial_files(config.checkpoint_dir):
        log.event("skip_partial", file=partial.name)
    current, source = newest_valid_checkpoint(config.checkpoint_dir, config.hash_rounds, log)
    if current is None:
        current = TrainingState(step=0, state=INITIAL_STATE)
        log.event("start", step=0, steps=config.steps)
        saved_name = "-"
    else:
        log.event("resume", step=current.step, source=source.name if source else "-", steps=config.steps)
        saved_name = source.name if source else "-"
    progress.report(current.step, log, force=True)
    last_saved = current.step
    while current.step < config.steps:
        if stop.signal_name is not None:
            if current.step != last_saved:
                path = save_checkpoint(config, current, log)
                if path is not None:
                    saved_name = path.name
                else:
                    # The requeued run resumes from the last good checkpoint and redoes the steps since.
                    _good, kept = newest_valid_checkpoint(config.checkpoint_dir, config.hash_rounds, _Quiet())
                    saved_name = kept.name if kept else "-"
            log.event(
                "interrupted",
                step=current.step,
                signal=stop.signal_name,
                checkpoint=saved_name,
                exit=EXIT_REQUEUE,
            )
            return EXIT_REQUEUE
        began = time.monotonic()
        current = current.advance(config.hash_rounds)
        log.event("step", step=current.step, state=current.state[:16])
        progress.report(current.step, log)
        if current.step % config.checkpoint_every == 0:
            path = save_checkpoint(config, current, log)
            if path is not None:
                last_saved = current.step
                saved_name = path.name
                log.event("checkpoint", step=current.step, file=path.name)
            progress.report(current.step, log, force=True)  # a slow save is not a stall once it ends
        remaining = config.step_seconds - (time.monotonic() - began)
        if remaining > 0:
            stop.pause(remaining)
    if current.step != last_saved and save_checkpoint(config, current, log) is None:
        # The work is done but its result is not on disk: a failed job, not a finished one.
        log.event("error", step=current.step, reason="final_checkpoint_failed")
        return EXIT_ERROR
    log.event("done", step=current.step, state=current.state)
    return EXIT_DONE


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def parse_args(argv: list[str]) -> RunConfig:
    parser = argparse.ArgumentParser(prog="train_sim", description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--checkpoint-dir", required=True, type=Path, help="where checkpoints live (shared storage)")
    parser.add_argument("--steps", type=_positive_int, default=1000, help="total steps of the run (default 1000)")
    parser.add_argument("--checkpoint-every", type=_positive_int, default=50, help="steps between checkpoints")
    parser.add_argument(
        "--step-seconds",
        type=_non_negative_float,
        default=0.05,
        help="minimum wall time of one step; the hashing counts towards it (default 0.05)",
    )
    parser.add_argument(
        "--hash-rounds",
        type=_positive_int,
        default=2000,
        help="SHA-256 rounds per step, the step's real work (default 2000, about 1-3 ms)",
    )
    parser.add_argument("--keep", type=_positive_int, default=3, help="checkpoints to keep (default 3)")
    parser.add_argument(
        "--checkpoint-write-seconds",
        type=_non_negative_float,
        default=0.0,
        help="pause in the middle of each save, after half the bytes are on disk, so a drill can kill "
        "the job mid-write (default 0)",
    )
    parser.add_argument(
        "--checkpoint-pad-bytes",
        type=_non_negative_int,
        default=0,
        help="padding added to every checkpoint, so a volume fills like it would with real ones (default 0)",
    )
    parser.add_argument(
        "--progress-file",
        type=Path,
        default=os.environ.get("GPUFLEET_PROGRESS_FILE") or None,
        help="the heartbeat file the node's health agent reads (default: $GPUFLEET_PROGRESS_FILE; none: no report)",
    )
    parser.add_argument(
        "--progress-every",
        type=_non_negative_float,
        default=1.0,
        help="seconds between two reports at most (default 1)",
    )
    parser.add_argument(
        "--stall-after-seconds",
        type=_non_negative_float,
        default=None,
        help="the job's own stall window, written into the progress file (default: the agent's)",
    )
    args = parser.parse_args(argv)
    return RunConfig(
        checkpoint_dir=args.checkpoint_dir,
        steps=args.steps,
        checkpoint_every=args.checkpoint_every,
        step_seconds=args.step_seconds,
        hash_rounds=args.hash_rounds,
        keep=args.keep,
        checkpoint_write_seconds=args.checkpoint_write_seconds,
        checkpoint_pad_bytes=args.checkpoint_pad_bytes,
        progress_file=Path(args.progress_file) if args.progress_file else None,
        progress_every=args.progress_every,
        stall_after_seconds=args.stall_after_seconds,
    )


def main(argv: Optional[list[str]] = None) -> int:
    config = parse_args(sys.argv[1:] if argv is None else argv)
    stop = StopRequest()
    stop.install()
    log = Logger()
    progress = Progress(config.progress_file, config.progress_every, config.stall_after_seconds)
    try:
        return train(config, stop, log, progress)
    except OSError as exc:
        log.event("error", reason=str(exc).replace(" ", "_"))
        return EXIT_ERROR
    finally:
        stop.ignore_more()
        progress.close()


if __name__ == "__main__":
    sys.exit(main())
