"""The agent's Containerfile copies everything the agent imports, and installs the rest.

The image holds only what the Containerfile's COPY lines take from the build context (the
collection's root) and the packages its pip line installs; nothing of Ansible. Two checks, no
container runtime needed:

- every import in the agent's code (at the top or inside a function, followed from the module
  the ENTRYPOINT runs) resolves to a file the COPY lines put in the image, or to the standard
  library, or to a package the pip line installs;
- the copied tree, laid out as the image lays it out, starts the agent (``--check-config``) and
  imports its main loop with a Python that sees only the standard library, that tree and those
  packages.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

import pytest

REPO = Path(__file__).resolve().parents[3]
CONTAINERFILE = REPO / "roles" / "health_agent" / "files" / "Containerfile"
# Distribution name (as pip installs it) -> the module it provides.
IMPORT_NAMES = {"nvidia-ml-py": "pynvml", "prometheus-client": "prometheus_client", "PyYAML": "yaml"}


@functools.cache
def instructions() -> Tuple[Tuple[str, str], ...]:
    """(INSTRUCTION, arguments) of the Containerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", CONTAINERFILE.read_text())
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, rest = [*line.split(" ", 1), ""][:2]
            found.append((word.upper(), rest.strip()))
    return tuple(found)  # read once: every import looked up asks for the COPY lines


def copies() -> List[Tuple[Path, str]]:
    """(source in the build context, destination in the image) of each COPY."""
    pairs = []
    for word, rest in instructions():
        if word == "COPY":
            *sources, destination = [arg for arg in shlex.split(rest) if not arg.startswith("--")]
            assert len(sources) == 1, "one source per COPY keeps the layout obvious: %s" % rest
            pairs.append((REPO / sources[0], destination))
    assert pairs, "the Containerfile copies nothing"
    return pairs


def pip_modules() -> Set[str]:
    """The modules of the packages the pip line installs."""
    installed = set()
    for word, rest in instructions():
        if word == "RUN" and "pip install" in rest:
            for name in re.findall(r'"([A-Za-z0-9_.-]+)==', rest):
                assert name in IMPORT_NAMES, "a new package in the Containerfile: add it to IMPORT_NAMES: %s" % name
                installed.add(IMPORT_NAMES[name])
    assert installed, "the Containerfile installs no package"
    return installed


def entrypoint_module() -> str:
    for word, rest in instructions():
        if word == "ENTRYPOINT":
            argv = ast.literal_eval(rest)
            assert argv[:2] == ["python", "-m"], argv
            return argv[2]
    raise AssertionError("the Containerfile has no ENTRYPOINT")


def image_file(module: str) -> Optional[Path]:
    """The file in the build context that the image holds for `module`, if any."""
    for source, destination in copies():
        # /opt/gpufleet-agent/lib/ansible_collections/... -> the dotted prefix it provides.
        match = re.search(r"/lib/(ansible_collections/.+)$", destination)
        assert match, "a COPY outside the image's lib directory: %s" % destination
        prefix = match.group(1).strip("/").replace("/", ".")
        if module != prefix and not module.startswith(prefix + "."):
            continue
        path = source.joinpath(*module[len(prefix):].strip(".").split(".")) if module != prefix else source
        if (path / "__init__.py").is_file():
            return path / "__init__.py"
        if path.with_suffix(".py").is_file():
            return path.with_suffix(".py")
    return None


def imported_names(path: Path, module: str) -> List[str]:
    """Every module (and `from` member) `path` imports, anywhere in its code, as absolute names."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            names.append(origin)
            # `from package import module` names a module; `from module import name` does not.
            names.extend(origin + "." + alias.name for alias in node.names
                         if image_file(origin + "." + alias.name) is not None)
    return names


def agent_closure() -> Tuple[Dict[str, Optional[Path]], Set[str]]:
    """The collection modules the agent reaches (name -> file in the image, None if missing), and
    the top-level names of everything else it imports."""
    ours = "ansible_collections."
    modules: Dict[str, Optional[Path]] = {}
    others: Set[str] = set()
    todo = [entrypoint_module() + ".__main__", entrypoint_module()]
    while todo:
        module = todo.pop()
        if module in modules:
            continue
        modules[module] = image_file(module)
        if modules[module] is None:
            continue
        for name in imported_names(modules[module], module):
            if name.startswith(ours):
                todo.append(name)
            elif name and name != "__future__":
                others.add(name.partition(".")[0])
    return modules, others


def test_every_module_the_agent_imports_is_copied_into_the_image():
    modules = agent_closure()[0]
    assert len(modules) > 10, sorted(modules)  # the walk followed the agent's imports
    missing = sorted(name for name, path in modules.items() if path is None)
    assert not missing, "the agent imports modules its Containerfile does not COPY: %s" % missing


def test_everything_else_it_imports_is_the_standard_library_or_installed():
    others = agent_closure()[1]
    foreign = sorted(others - set(sys.stdlib_module_names) - pip_modules())
    # Ansible above all: the image has none, and the agent must not need it.
    assert not foreign, "the agent imports packages the image does not install: %s" % foreign


def test_the_walk_would_see_a_module_left_out(monkeypatch):
    # The check can fail: with the COPY narrowed to the agent package alone, its siblings are missing.
    narrowed = [(source / "agent", destination + "/agent") for source, destination in copies()]
    monkeypatch.setattr(sys.modules[__name__], "copies", lambda: narrowed)
    modules = agent_closure()[0]
    assert any(path is None for path in modules.values())


def installed_location(module: str) -> Path:
    spec = __import__("importlib.util").util.find_spec(module)
    if spec is None or spec.origin is None:
        pytest.fail("%s is not installed here: make setup installs the agent's packages" % module)
    origin = Path(spec.origin)
    return origin.parent if origin.name == "__init__.py" else origin


def test_the_copied_tree_runs_the_agent_with_only_its_packages(tmp_path):
    lib = tmp_path / "opt" / "gpufleet-agent" / "lib"
    for source, destination in copies():
        target = tmp_path / destination.lstrip("/")
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    # Only the pip line's packages, from this machine's install of the same pins.
    site = tmp_path / "site"
    site.mkdir()
    for module in pip_modules():
        location = installed_location(module)
        (site / location.name).symlink_to(location)
    config = tmp_path / "agent.yml"
    config.write_text("node: gpu-a-001\nkernel_log: {source: none}\nkubernetes: {enabled: false}\n")
    paths = sysconfig.get_paths()
    # -S: no site-packages (this venv's Ansible stays out); -E: no PYTHONPATH from the test run.
    path = os.pathsep.join([str(lib), str(site), paths["stdlib"], paths["platstdlib"],
                            str(Path(paths["stdlib"]) / "lib-dynload")])
    loader = "import sys; sys.path[:] = %r.split(%r); import runpy; sys.argv[0] = 'agent'; " % (path, os.pathsep)
    check = subprocess.run(
        [sys.executable, "-S", "-E", "-c", loader + "sys.argv[1:] = %r; runpy.run_module(%r, run_name='__main__')"
         % (["--config", str(config), "--check-config"], entrypoint_module())],
        capture_output=True, text=True, timeout=60, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    assert '"node": "gpu-a-001"' in check.stdout, check.stdout
    loop = subprocess.run(
        [sys.executable, "-S", "-E", "-c", loader + "import %s.loop; import ansible" % entrypoint_module()],
        capture_output=True, text=True, timeout=60, check=False)
    # The loop imports (pynvml, prometheus_client and all); Ansible is not there to import.
    assert "No module named 'ansible'" in loop.stderr, loop.stdout + loop.stderr
    assert "Traceback" in loop.stderr and loop.stderr.count("No module named") == 1, loop.stderr
