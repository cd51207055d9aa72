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
import tempfile
from pathlib import Path
from typing import Any, Dict, Optional

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
                if not path.exists():
                    raise RuntimeError("the workers wrote no units of work to %s (tests/integration/conftest.py)"
                                       % path)
                written = json.loads(path.read_text())
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
