"""A training method's settings: its ``method`` section as one typed object, the one home of its defaults
and of its value checks.

Every method's settings class extends :class:`SFTSettings` and adds only what its objective needs, as TRL's
``GKDConfig`` extends ``SFTConfig`` (the distillation methods' through
:class:`~ifdistill.methods.knowledge_distillation.settings.KDSettings`). Hydra composes the section from the
class (``schema/method_<folder>``, :func:`ifdistill.methods.store_settings_schemas`), so a key can be
overridden without ``+`` and the method's YAML states only its choices, its data layer's keys (ICL's ``k``,
``demos``) and ``_target_``. Training turns the composed section into this object
(:func:`ifdistill.train.method.method_settings`) and gives it to the module's constructor beside what training
supplies from the other sections (:class:`ifdistill.train.method.TrainingInputs`); preflight refuses a key the
class does not have.

A class checks its own values in :meth:`SFTSettings.problems` -- ranges, choices and combinations of its own
fields, one line each starting with the key; a subclass adds its lines to its parent's -- and
``__post_init__`` raises them all (:class:`ifdistill.config.SettingsError`), so no object with a refused value
exists, and preflight reports each line on the composed section before a run directory exists. A rule that
reads another section or the data layer's keys is the method's ``config_problems`` hook
(:class:`ifdistill.train.method.MethodHooks`), the one place for rules across sections.

Plain SFT has no setting of its own: its objective is the completion tokens' cross-entropy, and everything
it is configured with (model, LoRA, optimizer, held-out sets) belongs to other sections.
"""

from __future__ import annotations

from dataclasses import dataclass

from ifdistill.config import SettingsError


@dataclass
class SFTSettings:
    """Supervised fine-tuning's own settings: none (module docstring)."""

    def problems(self) -> list[str]:
        """Every value of these settings that training refuses, one line each starting with its key."""
        return []

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise SettingsError(problems)


def out_of_range(settings: object, checks: tuple[tuple[str, object, str], ...]) -> list[str]:
    """``<key>: must be <what>, got <value>`` for each ``(key, ok, what)`` whose ``ok(value)`` is false: the
    range lines of a :meth:`SFTSettings.problems`."""
    return [f"{key}: must be {what}, got {getattr(settings, key)!r}" for key, ok, what in checks
            if not ok(getattr(settings, key))]  # type: ignore[operator]
