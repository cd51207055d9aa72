"""Integration fixtures shared by every integration test."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest
from lab_harness import (
    ENV_PORT_OFFSET,
    REPO,
    TEST_LAB_VARS,
    WORKER_INDEX,
    XDIST_UNITS_FILE,
    Background,
    DownUp,
    Lab,
    PlaybookResult,
    down_and_up,
    lab_processes,
    run_playbook,
    worker_dir,
)

CACHE_DIR = Path(os.environ.get("GPUFLEET_CACHE_DIR") or Path.home() / ".cache" / "gpufleet")
LAB_DIR = worker_dir(os.environ.get("GPUFLEET_TEST_LAB_DIR", "/var/tmp/gpufleet-pytest-lab"))


class _LabStart:
    """The session lab's bring-up, started when collection is done if a selected test needs the lab,
    so that it runs while the unit tests (and the tests that need no lab) do."""

    thread: Optional[threading.Thread] = None
    result: Optional[PlaybookResult] = None
    down_up: Optional[DownUp] = None
    error: Optional[BaseException] = None
    claimed = False

    @classmethod
    def start(cls, the_lab: Lab, down_up: bool = True) -> None:
        def bring_up():
            try:
                if the_lab.lab_dir.exists():
                    # A previous session that died: stop what its records name, then start clean.
                    the_lab.playbook("lab-down.yml")
                    shutil.rmtree(the_lab.lab_dir)
                cls.result = the_lab.playbook("one-click-slurm.yml")
                if cls.result.rc == 0 and down_up:
                    # test_lab.py's down-and-up check, done now while it overlaps the tests that
                    # need no lab rather than in the middle of the lab tests (about 100 s).
                    cls.down_up = down_and_up(the_lab)
            except BaseException as exc:  # raised again in the fixture, in the test's thread
                cls.error = exc

        # Named gpufleet-…, as every thread of the session's own: the unit tests' process fakes
        # let those through (test_argspec_property.not_in_session_threads).
        cls.thread = threading.Thread(target=bring_up, name="gpufleet-lab-up", daemon=True)
        cls.thread.start()

    @classmethod
    def wait(cls, the_lab: Lab) -> PlaybookResult:
        cls.claimed = True
        if cls.thread is None:
            cls.start(the_lab)
        cls.thread.join()
        if cls.error is not None:
            raise cls.error
        assert cls.result is not None
        return cls.result


# Starts the background runs once the lab is up (pytest_collection_finish); joined at the end.
_starter: Optional[threading.Thread] = None


def _session_lab() -> Lab:
    return Lab(lab_dir=LAB_DIR, extra_vars=dict(TEST_LAB_VARS))


# Under pytest-xdist (`make test` runs two workers) a module is one unit of work (tests/conftest.py),
# so its module-scoped fixtures are set up once. Each worker has a session lab of its own (the second's
# in a `-gw1` directory, on ports 6000 lower: lab_harness.WORKER_PORT_SHIFTS), and the modules of each
# lab are one unit, pinned to its worker: the first worker's (LAB_UNITS[0]) starts with the unit tests,
# which overlap the lab's bring-up, and takes its lab down and up once (test_lab.py's check); the
# second worker's lab gets SECOND_LAB_MODULES, and that worker also takes everything else: the
# background runs (a molecule scenario, an ansible-test command, each a unit) and the integration
# modules with parts of their own. With one worker, one lab has them all.
LAB_UNITS = ("session-lab", "session-lab-gw1")
# The lab modules of the second worker's lab: its share of CI's time (docs/testing.md, "Two workers").
# The modules of the Slurm 26.05 lab (one per run) go with them: some use both labs.
SECOND_LAB_MODULES = ("slinky/test_one_click_existing.py", "monitoring/test_operator_objects.py",
                      "chaos/test_numa_chaos.py", "remediation/test_slurm_modules.py",
                      "remediation/test_node_replace.py")
# A lab other than the session's that several modules share makes them one unit: a session fixture is
# set up once per worker (the Slurm 26.05 lab's is the second session lab's, above).
SHARED_LAB_UNITS = {"identity_lab": "identity-lab"}


def _runs_in_background(item: pytest.Item) -> bool:
    return callable(getattr(getattr(item, "module", None), "start_in_background", None))


def _uses(fixture: str, module_items: List[pytest.Item]) -> bool:
    return any(fixture in getattr(item, "fixturenames", ()) for item in module_items)


def _uses_lab(module_items: List[pytest.Item]) -> bool:
    return _uses("lab", module_items)


def _is_unit(module_items: List[pytest.Item]) -> bool:
    return Path(str(module_items[0].path)).is_relative_to(REPO / "tests" / "unit")


def _xdist_unit_of(module_items: List[pytest.Item], lab_in_session: bool, two_labs: bool) -> str:
    """The unit of work a module's tests are under xdist: a session lab's (LAB_UNITS), another
    shared lab's, or the module's own (each run of a background module is a unit of its own)."""
    module = module_items[0].nodeid.split("::", 1)[0]
    if two_labs and (_uses("slurm_lab", module_items) or
                     (_uses_lab(module_items) and module.endswith(SECOND_LAB_MODULES))):
        return LAB_UNITS[1]
    if _uses_lab(module_items) or _uses("slurm_lab", module_items) or (lab_in_session and _is_unit(module_items)):
        return LAB_UNITS[0]
    for fixture, unit in SHARED_LAB_UNITS.items():
        if _uses(fixture, module_items):
            return unit
    return module


# Under xdist: the unit of work of each selected test (its nodeid -> group), which the controller's
# scheduler reads (tests/conftest.py).
_xdist_units: Dict[str, str] = {}


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: List[pytest.Item]) -> None:
    """Run what needs no session lab first (the unit tests and the integration modules that bring
    their own parts), so it overlaps the lab's bring-up instead of the first lab test waiting for
    it; then the modules that use the lab; last the ones that collect the background runs.

    A module moves whole, so its module-scoped fixtures are set up once; the order within each
    group is the collection order. ``pytest tests`` collects tests/integration before tests/unit,
    which put the lab's bring-up in front of the first lab test with nothing beside it.

    Under xdist there is no background thread: each run of a background module is a test of its
    own. The first lab's unit (the unit tests, then its lab modules) goes first; then the runs of the
    background modules (the longest of the rest), the second lab's unit, and the rest."""
    xdist = bool(os.environ.get("PYTEST_XDIST_WORKER"))
    two_labs = xdist and int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) >= 2
    by_module: Dict[Any, List[pytest.Item]] = {}
    for item in items:
        by_module.setdefault(getattr(item, "module", None) or item.path, []).append(item)
    modules = list(by_module.values())
    lab_in_session = any(_uses_lab(module_items) for module_items in modules)
    unit_of = {id(module_items): _xdist_unit_of(module_items, lab_in_session, two_labs) for module_items in modules}

    def order(module_items: List[pytest.Item]) -> Tuple[int, int]:
        if xdist:
            unit = unit_of[id(module_items)]
            if unit == LAB_UNITS[0]:
                return (0, 0 if _is_unit(module_items) else 1)
            if any(_runs_in_background(item) for item in module_items):
                return (1, 0)
            return (2, 0) if unit == LAB_UNITS[1] else (3, 0)
        if any(_runs_in_background(item) for item in module_items):
            return (2, 0)
        return (1, 0) if _uses_lab(module_items) else (0, 0)

    ordered = sorted(modules, key=order)  # stable: collection order within a group
    items[:] = [item for module_items in ordered for item in module_items]
    _xdist_units.clear()
    if xdist:
        for module_items in ordered:
            for item in module_items:
                _xdist_units[item.nodeid] = item.nodeid if _runs_in_background(item) else unit_of[id(module_items)]


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which tells the controller that collection is done
def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the waiting-bound work now, to overlap the tests before it: the session lab (when a
    selected test uses it) and the runs of every module with a ``start_in_background(items)``
    (test_ansible_test.py, test_molecule.py), in the order the session reaches them.

    Under xdist, the worker writes the unit of each test for the controller's scheduler, and brings
    its own lab up when its lab's unit uses it; there is no background run: each is a test of its
    own."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    units_file = os.environ.get(XDIST_UNITS_FILE)
    if units_file and worker:
        mine = "%s.%s" % (units_file, worker)
        # Each lab's unit runs on the worker whose lab it is.
        pins = {unit: "gw%d" % index for index, unit in enumerate(LAB_UNITS)}
        Path(mine).write_text(json.dumps({"units": _xdist_units, "pins": pins}))
        os.replace(mine, units_file)  # both workers collect the same tests: the last write is as good
    if session.config.option.collectonly or getattr(session.config.option, "setupplan", False) or not session.items:
        return  # nothing runs: no lab
    if worker:
        # This worker's lab, when its unit has a test that uses it; only the first takes it down and up.
        mine = LAB_UNITS[WORKER_INDEX] if len(LAB_UNITS) > WORKER_INDEX else None
        uses_lab = any(_xdist_units.get(item.nodeid) == mine and "lab" in getattr(item, "fixturenames", ())
                       for item in session.items)
        if uses_lab and os.environ.get("GPUFLEET_TEST_LAB_KEEP") != "1":
            _LabStart.start(_session_lab(), down_up=WORKER_INDEX == 0)
        return
    if os.environ.get("GPUFLEET_TEST_LAB_KEEP") != "1" and _uses_lab(session.items):
        _LabStart.start(_session_lab())
    by_module = {}
    for item in session.items:
        if _runs_in_background(item):
            by_module.setdefault(item.module, []).append(item)

    def start_runs():
        # The lab's bring-up is what the first lab test waits for: it gets the CPU the unit tests
        # leave, and the background runs (needed only at the end of the session) start after it.
        if _LabStart.thread is not None:
            _LabStart.thread.join()
        for module, items in by_module.items():
            module.start_in_background(items)

    global _starter
    _starter = threading.Thread(target=start_runs, name="gpufleet-background-start", daemon=True)
    _starter.start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _starter is not None:
        _starter.join()
    Background.shutdown()
    if _LabStart.thread is not None and not _LabStart.claimed:
        # Started, but no test got as far as the lab (-x, Ctrl-C, a deselection): take it down again.
        _LabStart.thread.join()
        _session_lab().playbook("lab-down.yml")


@pytest.fixture(scope="session")
def lab_down_up(lab: Lab) -> DownUp:
    """The session lab taken down and brought back once: recorded during the bring-up, or done
    now where the session did not bring the lab up (GPUFLEET_TEST_LAB_KEEP=1)."""
    return _LabStart.down_up if _LabStart.down_up is not None else down_and_up(lab)


@pytest.fixture(scope="session")
def fake_nvml_lib() -> Path:
    """Build the fake libnvidia-ml.so.1 (a no-op when up to date); a build failure fails the tests."""
    subprocess.run(["make", "--no-print-directory", "-s", "-C", str(REPO / "tools" / "fake-nvml"),
                    f"GPUFLEET_CACHE_DIR={CACHE_DIR}"], check=True)
    lib = CACHE_DIR / "fake-nvml" / "libnvidia-ml.so.1"
    assert lib.is_file()
    return lib


@pytest.fixture(scope="session")
def lab() -> Lab:
    """The lab, brought up once per session with playbooks/one-click-slurm.yml and taken down at the end.

    The bring-up starts when collection is done (pytest_collection_finish above), so this fixture
    mostly finds it finished. Later issues' integration tests use it too. Teardown runs
    playbooks/lab-down.yml and fails the session if any process of the lab is left.
    """
    the_lab = _session_lab()
    # Development only: GPUFLEET_TEST_LAB_KEEP=1 reuses a running test lab and leaves it up.
    if os.environ.get("GPUFLEET_TEST_LAB_KEEP") == "1":
        if not (LAB_DIR / "run" / "kube-apiserver.pid").exists():
            up = the_lab.playbook("one-click-slurm.yml")
            assert up.rc == 0, up.output[-6000:]
        yield the_lab
        return
    up = _LabStart.wait(the_lab)
    if up.rc != 0:
        the_lab.playbook("lab-down.yml")
        pytest.fail("the lab did not come up:\n" + up.output[-6000:])
    yield the_lab
    down = the_lab.playbook("lab-down.yml")
    left = lab_processes(LAB_DIR)
    assert down.rc == 0, down.output[-4000:]
    assert not left, "processes left after lab-down: %s" % left


# ---- the Slurm-only 26.05 lab ------------------------------------------------------------------
# Slurm 26.05 (the Slurm of Slinky 1.2's images, run from a Debian forky root by the slurm role) with
# slurmrestd, beside the test lab: its own directory and ports (slurmctld 30817, slurmrestd 30820,
# slurmd 31001-, all shifted by GPUFLEET_TEST_LAB_PORT_OFFSET). It comes up the first time a test asks
# for it and goes down at the end of the session. One per run, not per worker: the modules that use
# it run on one worker (the second session lab's unit, _xdist_unit_of), and its root is built once
# into the shared cache. The Slurm client tests run on it and on the test lab's 22.05; the
# remediation's REST test reaches it through slurmrestd alone.
HERE = Path(__file__).resolve().parent
SLURM_LAB_DIR = Path(os.environ.get("GPUFLEET_TEST_SLURM_LAB_DIR", "/var/tmp/gpufleet-pytest-slurm"))
SLURM_LAB_VARS: Dict[str, Any] = {
    "slurm_lab_version": "26.05",
    "slurm_slurmctld_port": 30817 + ENV_PORT_OFFSET,
    "slurm_slurmd_port_base": 31001 + ENV_PORT_OFFSET,
    "slurm_slurmrestd_port": 30820 + ENV_PORT_OFFSET,
    "gpufleet_node_pools": TEST_LAB_VARS["gpufleet_node_pools"],
}


def _run(the_lab: Lab, book: str):
    variables = dict(the_lab.extra_vars, gpufleet_lab_dir=str(the_lab.lab_dir))
    return run_playbook([str(HERE / "slurm" / "files" / book), "-e", json.dumps(variables)], the_lab.env())


@pytest.fixture(scope="session")
def slurm_lab() -> Lab:
    """The Slurm-only 26.05 lab (about 60 s the first time on a host: 35 s of them make its root)."""
    the_lab = Lab(lab_dir=SLURM_LAB_DIR, extra_vars=dict(SLURM_LAB_VARS))
    if SLURM_LAB_DIR.exists():
        _run(the_lab, "slurm-lab-down.yml")
        shutil.rmtree(SLURM_LAB_DIR)
    up = _run(the_lab, "slurm-lab-up.yml")
    if up.rc != 0:
        _run(the_lab, "slurm-lab-down.yml")
        pytest.fail("the Slurm 26.05 lab did not come up:\n" + up.output[-6000:])
    yield the_lab
    down = _run(the_lab, "slurm-lab-down.yml")
    left = lab_processes(SLURM_LAB_DIR)
    assert down.rc == 0, down.output[-4000:]
    assert not left, "processes left after the Slurm lab's teardown: %s" % left
