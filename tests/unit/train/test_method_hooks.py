"""A method's light hooks (``<its package>.hooks.HOOKS``) answer as its module class does, and asking them
imports neither torch nor Lightning: preflight refuses a wrong value before any model code loads."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ifdistill.train.method import MethodHooks, method_class, method_hooks

ROOT = Path(__file__).resolve().parents[3]
METHODS = sorted(p.stem for p in (ROOT / "conf" / "method").glob("*.yaml"))
HOOK_NAMES = [name for name, _ in inspect.getmembers(MethodHooks, inspect.ismethod)]


def _section(name: str) -> dict:
    return OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "method" / f"{name}.yaml"))


def test_every_shipped_method_has_light_hooks():
    assert METHODS and HOOK_NAMES  # the glob and the introspection found something to check
    for name in METHODS:
        hooks = method_hooks(_section(name))
        assert hooks.__module__.endswith(".hooks"), (name, hooks)


@pytest.mark.parametrize("name", METHODS)
def test_the_module_class_inherits_its_hooks_unchanged(name):
    """Every hook the class answers is the light module's, so preflight's answer is the training run's."""
    section = _section(name)
    hooks, cls = method_hooks(section), method_class(section)
    assert issubclass(cls, hooks), (cls.__mro__, hooks)
    for hook in HOOK_NAMES:
        assert getattr(cls, hook).__func__ is getattr(hooks, hook).__func__, f"{cls.__name__}.{hook} overrides {hooks.__name__}'s"


def test_asking_the_hooks_imports_no_model_code():
    sections = {name: _section(name) for name in METHODS}
    code = (
        "import json, sys\n"
        "from ifdistill.train.method import method_hooks\n"
        f"for section in {sections!r}.values():\n"
        "    h = method_hooks(section)\n"
        "    h.data_keys(); h.sections()\n"
        "print(json.dumps(sorted(m for m in ('torch', 'lightning', 'transformers') if m in sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == []


def test_a_target_outside_any_hooks_package_answers_through_its_class():
    section = {"_target_": "ifdistill.methods.sft.module.SFTModule"}
    assert method_hooks({"_target_": "tests.unit.train.test_method_hooks.Custom"}) is Custom
    assert method_hooks(section).__name__ == "SFTHooks"


class Custom(MethodHooks):
    """A method whose package has no ``hooks`` module."""
