"""The shipped XID catalog is what tools/gen_xid_catalog.py makes of the CSVs in tests/fixtures/xid-catalog.

A hand edit of plugins/module_utils/health/xid_catalog.py, or new CSVs without the module generated
again, fails here; so does a generator that no longer reproduces its own output byte for byte.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
TOOL = REPO / "tools" / "gen_xid_catalog.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=120,
                          check=False)


def test_the_shipped_catalog_is_generated_from_the_csvs_in_the_repo():
    done = run("--check")
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_changed_catalog_is_stale(tmp_path):
    stale = tmp_path / "xid_catalog.py"
    stale.write_text((REPO / "plugins" / "module_utils" / "health" / "xid_catalog.py").read_text() + "# edited\n")
    done = run("--check", "--output", str(stale))
    assert done.returncode == 1, done.stdout + done.stderr
