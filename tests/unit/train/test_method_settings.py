"""A method's ``method`` section becomes its settings object (ifdistill/methods/sft/settings.py): what the
module's constructor receives beside ``TrainingInputs``, with no key of the section lost or added."""

from __future__ import annotations

import dataclasses

from ifdistill.command_line import compose
from ifdistill.config import WHEN_SET
from ifdistill.methods.distill.settings import DistillSettings
from ifdistill.methods.onpolicy_distill.settings import OnPolicyDistillSettings
from ifdistill.methods.sft.settings import SFTSettings
from ifdistill.train.config_edge import train_config
from ifdistill.train.method import HYDRA_KEYS, method_hooks, method_settings

BASE = ["paths.output_dir=/nonexistent/compose-only"]


def _section(*overrides: str) -> dict:
    return dict(train_config(compose("train", [*BASE, *overrides]), check_model=False).method)


def test_each_shipped_section_becomes_its_settings_object_without_loss():
    """Every key of the composed section is a field of the object (with the section's value) or a key the
    data layer or Hydra reads; every field is a key of the section, but one composed only when set."""
    for method, cls in (("sft", SFTSettings), ("distill", DistillSettings),
                        ("onpolicy_distill", OnPolicyDistillSettings)):
        section = _section(f"method={method}", "method.kd_ratio=0.25" if method != "sft" else "seed=1")
        settings = method_settings(section)
        assert type(settings) is cls and isinstance(settings, SFTSettings)  # each extends SFT's
        values = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)
                  if f.name in section or not f.metadata.get(WHEN_SET)}
        elsewhere = HYDRA_KEYS | set(method_hooks(section).data_keys())
        assert {k: v for k, v in section.items() if k not in elsewhere} == values, method
        if method != "sft":
            assert settings.kd_ratio == 0.25


def test_a_setting_composed_only_when_set_reaches_the_object_when_given():
    """On-policy's ``topk`` is not in the composed section (the shipped hashes stay), and ``+method.topk=4``
    gives it; the object has the field either way."""
    plain = _section("method=onpolicy_distill")
    assert "topk" not in plain and method_settings(plain).topk is None
    given = _section("method=onpolicy_distill", "+method.topk=4")
    assert given["topk"] == 4 and method_settings(given).topk == 4
