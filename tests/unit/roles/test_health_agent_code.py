"""The systemd backend copies only the agent's import closure to the node: is the list complete?

roles/health_agent/vars/main.yml names the module_utils packages the node gets. This test walks
the agent's imports (every ``from ...module_utils.X import`` in every file it reaches) and checks
that each file it reaches is in a package the role copies, so an import added to the agent fails
here rather than on a node. The molecule scenario runs the copied agent with nothing else on
its path, which checks the same from the other side.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Optional, Set

import yaml

REPO = Path(__file__).resolve().parents[3]
MODULE_UTILS = REPO / "plugins" / "module_utils"
PREFIX = "ansible_collections.gpufleet.resilience.plugins.module_utils."


def imported(source: Path) -> Set[str]:
    """Dotted module_utils names that ``source`` imports (module, and module.name for from-imports)."""
    names = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PREFIX):
            base = node.module[len(PREFIX):]
            names.add(base)
            names.update("%s.%s" % (base, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name[len(PREFIX):] for a in node.names if a.name.startswith(PREFIX))
    return names


def source_of(dotted: str) -> Optional[Path]:
    path = MODULE_UTILS / dotted.replace(".", "/")
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def closure(start: Set[Path]) -> Set[Path]:
    seen: Set[Path] = set()
    todo = list(start)
    while todo:
        source = todo.pop()
        if source in seen:
            continue
        seen.add(source)
        for dotted in imported(source):
            parts = dotted.split(".")
            for depth in range(1, len(parts) + 1):  # the module and every package above it
                found = source_of(".".join(parts[:depth]))
                if found is not None and found not in seen:
                    todo.append(found)
    return seen


def test_the_role_copies_every_module_the_agent_imports():
    packages = yaml.safe_load((REPO / "roles" / "health_agent" / "vars" / "main.yml").read_text())[
        "health_agent__code_packages"]
    reached = closure(set((MODULE_UTILS / "agent").glob("*.py")))
    tops = {p.relative_to(MODULE_UTILS).parts[0] for p in reached}
    assert tops <= set(packages), "the agent imports %s; add them to health_agent__code_packages" % (
        sorted(tops - set(packages)))
    # And nothing more than it needs: the chaos engine and the reports stay on the controller.
    assert set(packages) == tops


def test_the_walk_follows_imports_across_packages():
    # The agent reaches health (verdicts) through its own modules and kube through its client.
    reached = {p.relative_to(MODULE_UTILS).parts[0] for p in closure({MODULE_UTILS / "agent" / "loop.py"})}
    assert {"agent", "health", "kube"} <= reached
