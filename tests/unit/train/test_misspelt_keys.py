"""A misspelt key in any section of ``ifdistill-train``'s config, under any method, is refused by preflight:
before a model, a Trainer or a run directory exists, as one :class:`ConfigError` (printed by the CLI as one
line, exit 2) that names the key.

The sections are read from the composed config, not listed here: a new section is covered when it lands.
A misspelt group option or a key without ``+`` is Hydra's composition error, refused even earlier
(tests/unit/test_command_line.py runs those through the real console script), except under a node composed
from a ``_target_``'s dataclass (``ifdistill.config.store_target_schema``: open to Hydra's keys and wiring),
whose keys preflight checks here against the target.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf, open_dict

from ifdistill.command_line import compose
from ifdistill.config import ConfigError
from ifdistill.cli.train import user_errors
from ifdistill.train.config_edge import train_config
from ifdistill.train.method import SUPPLIED_BY_TRAINING
from ifdistill.train.preflight import PreflightError

CONF = Path(__file__).resolve().parents[3] / "conf"
METHODS = sorted(p.stem for p in (CONF / "method").glob("*.yaml"))
BASE = ["paths.output_dir=/nonexistent/compose-only", "run.name=misspelt"]
TYPO = "kdratio"  # a key no section has


@functools.lru_cache(maxsize=None)
def _composed(method: str) -> DictConfig:
    """The default config under ``method``, with the checkpoint-eval callback (a callback section to test)."""
    return compose("train", [*BASE, f"method={method}", "callbacks=checkpoint_eval"])


def _sections() -> list[str]:
    """Every section of the composed config that is a mapping (``seed`` is a value), and every callback."""
    cfg = _composed("sft")
    return [str(k) for k in cfg.keys() if isinstance(cfg[k], DictConfig)] + [f"callbacks.{n}" for n in cfg.callbacks]


def _refusal(method: str, section: str) -> str:
    """Preflight's message for ``+<section>.kdratio=0.3`` (the key added as ``+`` adds it) under ``method``."""
    cfg = copy.deepcopy(_composed(method))
    with open_dict(cfg):
        OmegaConf.update(cfg, f"{section}.{TYPO}", 0.3, force_add=True)
    with pytest.raises(PreflightError) as err:
        train_config(cfg, check_model=False)
    return str(err.value)


def test_preflight_errors_are_the_clis_one_line_errors():
    assert issubclass(PreflightError, ConfigError) and ConfigError in user_errors()


@pytest.mark.parametrize("section", _sections())
def test_a_misspelt_key_in_every_section_is_refused_by_name(section):
    message = _refusal("sft", section)
    assert TYPO in message and "\n" not in message, message


@pytest.mark.parametrize("method", METHODS)
def test_a_misspelt_method_key_is_refused_by_name_under_every_method(method):
    message = _refusal(method, "method")
    assert TYPO in message and "\n" not in message, message
    # without +: every method's section is composed from its settings class (ifdistill/methods/sft/settings.py),
    # open to the data layer's keys, so the key composes and preflight refuses it against that class
    with pytest.raises(PreflightError) as err:
        train_config(compose("train", [*BASE, f"method={method}", f"method.{TYPO}=0.3"]), check_model=False)
    assert str(err.value) == message


@pytest.mark.parametrize("key", sorted(SUPPLIED_BY_TRAINING))
def test_a_method_section_setting_what_training_supplies_is_refused(key):
    """``+method.seed=7`` would be replaced by the top-level seed unseen (while the run's hash counted it):
    refused, naming the key and where its value comes from, under every method."""
    for method in METHODS:
        cfg = copy.deepcopy(_composed(method))
        with open_dict(cfg):
            OmegaConf.update(cfg, f"method.{key}", 7, force_add=True)
        with pytest.raises(PreflightError) as err:
            train_config(cfg, check_model=False)
        message = str(err.value)
        assert f"method.{key}: training supplies it from {SUPPLIED_BY_TRAINING[key]}" in message, message
        assert "\n" not in message and "unknown key" not in message, message  # one problem, not also an unknown key


def _nested_targets(node, where: str) -> list[str]:
    """Paths of the mappings with a ``_target_`` below the top of ``node`` (a section)."""
    out = []
    for key, value in node.items():
        if isinstance(value, DictConfig):
            path = f"{where}.{key}"
            out += ([path] if "_target_" in value else []) + _nested_targets(value, path)
    return out


def test_a_misspelt_key_of_a_nested_target_is_refused_by_name():
    """``callbacks.checkpoint_eval.runner`` (a SLURM runner) is built by the callback, after the run directory
    exists: its keys are checked against its own ``_target_`` up front, with or without ``+`` (the runner's
    node is composed from its dataclass, open to keys Hydra would refuse elsewhere)."""
    cfg = compose("train", [*BASE, "callbacks=checkpoint_eval_slurm", f"callbacks.checkpoint_eval.runner.{TYPO}=1"])
    nested = _nested_targets(cfg.callbacks, "callbacks")
    assert "callbacks.checkpoint_eval.runner" in nested
    with pytest.raises(PreflightError) as err:
        train_config(cfg, check_model=False)
    message = str(err.value)
    assert f"callbacks.checkpoint_eval.runner: unknown key {TYPO}" in message and "\n" not in message, message


def test_an_argument_only_python_can_give_is_refused_by_name_and_not_offered():
    """The checkpoint-eval callback's ``command_builder`` is a function (tests, back-fill): a YAML value would
    reach the callback as a string. Refused by name; an unknown key's "known:" list leaves it out."""
    cfg = compose("train", [*BASE, "callbacks=checkpoint_eval", "+callbacks.checkpoint_eval.command_builder=x"])
    with pytest.raises(PreflightError) as err:
        train_config(cfg, check_model=False)
    assert "callbacks.checkpoint_eval.command_builder: an argument for a Python caller" in str(err.value)
    assert "\n" not in str(err.value) and "unknown key" not in str(err.value)
    message = _refusal("sft", "callbacks.checkpoint_eval")
    assert f"unknown key {TYPO}" in message and "max_running" in message and "command_builder" not in message


@pytest.mark.parametrize("overrides, says", [
    (["method=distill", "method.kl=bogus"], "method.kl: must be one of"),
    (["method=distill", "method.kd_ratio=2"], "method.kd_ratio: must be in [0, 1]"),
    (["method=distill", "method.teacher=separate"], "method.teacher=separate needs teacher_model"),
    (["method=distill", "method.temperature=0"], "method.temperature: must be > 0"),
    (["method=distill", "method.kl=jsd", "method.beta=1.5"], "method.beta: must be in (0, 1)"),
    (["method=distill", "method.topk=0"], "method.topk: must be null (the full vocabulary) or >= 1"),  # not "off"
    (["method=distill", "method.cache_k=0"], "method.cache_k: must be >= 1"),
    (["method=distill", "method.cache_claim_expiry_s=0"], "method.cache_claim_expiry_s: must be > 0"),
    (["method=onpolicy_distill", "+method.topk=0"], "method.topk: must be null"),
    (["method=onpolicy_distill", "method.temperature=-1"], "method.temperature: must be > 0"),
    (["method=onpolicy_distill", "method.sample_table_rows=-1"], "method.sample_table_rows: must be >= 0"),
    (["method=onpolicy_distill", "method.min_eos_rate=2"], "method.min_eos_rate: must be in [0, 1]"),
    (["method=onpolicy_distill", "method.eos_patience=0"], "method.eos_patience: must be >= 1"),
    (["method=onpolicy_distill", "method.on_eos_collapse=panic"], "method.on_eos_collapse: must be one of warn, stop"),
    (["method=onpolicy_distill", "method.lmbda=1.5"], "method.lmbda: must be in [0, 1]"),
    (["callbacks=checkpoint_eval", "callbacks.checkpoint_eval.policy=bogus"],
     "callbacks.checkpoint_eval.policy: must be"),
    (["callbacks=checkpoint_eval", "callbacks.checkpoint_eval.engine=bogus"],
     "callbacks.checkpoint_eval.engine must be process or persistent"),
    (["callbacks=checkpoint_eval", "callbacks.checkpoint_eval.max_running=0"], "callbacks.checkpoint_eval.max_running:"),
    (["callbacks=checkpoint_eval", "callbacks.checkpoint_eval.every_n_steps=0"], "callbacks.checkpoint_eval.every_n_steps:"),
    (["callbacks=checkpoint_eval", "callbacks.checkpoint_eval.final_wait_s=-1"], "callbacks.checkpoint_eval.final_wait_s:"),
    (["callbacks=checkpoint_eval_slurm", "callbacks.checkpoint_eval.runner.time_min=-5"],
     "callbacks.checkpoint_eval.runner.time_min: must be at least 1"),
    (["trainer=deepspeed_stage_2", "trainer.strategy.stage=5"], "trainer.strategy.stage:"),
    (["trainer=deepspeed_stage_3", "trainer.strategy.offload_parameters=disk"], "trainer.strategy.offload_parameters:"),
])
def test_a_value_the_settings_refuse_is_refused_before_anything_is_built(overrides, says):
    """Range and choice checks live in the settings dataclasses (their problems(), every line), which
    the objects' constructors run too; preflight runs them on the composed tree, so such a value is one line,
    exit 2, before a run directory exists (each once made the directory, then failed as the object was built)."""
    cfg = compose("train", [*BASE, *overrides])
    with pytest.raises(PreflightError) as err:
        train_config(cfg, check_model=False)
    message = str(err.value)
    assert says in message and "\n" not in message, message


@pytest.mark.parametrize("overrides", [
    ["callbacks=checkpoint_eval", "callbacks.checkpoint_eval.final_wait_s=0"],  # list what is missing, no wait
    ["callbacks=checkpoint_eval", "callbacks.checkpoint_eval.every_n_steps=null"],  # at the end only
    ["callbacks=checkpoint_eval", "callbacks.checkpoint_eval.max_pending=0", "callbacks.checkpoint_eval.retries=0"],
    ["callbacks=checkpoint_eval_slurm", "callbacks.checkpoint_eval.runner.gpus=0"],
    ["trainer=deepspeed_stage_3_offload"],
    ["method=distill", "method.kd_ratio=0", "method.topk=1", "method.cache_k=1"],
    ["method=distill", "method.kd_ratio=1", "method.kl=jsd", "method.beta=0.01"],
    ["method=onpolicy_distill", "method.lmbda=0", "method.min_eos_rate=1", "method.sample_table_rows=0",
     "method.ema_decay=0", "method.eos_patience=1"],
    ["method=onpolicy_distill", "method.lmbda=1", "+method.topk=1"],
])
def test_the_edges_of_each_range_are_accepted(overrides):
    """The values at the edge of what the settings allow pass preflight: a check must not refuse a setting
    that works (final_wait_s=0 once did, and two integration tests use it)."""
    train_config(compose("train", [*BASE, *overrides]), check_model=False)


def test_a_callback_section_setting_what_training_supplies_is_refused():
    """``+callbacks.checkpoint_eval.run=abc`` was replaced by the run training starts, unseen (the run's
    config.yaml recorded it): refused by name, as a method section's ``seed`` is."""
    cfg = compose("train", [*BASE, "callbacks=checkpoint_eval", "+callbacks.checkpoint_eval.run=abc"])
    with pytest.raises(PreflightError) as err:
        train_config(cfg, check_model=False)
    message = str(err.value)
    assert "callbacks.checkpoint_eval.run: training supplies it" in message and "\n" not in message, message
