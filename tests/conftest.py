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
        """LoadScopeScheduling whose scope is the unit the workers named (else the module); units go
        out in collection order, the session lab's first."""

        units: Optional[Dict[str, str]] = None

        def _split_scope(self, nodeid: str) -> str:
            if self.units is None:
                path = Path(os.environ[UNITS_FILE])
                if not path.exists():
                    raise RuntimeError("the workers wrote no units of work to %s (tests/integration/conftest.py)"
                                       % path)
                self.units = json.loads(path.read_text())
            return self.units.get(nodeid) or nodeid.split("::", 1)[0]

    return UnitScheduling(config, log)
