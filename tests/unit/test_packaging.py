"""The user's top-level folders ship inside the ifdistill namespace, and importing is offline."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support import require

ROOT = Path(__file__).resolve().parents[2]


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_folder_ships():
    """setup.py finds the packages: each folder with an ``__init__.py`` below a folder of the mapping, so a
    new method's or benchmark's folder ships without a list to edit."""
    import runpy

    mapping = _pyproject()["tool"]["setuptools"]["package-dir"]
    found = set()
    for pkg, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([pkg, *rel.parts]))
    assert "packages" not in _pyproject()["tool"]["setuptools"]  # one home: setup.py's
    shipped = set(runpy.run_path(str(ROOT / "setup.py"), run_name="setup")["packages"]())
    assert {"ifdistill.methods.sft", "ifdistill.callbacks", "ifdistill.conf"} <= shipped
    assert found == shipped, f"shipped packages differ from folders: {found ^ shipped}"


@pytest.mark.parametrize("name,folder", [("ifdistill.callbacks", "callbacks"),
                                         ("ifdistill.launchers", "launchers"),
                                         ("ifdistill.conf", "conf")])
def test_top_level_folders_import_under_the_namespace(name, folder):
    import importlib

    mod = importlib.import_module(name)
    assert Path(mod.__file__).resolve().parent == (ROOT / folder).resolve()


# An audit hook that refuses every socket operation: a network access during import raises.
_NO_NET = """
import sys
def hook(event, args):
    if event.startswith(("socket.", "urllib.")) and event != "socket.__new__":
        raise RuntimeError(f"network access during import: {event} {args!r:.200}")
sys.addaudithook(hook)
import ifdistill, ifdistill.paths, ifdistill.config, ifdistill.models
print("ok")
"""


def test_import_touches_no_network_audit_hook():
    out = subprocess.run([sys.executable, "-c", _NO_NET], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_import_works_without_any_network_namespace():
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True)
    require(probe.returncode == 0, "unshare -n is not permitted here (needs root or user namespaces)")
    out = subprocess.run(["unshare", "-n", sys.executable, "-c", "import ifdistill; print('ok')"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
