"""Training methods that are units: one folder each (module, batch construction, config checks, teacher
handling) and one ``conf/method/<name>.yaml``. The contract a method meets is
:mod:`ifdistill.train.method`; SFT (:mod:`ifdistill.methods.sft`) holds the base class every method
subclasses; :mod:`ifdistill.methods.knowledge_distillation` the base both distillation methods extend,
off-policy (:mod:`ifdistill.methods.distill`) and on-policy (:mod:`ifdistill.methods.onpolicy_distill`).

A folder is a method when its ``hooks`` module names the method's hooks (``HOOKS``); nothing else lists it.
:func:`store_settings_schemas` (run as ``ifdistill.conf`` imports) registers each one's settings class
(``HOOKS.settings_class``) as Hydra's ``schema/method_<folder>``, which its YAML extends. Importing this
package imports none of them.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from pathlib import Path

HOME = __name__
_HOME_DIR = Path(__file__).parent


def method_hooks_by_folder() -> dict[str, type]:
    """``{folder: HOOKS}`` of every folder of this package whose ``hooks`` module names its hooks, in name
    order (a shared base's folder has none)."""
    from ifdistill.train.method import MethodHooks

    found = {}
    for info in sorted(pkgutil.iter_modules([str(_HOME_DIR)]), key=lambda i: i.name):
        if info.ispkg and importlib.util.find_spec(f"{HOME}.{info.name}.hooks") is not None:
            hooks = getattr(importlib.import_module(f"{HOME}.{info.name}.hooks"), "HOOKS", None)
            if isinstance(hooks, type) and issubclass(hooks, MethodHooks):
                found[info.name] = hooks
    return found


def schema_name(folder: str) -> str:
    """The Hydra config a method's YAML extends: ``schema/method_<folder>``."""
    return f"method_{folder}"


def store_settings_schemas() -> None:
    """Each method's settings class as Hydra's ``schema/method_<folder>``
    (:func:`ifdistill.config.store_target_schema`): the one home of its defaults, which its YAML extends
    (``defaults: [/schema@_here_: method_<folder>, _self_]``)."""
    from ifdistill.config import store_target_schema

    for folder, hooks in method_hooks_by_folder().items():
        store_target_schema(schema_name(folder), hooks.settings_class)
