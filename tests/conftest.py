# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The test session's controller under pytest-xdist (`make test` runs two workers).

xdist's own grouping (``--dist loadgroup``) renames each test's node id, which pytest 9.2 no longer
lets a plugin do: every test became a unit of its own, and both workers brought up a lab. The
scheduler here groups by what the workers' collection decided instead (the unit of each test,
tests/integration/conftest.py): the modules of the session lab are one unit, for one worker; a
module is one unit, so its module-scoped fixtures are set up once.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

# lab_harness.XDIST_UNITS_FILE: the file the workers write their units to.
UNITS_FILE = "GPUFLEET_XDIST_UNITS_FILE"


def pytest_configure(config: pytest.Config) -> None:
    # The controller, before it starts the workers (they inherit its environment).
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        handle, path = tempfile.mkstemp(prefix="gpufleet-xdist-units-", suffix=".json")
        os.close(handle)
        os.unlink(path)  # written by the workers when their collection is done
        os.environ[UNITS_FILE] = path


# Wall time per test module (setup, call and teardown of its tests), summed where the reports arrive
# (the controller, under xdist): CI's time budget is spent by modules, and --durations shows tests.
_module_seconds: Dict[str, float] = {}
# CPU seconds per test module: the test process's own and its finished children's (ansible-playbook,
# molecule, ansible-lint). On a busy 2-core machine CPU, not wall time, is what a module costs the
# run: a module that waits on an alert costs little. Daemons a lab started are not counted.
_module_cpu: Dict[str, float] = {}
_PHASE_CPU = pytest.StashKey[Dict[str, float]]()


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _timed_phase(item: pytest.Item, when: str) -> Any:
    started = _cpu_seconds()
    yield
    item.stash.setdefault(_PHASE_CPU, {})[when] = _cpu_seconds() - started


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    yield from _timed_phase(item, "setup")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    yield from _timed_phase(item, "call")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Any:
    yield from _timed_phase(item, "teardown")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    outcome = yield
    # user_properties travel with the report from an xdist worker to the controller.
    outcome.get_result().user_properties.append(("cpu_s", item.stash.get(_PHASE_CPU, {}).get(call.when, 0.0)))


# Per xdist worker: its busy seconds and the wall-clock span of each module it ran, for the balance of
# the two workers (the session's wall time is the later of their ends).
_worker_busy: Dict[str, float] = {}
_worker_spans: Dict[str, Dict[str, List[float]]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = report.nodeid.split("::", 1)[0]
    _module_seconds[module] = _module_seconds.get(module, 0.0) + report.duration
    _module_cpu[module] = _module_cpu.get(module, 0.0) + sum(
        value for name, value in report.user_properties if name == "cpu_s")
    worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", None)
    if worker is None:
        return
    _worker_busy[worker] = _worker_busy.get(worker, 0.0) + report.duration
    span = _worker_spans.setdefault(worker, {}).setdefault(module, [report.start, report.stop])
    span[0], span[1] = min(span[0], report.start), max(span[1], report.stop)


def _write_worker_timelines(terminalreporter: Any) -> None:
    if not _worker_spans:
        return
    began = min(span[0] for spans in _worker_spans.values() for span in spans.values())
    terminalreporter.write_sep("=", "workers: modules from start to end (s since the first test), busy seconds")
    for worker in sorted(_worker_spans):
        spans = sorted(_worker_spans[worker].items(), key=lambda item: item[1][0])
        terminalreporter.write_line("%s: busy %.0fs, last test ended at %.0fs" % (
            worker, _worker_busy[worker], max(stop for _module, (_start, stop) in spans) - began))
        for module, (start, stop) in spans:
            if stop - start >= 20:
                terminalreporter.write_line("  %6.0f %6.0f %s" % (start - began, stop - began, module))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    # A thread that is not a daemon keeps the interpreter from exiting after the summary line (the
    # atexit join of a ThreadPoolExecutor's workers, for one): CI's clock runs on, pytest's does not.
    lingering = [thread for thread in threading.enumerate()
                 if thread is not threading.main_thread() and not thread.daemon and thread.is_alive()]
    if lingering:
        terminalreporter.write_sep("=", "threads the interpreter will wait for at exit")
        frames = sys._current_frames()
        for thread in lingering:
            frame = frames.get(thread.ident)
            stack = traceback.extract_stack(frame)[-4:] if frame else []
            where = " < ".join("%s:%d %s" % (Path(f.filename).name, f.lineno, f.name) for f in reversed(stack))
            terminalreporter.write_line("%s: %s" % (thread.name, where or "?"))
    _write_worker_timelines(terminalreporter)
    slowest = sorted(_module_seconds.items(), key=lambda item: item[1], reverse=True)[:25]
    if not slowest or slowest[0][1] < 10:
        return
    terminalreporter.write_sep("=", "slowest test modules (setup + call + teardown): wall and CPU seconds")
    for module, seconds in slowest:
        terminalreporter.write_line("%8.1fs %8.1f cpu-s %s" % (seconds, _module_cpu.get(module, 0.0), module))
    terminalreporter.write_line("CPU of all modules: %.0f s (the tests and their finished children)" % (
        sum(_module_cpu.values())))


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and os.environ.get(UNITS_FILE):
        Path(os.environ.pop(UNITS_FILE)).unlink(missing_ok=True)


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # before xdist's own (firstresult)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler.loadscope import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        """LoadScopeScheduling whose scope is the unit the workers named (else the module), in
        collection order; a unit pinned to a worker (a session lab's) goes to that worker alone."""

        units: Optional[Dict[str, str]] = None
        pins: Dict[str, str] = {}

        def _split_scope(self, nodeid: str) -> str:
            if self.units is None:
                path = Path(os.environ[UNITS_FILE])
                # Written by tests/integration/conftest.py before the workers report their collection
                # done; a session without it (ansible-test's units run of tests/unit/plugins/modules)
                # has a unit per module.
                written = json.loads(path.read_text()) if path.exists() else {"units": {}, "pins": {}}
                self.units, self.pins = written["units"], written["pins"]
            return self.units.get(nodeid) or nodeid.split("::", 1)[0]

        def _next_for(self, node: Any) -> Optional[str]:
            workers = {each.gateway.id for each in self.nodes}
            for scope in self.workqueue:
                pin = self.pins.get(scope)
                # A pin to a worker that is gone (a crash) holds no more.
                if pin is None or pin == node.gateway.id or pin not in workers:
                    return scope
            return None

        def _assign_work_unit(self, node: Any) -> None:
            scope = self._next_for(node)
            if scope is None:
                return
            # The base class hands out the first unit of the queue: put this one first.
            self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

        def _reschedule(self, node: Any) -> None:
            if node.shutting_down:
                return
            if self._next_for(node) is None:
                node.shutdown()  # it finishes what it has, then stops
                return
            if self._pending_of(self.assigned_work[node]) > 2:
                return
            self._assign_work_unit(node)

    return UnitScheduling(config, log)
