"""Helpers of the Slinky tests: where the upstream charts are, and helm template."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any, Dict, List

import yaml
from lab_harness import REPO

CACHE_DIR = Path(os.environ.get("GPUFLEET_CACHE_DIR") or Path.home() / ".cache" / "gpufleet")
# SchedMD's charts, unmodified, at the tags the collection supports: one archive per tag in
# tests/fixtures/slinky (with their LICENSE and COMMIT; see the README there). Archives, so that
# the collection's sanity tests never read Helm's Go templates as YAML; they are unpacked once,
# into tests/output (ignored by git), where a relative chart path reaches them as a user types it.
FIXTURES = REPO / "tests" / "fixtures" / "slinky"
VENDOR = REPO / "tests" / "output" / "slinky-charts"
VENDOR_RELATIVE = VENDOR.relative_to(REPO)
CHART_VERSIONS = ("1.1.2", "1.2.1")
# The oldest Kubernetes the charts accept (their kubeVersion); helm template's default is older.
KUBE_VERSION = "1.29.0"


def chart_dir(version: str) -> Path:
    return VENDOR / ("v" + version) / "helm"


def unpack_charts() -> Path:
    """Unpack each chart archive into VENDOR unless that very archive is unpacked there already."""
    for version in CHART_VERSIONS:
        archive = FIXTURES / ("slurm-operator-charts-v%s.tar.gz" % version)
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()
        target = VENDOR / ("v" + version)
        stamp = VENDOR / ("v%s.sha256" % version)
        if stamp.is_file() and stamp.read_text() == digest and (target / "helm").is_dir():
            continue
        shutil.rmtree(target, ignore_errors=True)
        VENDOR.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive) as tar:
            tar.extractall(VENDOR, filter="data")
        stamp.write_text(digest)
    return VENDOR


def prepare_operator_chart(charts: Path, work: Path) -> Path:
    """The operator chart with its file:// CRDs dependency in charts/, as the role prepares it
    (the vendor directory is read-only, and helm wants the dependency present)."""
    operator = work / "slurm-operator"
    shutil.copytree(charts / "slurm-operator", operator)
    shutil.copytree(charts / "slurm-operator-crds", operator / "charts" / "slurm-operator-crds")
    return operator


def helm_env(home: Path) -> Dict[str, str]:
    """helm's own state (repositories, registry logins, cache) kept out of the user's home."""
    return dict(os.environ, HELM_CACHE_HOME=str(home / "helm-cache"), HELM_CONFIG_HOME=str(home / "helm-config"),
                HELM_DATA_HOME=str(home / "helm-data"))


def helm_template(helm: str, chart: Path, values: Dict[str, Any], tmp_path: Path, name: str = "slurm",
                  namespace: str = "slurm") -> List[Dict[str, Any]]:
    """Render a chart with the given values; return the documents (a render error fails)."""
    values_file = tmp_path / ("%s-values.yaml" % name)
    values_file.write_text(yaml.safe_dump(values))
    done = subprocess.run(
        [helm, "template", name, str(chart), "--namespace", namespace, "--kube-version", KUBE_VERSION,
         "-f", str(values_file)],
        capture_output=True, text=True, timeout=120, check=False,
        env=helm_env(tmp_path),
    )
    assert done.returncode == 0, "helm template %s failed:\n%s" % (chart, done.stderr)
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]
