"""SFT's hooks (:class:`ifdistill.train.method.MethodHooks`): the defaults every method starts from.

A method's ``hooks.py`` holds what preflight and the data layer ask of it before any model exists; it
imports neither torch nor Lightning, so a wrong value in a config is refused in about the time Python
takes to start (:func:`ifdistill.train.method.method_hooks`). The module class inherits these hooks.
"""

from __future__ import annotations

from ifdistill.methods.sft.settings import SFTSettings
from ifdistill.train.method import MethodHooks


class SFTHooks(MethodHooks):
    """Supervised fine-tuning reads plain SFT items and needs no section besides ``method``."""

    settings_class = SFTSettings


HOOKS = SFTHooks
