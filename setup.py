"""The packages that ship; setuptools reads everything else about the build from pyproject.toml.

Every package folder below ``ifdistill/`` ships, and so do the top-level ``callbacks/``, ``launchers/`` and
``conf/``, inside the ``ifdistill`` namespace (pyproject.toml's ``package-dir``). They are found, not listed:
a new method's or benchmark's folder ships with no edit here (tests/unit/test_packaging.py).
"""

import tomllib
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent


def packages() -> list[str]:
    """Each ``package -> folder`` of pyproject.toml's ``package-dir`` and every package folder below it."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    found = {name for package, folder in mapping.items()
             for name in (package, *(f"{package}.{sub}" for sub in find_packages(str(ROOT / folder))))}
    return sorted(found)


if __name__ == "__main__":  # how setuptools' build backend runs this file
    setup(packages=packages())
