"""Every default has one home: the code (a schema dataclass, or the constructor a ``_target_`` names).

A YAML file under conf/ that states a key of a section with a code home either states a *choice* (a value
the code does not default to) or *repeats* the code's default. Two homes of one default drift apart:
``timeout_s`` of the checkpoint-eval callback once read 7200 in YAML and 3600 in the constructor, so a
run composed by Hydra and one built in Python timed out differently. So:

- no *defining* file disagrees with the code about a default: a primary config (``train.yaml``,
  ``eval.yaml``) for its plain-data sections, and the one file that names an ``ifdistill.*``
  ``_target_`` (``method/distill.yaml`` for the distillation module, ``callbacks/checkpoint_eval.yaml`` for
  the callback) for that target's arguments. Another value there is a second default, not a choice; an
  option file of a group (``model/qwen3_1.7b.yaml``'s ``dtype: bfloat16``) or a preset states choices;
- no YAML file repeats a code default.

A section with a schema is composed from it: its YAML extends Hydra's ``schema/<section>``
(:func:`ifdistill.config.store_schemas`), and so does a ``_target_`` node whose settings have a dataclass
(:func:`ifdistill.config.store_target_schema`: the checkpoint-eval callback, the SLURM runner, the
distillation methods, the strategy factories; the target's signature reads its defaults from it). The
composed tree still holds every key, with the dataclass's default, and any key can be overridden on the
command line; the run directory's hash, computed from that tree, is the same as when the YAML spelt every
default out (``tests/unit/test_configs.py`` pins it).

Homes, read from the code, never listed here: :data:`ifdistill.config.SCHEMAS` (the plain-data
sections' dataclasses, nested dataclasses included) and the signature of every ``ifdistill.*``
``_target_`` (a method module, the checkpoint-eval callback). Values given by interpolation (``${...}``)
are wiring, not defaults, and are skipped; so is ``_target_`` itself. A code default of ``None`` stands
for "empty" against a YAML ``{}``/``[]``, and for a home further down (``generation=None`` ->
``SamplingSettings()``) against a YAML mapping, which is then not compared: this check does not follow
such a hand-off.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
from pathlib import Path
from typing import Any

import pytest
from omegaconf import DictConfig, ListConfig, OmegaConf

import ifdistill.evaluator.settings  # noqa: F401  (registers the eval schema)
import ifdistill.train.schemas  # noqa: F401  (registers the training sections' schemas)
from ifdistill.config import SCHEMAS

CONF = Path(__file__).resolve().parents[2] / "conf"
MISSING = object()


def _dataclass_defaults(cls: type) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            value = f.default_factory()  # type: ignore[misc]
            out[f.name] = _dataclass_defaults(type(value)) if dataclasses.is_dataclass(value) else value
        elif isinstance(f.type, type) and dataclasses.is_dataclass(f.type):
            out[f.name] = _dataclass_defaults(f.type)
    return out


def _signature_defaults(target: str) -> dict[str, Any] | None:
    module, _, name = target.rpartition(".")
    try:
        obj = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    if dataclasses.is_dataclass(obj):
        return _dataclass_defaults(obj)
    params = inspect.signature(obj).parameters.values()
    return {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}


def _same(yaml_value: Any, code_value: Any) -> bool:
    if code_value is None and yaml_value in ({}, []):
        return True
    if isinstance(code_value, tuple):
        code_value = list(code_value)
    if isinstance(yaml_value, bool) or isinstance(code_value, bool):
        return yaml_value is code_value
    if isinstance(yaml_value, (int, float)) and isinstance(code_value, (int, float)):
        return float(yaml_value) == float(code_value)
    return yaml_value == code_value


def _compare(node: Any, defaults: dict[str, Any], where: str, out: list[tuple[str, str, Any, Any]]) -> None:
    """Append ``(kind, key path, yaml value, code value)`` for each key of ``node`` with a code default."""
    for key in node.keys():
        key = str(key)
        code = defaults.get(key, MISSING)
        if key == "_target_" or code is MISSING:
            continue
        value = node._get_node(key)  # unresolved: an interpolation stays its text
        if isinstance(value, DictConfig) and isinstance(code, dict):
            _compare(value, code, f"{where}.{key}", out)
            continue
        plain = OmegaConf.to_container(value, resolve=False) if isinstance(value, (DictConfig, ListConfig)) \
            else value._value()
        if "${" in repr(plain) or (code is None and isinstance(plain, dict) and plain):
            continue  # wiring, or a home further down (module docstring)
        out.append(("repeats" if _same(plain, code) else "disagrees", f"{where}.{key}", plain, code))


def _choice(row: tuple) -> tuple:
    """A disagreement in a file that does not define the default: a choice."""
    return ("chooses", *row[1:]) if row[0] == "disagrees" else row


def _targets(node: Any, where: str, out: list) -> None:
    """Every ``ifdistill.*`` ``_target_`` node below ``node``, compared with its signature; each row
    carries the target and the node's path as fifth and sixth elements."""
    if not isinstance(node, DictConfig):
        return
    target = node._get_node("_target_")._value() if "_target_" in node else None
    if isinstance(target, str) and target.startswith("ifdistill."):
        defaults = _signature_defaults(target)
        if defaults is not None:
            rows: list = []
            _compare(node, defaults, where, rows)
            out += [(*r, target, where) for r in rows]
    for key in node.keys():
        if key != "_target_":
            _targets(node._get_node(key), f"{where}.{key}", out)


def _package(path: Path) -> str | None:
    """The section a file's top level is (its group's name), '' for a primary config, None for a preset."""
    rel = path.relative_to(CONF)
    first = path.read_text(encoding="utf-8").splitlines()[:1]
    if rel.parts[0] in ("experiment", "hydra") or (first and "@package _global_" in first[0]):
        return None
    return "" if len(rel.parts) == 1 else rel.parts[0]


def _target_files() -> dict[str, list[Path]]:
    """``{target: [files naming it]}`` over conf/."""
    out: dict[str, list[Path]] = {}
    for path in CONF.rglob("*.yaml"):
        for line in path.read_text(encoding="utf-8").splitlines():
            key, _, value = line.strip().partition(":")
            if key == "_target_" and value.strip():
                out.setdefault(value.split("#")[0].strip(), []).append(path)
    return out


@functools.lru_cache(maxsize=1)  # both tests read the same conf/ tree
def findings() -> dict[str, list[tuple[str, str, Any, Any]]]:
    """``{file: [(kind, key, yaml value, code value)]}`` for every non-preset YAML file under conf/;
    ``kind`` is ``repeats``, ``disagrees`` (a defining file: module docstring) or ``chooses``."""
    schemas = {name: _dataclass_defaults(schema) for name, schema in SCHEMAS.items()}
    sole = {t: files[0] for t, files in _target_files().items() if len(files) == 1}
    out: dict[str, list] = {}
    for path in sorted(CONF.rglob("*.yaml")):
        section = _package(path)
        if section is None:
            continue
        node = OmegaConf.load(path)
        if not isinstance(node, DictConfig):
            continue
        found: list = []
        tops = {section: node} if section else {str(k): node._get_node(k) for k in node.keys() if k != "defaults"}
        for name, sub in tops.items():
            if isinstance(sub, DictConfig):
                if name in schemas:
                    rows: list = []
                    _compare(sub, schemas[name], name, rows)
                    found += [_choice(r) if section else r for r in rows]  # a primary config defines
                rows = []  # the sole file naming a target defines its defaults where the target is the file's
                _targets(sub, name, rows)  # own section (method/distill.yaml) or its one entry (callbacks)
                found += [r if sole.get(r[4]) == path and r[5].count(".") <= 1 else _choice(r) for r in rows]
        found = [r[:4] for r in found]
        if found:
            out[str(path.relative_to(CONF.parent))] = found
    return out


def test_no_yaml_default_disagrees_with_its_code_home():
    disagree = {f: [(k, y, c) for kind, k, y, c in rows if kind == "disagrees"] for f, rows in findings().items()}
    disagree = {f: rows for f, rows in disagree.items() if rows}
    assert not disagree, "YAML defaults that differ from the code's (key, yaml, code): " + repr(disagree)


def test_no_yaml_file_repeats_a_code_default():
    repeats = {f: [(k, y) for kind, k, y, c in rows if kind == "repeats"] for f, rows in findings().items()}
    repeats = {f: rows for f, rows in repeats.items() if rows}
    assert not repeats, "YAML values equal to the code's default (say it once, in the code): " + repr(repeats)


def test_the_check_sees_a_repeat_and_a_disagreement(tmp_path, monkeypatch):
    """The comparison itself: a callback section repeating one default and contradicting another."""
    from callbacks.checkpoint_eval import CheckpointEvalCallback

    defaults = _signature_defaults("ifdistill.callbacks.checkpoint_eval.CheckpointEvalCallback")
    assert defaults == _signature_defaults(f"{CheckpointEvalCallback.__module__}.CheckpointEvalCallback")
    node = OmegaConf.create({"_target_": "ifdistill.callbacks.checkpoint_eval.CheckpointEvalCallback",
                             "retries": defaults["retries"], "max_running": defaults["max_running"] + 1,
                             "eval_cfg": "${eval}"})
    found: list = []
    _targets(node, "checkpoint_eval", found)
    assert sorted((kind, key) for kind, key, *_ in found) == [("disagrees", "checkpoint_eval.max_running"),
                                                               ("repeats", "checkpoint_eval.retries")]


def test_a_key_only_the_schema_states_is_in_the_tree_and_overridable():
    """``run.max_skipped_steps`` appears in no YAML file (``optim.warmup_steps`` in presets only): the composed
    tree has them at the dataclass's default, and an override sets them without ``+``."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from ifdistill.evaluator.settings import GenerationSettings
    from ifdistill.train.schemas import OptimSchema, RunSchema

    for path in CONF.rglob("*.yaml"):
        assert "max_skipped_steps" not in path.read_text(encoding="utf-8"), path
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=["paths.output_dir=/tmp/x", "eval=ifeval"])
        assert cfg.run.max_skipped_steps == RunSchema.max_skipped_steps
        assert cfg.optim.warmup_steps == OptimSchema.warmup_steps
        assert cfg.eval.generation.max_new_tokens == GenerationSettings.max_new_tokens  # ifeval.yaml states none
        assert compose("train", overrides=["paths.output_dir=/tmp/x", "run.max_skipped_steps=7"]).run.max_skipped_steps == 7
