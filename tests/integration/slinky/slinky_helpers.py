"""Helpers of the Slinky tests: where the upstream charts are, and helm template."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Dict, List

import yaml
from lab_harness import REPO

CACHE_DIR = Path(os.environ.get("GPUFLEET_CACHE_DIR") or Path.home() / ".cache" / "gpufleet")
# SchedMD's charts, unmodified, at the tags the collection supports (see its README.md).
VENDOR = REPO.parent / "shared" / "vendor" / "slinky"
CHART_VERSIONS = ("1.1.2", "1.2.1")
# The oldest Kubernetes the charts accept (their kubeVersion); helm template's default is older.
KUBE_VERSION = "1.29.0"


def chart_dir(version: str) -> Path:
    return VENDOR / ("v" + version) / "helm"


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
