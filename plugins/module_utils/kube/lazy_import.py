# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Load the ``kubernetes`` package's client classes when first used, not all at import.

``import kubernetes`` runs ``kubernetes/client/__init__.py``, which imports every API class and
every model of the Kubernetes API: about 800 modules, 0.25-0.3 s of CPU in each module run that
talks to the API server, while a module uses a handful of them (measured on the lab: a CoreV1Api,
a node list and a ConfigMap list cost 0.45 s with the eager import and 0.22 s with this one).

``install()`` puts three package objects in ``sys.modules`` in place of ``kubernetes``,
``kubernetes.client`` and ``kubernetes.client.models``: their ``__init__`` files are not run, and
each name that ``__init__`` would have imported (``from kubernetes.client.api.core_v1_api import
CoreV1Api``) is imported when it is first looked up. The names come from the ``__init__`` files'
own ``from ... import ...`` lines, so a newer release of the package is read the same way. Every
other submodule (``kubernetes.config``, ``kubernetes.watch``) is a normal package under the
lazy root and imports as before.

Nothing is changed when ``kubernetes`` is imported already (a test process) or cannot be found,
or when an ``__init__`` holds anything but those import lines: then the package imports as usual.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import re
import sys
import types
from typing import Dict, Optional

# Matched whole (fullmatch) against each line of a generated __init__.
_FROM = re.compile(r"from (kubernetes\.client\.[\w.]+) import (\w+)")
_VERSION = re.compile(r"__version__ = [\"']([^\"']+)[\"']")
# What a generated __init__ holds besides its imports (and its docstring).
_IGNORED = re.compile(r"#.*|\s*|from __future__ import \w+")


def _names(init_file: str) -> Optional[Dict[str, str]]:
    """{name: module} from an ``__init__`` made of ``from MODULE import NAME`` lines; None when it
    holds anything else (a statement this reader does not know), so the caller imports eagerly."""
    names: Dict[str, str] = {}
    try:
        with open(init_file, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    in_docstring = False
    for line in lines:
        if line.count('"""') % 2 == 1:
            in_docstring = not in_docstring
            continue
        if in_docstring or _IGNORED.fullmatch(line) or _VERSION.fullmatch(line):
            continue
        found = _FROM.fullmatch(line)
        if found is None:
            return None
        names[found.group(2)] = found.group(1)
    return names


def _lazy_package(name: str, directory: str, names: Dict[str, str], version: Optional[str] = None) -> types.ModuleType:
    package = types.ModuleType(name)
    package.__path__ = [directory]
    package.__file__ = os.path.join(directory, "__init__.py")
    package.__package__ = name
    package.__spec__ = importlib.machinery.ModuleSpec(name, None, origin=package.__file__, is_package=True)
    package.__spec__.submodule_search_locations = [directory]
    if version is not None:
        package.__version__ = version

    def __getattr__(attr: str):
        where = names.get(attr)
        if where is None:
            if attr.startswith("__"):
                raise AttributeError(attr)
            try:  # a subpackage, as "from kubernetes import config" finds it
                return importlib.import_module("%s.%s" % (name, attr))
            except ModuleNotFoundError:
                raise AttributeError("module %r has no attribute %r" % (name, attr)) from None
        value = getattr(importlib.import_module(where), attr)
        setattr(package, attr, value)
        return value

    package.__getattr__ = __getattr__  # type: ignore[method-assign]
    return package


def _version(init_file: str) -> Optional[str]:
    try:
        with open(init_file, encoding="utf-8") as handle:
            for line in handle:
                found = _VERSION.fullmatch(line.strip())
                if found:
                    return found.group(1)
    except OSError:
        return None
    return None


def install() -> bool:
    """Put the lazy packages in place; True when they were installed, False when ``kubernetes``
    imports as usual (imported already, not found, or an ``__init__`` this reader does not know)."""
    if "kubernetes" in sys.modules:
        return False
    spec = importlib.machinery.PathFinder.find_spec("kubernetes")
    if spec is None or not spec.submodule_search_locations:
        return False
    root = next(iter(spec.submodule_search_locations))
    client_dir = os.path.join(root, "client")
    models_dir = os.path.join(client_dir, "models")
    client_names = _names(os.path.join(client_dir, "__init__.py"))
    model_names = _names(os.path.join(models_dir, "__init__.py"))
    if not client_names or not model_names:
        return False
    packages = [
        _lazy_package("kubernetes", root, {}, _version(os.path.join(root, "__init__.py"))),
        _lazy_package("kubernetes.client", client_dir, client_names, _version(os.path.join(client_dir, "__init__.py"))),
        _lazy_package("kubernetes.client.models", models_dir, model_names),
    ]
    for package in packages:
        sys.modules[package.__name__] = package
    packages[0].client = packages[1]
    packages[1].models = packages[2]
    return True
