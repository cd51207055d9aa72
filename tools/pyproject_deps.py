#!/usr/bin/env python
"""Print the pinned requirements of pyproject.toml, one per line, for pip -r."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path


def main() -> None:
    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
    extras = sys.argv[1:] or ["dev"]
    requirements = list(project["dependencies"])
    for extra in extras:
        requirements += project["optional-dependencies"][extra]
    print("\n".join(requirements))


if __name__ == "__main__":
    main()
