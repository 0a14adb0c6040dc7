"""A training method's settings: its ``method`` section as one typed object, the one home of its defaults.

Every method's settings class extends :class:`SFTSettings` and adds only what its objective needs, as TRL's
``GKDConfig`` extends ``SFTConfig`` (:class:`~ifdistill.methods.distill.settings.DistillSettings`,
:class:`~ifdistill.methods.onpolicy_distill.settings.OnPolicyDistillSettings`). Hydra composes the section
from the class (:func:`ifdistill.config.store_target_schema`), so a key can be overridden without ``+`` and
the method's YAML states only its choices, its data layer's keys (ICL's ``k``, ``demos``) and ``_target_``.
Training turns the composed section into this object (:func:`ifdistill.train.method.method_settings`) and
gives it to the module's constructor beside what training supplies from the other sections
(:class:`ifdistill.train.method.TrainingInputs`); preflight refuses a key the class does not have. A class
checks its values' ranges in ``__post_init__`` (one line naming the key), which preflight runs on the
composed section, so a value out of range is refused before a run directory exists; choices that depend on
the module class (the divergences a subclass adds) are the method's ``config_problems`` hook.

Plain SFT has no setting of its own: its objective is the completion tokens' cross-entropy, and everything
it is configured with (model, LoRA, optimizer, held-out sets) belongs to other sections.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SFTSettings:
    """Supervised fine-tuning's own settings: none (module docstring)."""
