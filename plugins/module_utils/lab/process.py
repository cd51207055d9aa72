# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Start and stop the lab's long-running daemons, tracked by recorded PID.

The lab runs real daemons (etcd, kube-apiserver, slurmctld, one slurmd per
node, ...) as plain processes. Each one gets a record ``<run_dir>/<name>.pid``
holding its PID, its argv and its kernel start time. The start time guards
against PID reuse: a record only matches a live process when ``/proc/<pid>``
reports the same start time, so we never signal a stranger that happens to
have inherited the PID. Nothing here looks processes up by name.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ansible.module_utils.urls import open_url

PID_SUFFIX = ".pid"
# The environment a daemon sees: deliberately small so a lab daemon never
# inherits the caller's proxies, KUBECONFIG or Ansible internals by accident.
BASE_ENV_KEYS = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "USER")


class LabProcessError(Exception):
    """A lab process could not be started, checked or stopped."""


@dataclass(frozen=True)
class ProcessSpec:
    name: str
    argv: List[str]
    run_dir: str
    log_dir: str
    env: Dict[str, str] = field(default_factory=dict)
    chdir: Optional[str] = None
    user: Optional[str] = None


@dataclass(frozen=True)
class ProcessRecord:
    name: str
    pid: int
    argv: List[str]
    start_time: str

    def to_json(self) -> str:
        return json.dumps({"name": self.name, "pid": self.pid, "argv": self.argv, "start_time": self.start_time})


@dataclass(frozen=True)
class ReadinessCheck:
    tcp: Optional[str] = None
    http: Optional[str] = None
    file: Optional[str] = None
    ca: Optional[str] = None
    cert: Optional[str] = None
    key: Optional[str] = None
    insecure: bool = False
    timeout: float = 60.0


def validate_name(name: str) -> None:
    if not name or "/" in name or name.startswith(".") or name.endswith(PID_SUFFIX):
        raise LabProcessError("name: %r is not a valid process name" % (name,))


def record_path(run_dir: str, name: str) -> str:
    return os.path.join(run_dir, name + PID_SUFFIX)


def proc_start_time(pid: int) -> Optional[str]:
    """The process start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        with open("/proc/%d/stat" % pid) as stat:
            raw = stat.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = raw[raw.rfind(")") + 2:].split()
    if len(fields) < 20 or fields[0] == "Z":
        return None
    return fields[19]


def read_record(run_dir: str, name: str) -> Optional[ProcessRecord]:
    path = record_path(run_dir, name)
    try:
        with open(path) as handle:
            data = json.load(handle)
        return ProcessRecord(name=data["name"], pid=int(data["pid"]), argv=list(data["argv"]),
                             start_time=str(data["start_time"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LabProcessError(
            "%s: unreadable PID record (%s); remove it after checking the process by hand" % (path, exc)) from exc


def list_records(run_dir: str) -> List[ProcessRecord]:
    if not os.path.isdir(run_dir):
        return []
    names = sorted(entry[: -len(PID_SUFFIX)] for entry in os.listdir(run_dir) if entry.endswith(PID_SUFFIX))
    return [record for record in (read_record(run_dir, name) for name in names) if record is not None]


def is_alive(record: ProcessRecord) -> bool:
    return proc_start_time(record.pid) == record.start_time


def _write_record(run_dir: str, record: ProcessRecord) -> None:
    path = record_path(run_dir, record.name)
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        handle.write(record.to_json() + "\n")
    os.replace(tmp, path)


def _remove_record(run_dir: str, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(record_path(run_dir, name))


def _log_tail(path: str, lines: int = 15) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 4096))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def start(spec: ProcessSpec) -> ProcessRecord:
    """Start the daemon detached in its own session and record it."""
    validate_name(spec.name)
    os.makedirs(spec.run_dir, exist_ok=True)
    os.makedirs(spec.log_dir, exist_ok=True)
    env = {key: os.environ[key] for key in BASE_ENV_KEYS if key in os.environ}
    env.update({str(key): str(value) for key, value in spec.env.items()})
    log_path = os.path.join(spec.log_dir, spec.name + ".log")
    # A daemon run as another user gets that user's primary group and no
    # supplementary groups; otherwise it would keep root's GID 0.
    identity = {}
    if spec.user:
        try:
            entry = pwd.getpwnam(spec.user)
        except KeyError:
            raise LabProcessError("user: no such user %r" % spec.user) from None
        identity = dict(user=entry.pw_uid, group=entry.pw_gid, extra_groups=[])
    with open(log_path, "ab") as log, open(os.devnull, "rb") as devnull:
        log.write(("--- %s start %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S"), " ".join(spec.argv))).encode())
        log.flush()
        try:
            child = subprocess.Popen(
                spec.argv, stdin=devnull, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=spec.chdir,
                start_new_session=True, close_fds=True, **identity,
            )
        except OSError as exc:
            raise LabProcessError("%s: cannot execute %s: %s" % (spec.name, spec.argv[0], exc)) from exc
    start_time = None
    for _attempt in range(50):
        start_time = proc_start_time(child.pid)
        if start_time is not None:
            break
        if child.poll() is not None:
            break
        time.sleep(0.01)
    if start_time is None:
        raise LabProcessError("%s exited at once (code %s). Log %s:\n%s"
                              % (spec.name, child.poll(), log_path, _log_tail(log_path)))
    record = ProcessRecord(name=spec.name, pid=child.pid, argv=list(spec.argv), start_time=start_time)
    _write_record(spec.run_dir, record)
    # Let init reap it once we exit: we never wait() on a daemon.
    child.returncode = 0
    return record


def stop(run_dir: str, record: ProcessRecord, timeout: float = 15.0) -> bool:
    """SIGTERM the recorded process group, then SIGKILL after ``timeout``.

    Returns True when a live process was signalled. The record is removed
    either way, so a stale record never blocks a later start.
    """
    signalled = False
    if is_alive(record):
        signalled = True
        # The daemon leads its own session, so its process group holds its
        # helpers too; only use the group while the daemon still leads it.
        group = os.getpgid(record.pid) == record.pid
        _signal(record, signal.SIGTERM, group)
        deadline = time.monotonic() + timeout
        while is_alive(record) and time.monotonic() < deadline:
            time.sleep(0.05)
        if is_alive(record):
            _signal(record, signal.SIGKILL, group)
            deadline = time.monotonic() + 5
            while is_alive(record) and time.monotonic() < deadline:
                time.sleep(0.05)
            if is_alive(record):
                raise LabProcessError("%s (pid %d) survived SIGKILL" % (record.name, record.pid))
    _remove_record(run_dir, record.name)
    return signalled


def _signal(record: ProcessRecord, signum: int, group: bool) -> None:
    try:
        if group:
            os.killpg(record.pid, signum)
        else:
            os.kill(record.pid, signum)
    except ProcessLookupError:
        pass


def check_ready(check: ReadinessCheck) -> bool:
    if check.file is not None and not os.path.exists(check.file):
        return False
    if check.tcp is not None:
        host, _sep, port = check.tcp.rpartition(":")
        try:
            with socket.create_connection((host or "127.0.0.1", int(port)), timeout=1):
                pass
        except OSError:
            return False
    if check.http is not None:
        try:
            with open_url(check.http, timeout=2, validate_certs=not check.insecure, ca_path=check.ca,
                          client_cert=check.cert, client_key=check.key) as reply:
                return 200 <= reply.status < 300
        except (OSError, ValueError):
            return False
    return True


def wait_ready(spec: ProcessSpec, record: ProcessRecord, check: ReadinessCheck) -> float:
    """Poll until ready; fail early, with the log tail, if the daemon dies."""
    began = time.monotonic()
    log_path = os.path.join(spec.log_dir, spec.name + ".log")
    while True:
        if not is_alive(record):
            _remove_record(spec.run_dir, spec.name)
            raise LabProcessError("%s (pid %d) died while starting. Log %s:\n%s"
                                  % (spec.name, record.pid, log_path, _log_tail(log_path)))
        if check_ready(check):
            return time.monotonic() - began
        if time.monotonic() - began > check.timeout:
            raise LabProcessError("%s (pid %d) not ready after %ss (%s). Log %s:\n%s"
                                  % (spec.name, record.pid, check.timeout,
                                     check.http or check.tcp or check.file, log_path, _log_tail(log_path)))
        time.sleep(0.1)


@dataclass
class Outcome:
    changed: bool
    action: str
    pid: Optional[int] = None
    stopped: List[str] = field(default_factory=list)
    ready_after: Optional[float] = None


def ensure_started(spec: ProcessSpec, check: Optional[ReadinessCheck], check_mode: bool,
                   stop_timeout: float = 15.0) -> Outcome:
    validate_name(spec.name)
    if not spec.argv:
        raise LabProcessError("argv: must name the program to run")
    record = read_record(spec.run_dir, spec.name)
    if record is not None and is_alive(record):
        if record.argv == list(spec.argv):
            if check is not None and not check_mode:
                wait_ready(spec, record, check)
            return Outcome(changed=False, action="none", pid=record.pid)
        if check_mode:
            return Outcome(changed=True, action="restart", pid=record.pid)
        stop(spec.run_dir, record, stop_timeout)
        action = "restart"
    else:
        if check_mode:
            return Outcome(changed=True, action="start")
        action = "start"
    record = start(spec)
    ready_after = wait_ready(spec, record, check) if check is not None else None
    return Outcome(changed=True, action=action, pid=record.pid, ready_after=ready_after)


def ensure_stopped(run_dir: str, names: List[str], check_mode: bool, stop_timeout: float = 15.0) -> Outcome:
    stopped = []
    for name in names:
        validate_name(name)
        record = read_record(run_dir, name)
        if record is None:
            continue
        if check_mode:
            if is_alive(record):
                stopped.append(name)
            continue
        if stop(run_dir, record, stop_timeout):
            stopped.append(name)
    return Outcome(changed=bool(stopped), action="stop" if stopped else "none", stopped=stopped)


def stop_all(run_dir: str, check_mode: bool, stop_timeout: float = 15.0) -> Outcome:
    # Reverse name order is no dependency graph; callers that care about
    # order (slurmd before slurmctld) stop by name first.
    names = [record.name for record in reversed(list_records(run_dir))]
    return ensure_stopped(run_dir, names, check_mode, stop_timeout)
