"""The execution and decision environments: `ansible-builder create` accepts both definitions and
writes a build context that installs the collection, its requirements as ranges and its runtime
system packages; bindep.txt's lab profile is the Makefile's DEBS and never reaches an image.

No image is built here (no container runtime or registry on the CI machine): docs/real-cluster.md.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from bindep.depends import Depends
from packaging.requirements import Requirement

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
RUNTIME_RPM = {"slurm", "munge", "openssl", "iproute", "procps-ng"}


def bindep_names(*profiles):
    rules = Depends((REPO / "bindep.txt").read_text()).active_rules(list(profiles))
    return {rule[0] for rule in rules}


def requirement_lines(path):
    lines = (line.strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A copy of the definitions and the files they name, with the collection tarball built."""
    root = tmp_path_factory.mktemp("environments")
    for name in ("execution-environment.yml", "decision-environment.yml", "requirements.txt", "bindep.txt"):
        shutil.copy(REPO / name, root / name)
    subprocess.run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(root / "build"),
                    str(REPO)], check=True, capture_output=True)
    return root


def create(project, definition, context):
    done = subprocess.run([str(BIN / "ansible-builder"), "create", "-f", str(project / definition),
                           "-c", str(context), "--output-filename", "Containerfile"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return (context / "Containerfile").read_text()


def test_the_execution_environment_installs_the_collection_its_ranges_and_runtime_packages(project, tmp_path):
    context = tmp_path / "ee"
    containerfile = create(project, "execution-environment.yml", context)
    build = context / "_build"
    # The collection from its tarball, installed in the final image.
    (tarball,) = (build / "collection").glob("gpufleet-resilience-*.tar.gz")
    assert "ansible-galaxy collection install --no-deps" in containerfile and "_build/collection/" in containerfile
    assert tarball.stat().st_size > 0
    # Python: the ranges of requirements.txt, never exact pins (they clash with other collections).
    assert requirement_lines(build / "requirements.txt") == requirement_lines(REPO / "requirements.txt")
    # System: the runtime entries reach the image; the lab's never do.
    copied = Depends((build / "bindep.txt").read_text())
    rpm = {rule[0] for rule in copied.active_rules(["platform:rpm", "platform:redhat", "platform:centos"])}
    assert rpm == RUNTIME_RPM, rpm
    # The galaxy collections are galaxy.yml's dependencies.
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())["dependencies"]
    wanted = yaml.safe_load((build / "requirements.yml").read_text())["collections"]
    assert {c["name"]: c["version"] for c in wanted} == galaxy


def test_the_decision_environment_adds_the_rulebook_and_java_to_the_execution_environment(project, tmp_path):
    containerfile = create(project, "decision-environment.yml", tmp_path / "de")
    assert re.search(r"^ARG EE_BASE_IMAGE=.*gpufleet-resilience-ee", containerfile, re.M), containerfile[:2000]
    python = requirement_lines(tmp_path / "de" / "_build" / "requirements.txt")
    assert [Requirement(line).name for line in python] == ["ansible-rulebook"]
    assert "java-17-openjdk-headless [platform:rpm]" in (tmp_path / "de" / "_build" / "bindep.txt").read_text()


def test_requirements_are_ranges_mirrored_in_pyproject_and_the_constraints_pin_inside_them():
    requirements = [Requirement(line) for line in requirement_lines(REPO / "requirements.txt")]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert [str(r) for r in requirements] == [str(Requirement(line)) for line in project["dependencies"]]
    pins = {Requirement(line).name: Requirement(line) for line in requirement_lines(REPO / "constraints.txt")}
    for requirement in requirements:
        assert not any(spec.operator == "==" for spec in requirement.specifier), requirement
        pin = pins[requirement.name]
        (exact,) = pin.specifier
        assert exact.operator == "==" and requirement.specifier.contains(exact.version), (requirement, pin)


def test_bindep_lab_profile_is_the_makefiles_debian_packages():
    makefile = (REPO / "Makefile").read_text()
    debs = re.search(r"^DEBS := ((?:.*\\\n)*.*)$", makefile, re.M).group(1)
    assert bindep_names("platform:dpkg", "lab") == set(debs.replace("\\\n", " ").split())
    # Without the lab profile, a Debian image gets the runtime entries only.
    assert bindep_names("platform:dpkg") == {"slurm-client", "munge", "openssl", "iproute2", "procps"}
