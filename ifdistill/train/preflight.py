"""Everything about a training config that can be checked without a model, checked before anything loads.

A wrong value must cost seconds and one line, not a model load, a Lightning start-up, a 60-line
traceback and a run directory that ``ifdistill-status`` then lists as stopped. :func:`preflight` runs
first in :func:`ifdistill.train.run.train` (and so before the run directory is created) and checks:

- the plain-data sections against their schemas (unknown keys, types: :func:`ifdistill.config.check_sections`)
  and top-level keys against :data:`TOP_LEVEL` and the sections the method reads (``+foo=1`` is a typo, not a setting);
- the keys of every section that builds an object (``trainer``, ``method``, ``logger``, each callback)
  against the signature of its ``_target_`` -- ``+trainer.max_stepz=5`` fails here, naming the key;
- ranges (:func:`check_ranges`, each section's from its dataclass): ``data.ratio`` in [0, 1), ``optim.lr``
  > 0, ``trainer.max_steps`` >= 1, ``trainer.devices`` >= 1, batch sizes and cadences >= 1, ...;
- the data: the ``data`` section resolves with ``method`` and ``model`` (:meth:`DataConfig.resolve`), there is at least one new-data
  source, and each local source file exists and its first :data:`SAMPLE_ROWS` rows load with the same
  loader training uses (:func:`ifdistill.data.sources.load_source`), so a malformed row is named by file,
  line and field; a file without rows is an error;
- ``data.heldout`` leaves training examples in every local source (counted with the same loader);
- the model: a hub id is in the local cache or reachable (:func:`ifdistill.models.check_model_available`).

All problems found are reported together in one :class:`PreflightError` (one line, ``; ``-separated);
the checks that import heavy modules (the ``_target_`` classes) or reach the hub run only when the
cheap ones passed, so the common mistakes are reported in about the time Python takes to start.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ifdistill.config import ConfigError, Range, check_sections, is_int, lookup, range_problems
from ifdistill.train.strategy_settings import strategy_name

SAMPLE_ROWS = 50  # rows of each local data file loaded (and so validated) before training starts
# Top-level keys of conf/train.yaml and its groups; anything else is a typo (`+lr=1e-3`).
TOP_LEVEL = frozenset({"task_name", "seed", "gradient_checkpointing", "logit_chunk_size", "optim", "datamodule", "run",
                       "kernels", "callbacks", "paths", "model", "data", "method", "peft", "trainer", "logger", "eval", "hydra"})
# (+ the sections the method reads, MethodHooks.sections: off-policy distillation's teacher_pass)
# Sections built by Hydra's instantiate, checked against their _target_'s signature.
TARGETS = ("trainer", "method", "logger")


class PreflightError(ConfigError):
    """The config cannot train; the message lists every problem found, each naming its key or file."""


def _devices_ok(v: Any) -> bool:
    if v == "auto" or (isinstance(v, (list, tuple)) and v):
        return True
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        v = int(v)
    if isinstance(v, str):  # "0,1": explicit device ids
        return bool(v.strip(" ,"))
    return is_int(v) and (v >= 1 or v == -1)


#: The ranges of ``trainer``, Lightning's Trainer arguments (no dataclass of ifdistill's holds them); the
#: plain-data sections' are their dataclasses' ``ranges`` (:func:`check_ranges`).
TRAINER_RANGES: tuple[Range, ...] = (
    ("max_steps", lambda v: is_int(v) and v >= 1, "an integer >= 1 (optimizer steps to train)"),
    ("devices", _devices_ok, "an integer >= 1 (or -1, 'auto', a list of device ids)"),
    ("num_nodes", lambda v: is_int(v) and v >= 1, "an integer >= 1"),
    ("accumulate_grad_batches", lambda v: is_int(v) and v >= 1, "an integer >= 1"),
    ("log_every_n_steps", lambda v: is_int(v) and v >= 1, "an integer >= 1"),
)


def check_ranges(tree: Mapping[str, Any]) -> list[str]:
    """Each section's values against its ranges: a plain-data section's dataclass holds them (``ranges``:
    ``data``'s :class:`~ifdistill.data.build.DataConfig`, ``optim``, ``datamodule`` and ``run``'s schemas), the
    trainer's are :data:`TRAINER_RANGES`; a key the tree does not hold is not checked."""
    from ifdistill.data.build import DataConfig
    from ifdistill.train.schemas import SCHEMAS

    homes = {"data": DataConfig.ranges, "trainer": TRAINER_RANGES,
             **{name: schema.ranges for name, schema in SCHEMAS.items() if hasattr(schema, "ranges")}}
    return [problem for name, ranges in homes.items() if isinstance(tree.get(name), Mapping)
            for problem in range_problems(tree[name], ranges, name)]


def check_target_keys(node: Any, name: str) -> list[str]:
    """Keys of ``node`` that its ``_target_``'s constructor does not accept (none if it takes **kwargs) and
    values its settings dataclass refuses (:func:`ifdistill.config.settings_problems`), and so on for every
    ``_target_`` node below it (``callbacks.checkpoint_eval.runner``); a method's data
    keys (:meth:`~ifdistill.train.method.MethodHooks.data_keys`) are the data layer's, and the arguments
    training supplies (:data:`~ifdistill.train.method.SUPPLIED_BY_TRAINING`) are refused by name."""
    if not isinstance(node, Mapping):
        return []
    nested = [p for key, value in node.items() if isinstance(value, Mapping)
              for p in check_target_keys(value, f"{name}.{key}")]
    from ifdistill.config import settings_problems

    # _own_target_keys imports the target, whose module registers its settings (store_target_schema)
    return _own_target_keys(node, name) + settings_problems(node, name) + nested


def _own_target_keys(node: Mapping, name: str) -> list[str]:
    if not node.get("_target_"):
        return []
    from hydra.utils import get_object

    try:
        target = get_object(str(node["_target_"]))
    except Exception as err:  # noqa: BLE001 - hydra raises ImportError or its own error types
        return [f"{name}._target_={node['_target_']!r} cannot be imported ({err})".replace("\n", " ")]
    from ifdistill.train.method import HYDRA_KEYS, SUPPLIED_BY_TRAINING, MethodHooks
    from ifdistill.train.run import SUPPLIED_TO_CALLBACKS

    method = inspect.isclass(target) and issubclass(target, MethodHooks)
    if method:  # a method's section is its settings object (ifdistill.methods.sft.settings)
        params: Mapping[str, Any] = {f.name: f for f in dataclasses.fields(target.settings_class)}
    else:
        params = inspect.signature(target.__init__ if inspect.isclass(target) else target).parameters
        if any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return []
    read_elsewhere = set(target.data_keys()) if method else set()
    # what training passes itself, which the section may not set: a method's, or a callback's of the group
    if method:
        supplied = dict(SUPPLIED_BY_TRAINING)
    elif name.startswith("callbacks.") and name.count(".") == 1:
        supplied = {k: where for k, where in SUPPLIED_TO_CALLBACKS.items() if k in params}
    else:
        supplied = {}
    if method:  # its values, as the settings class's __post_init__ checks them
        from ifdistill.config import settings_problems

        problems = settings_problems(node, name, target.settings_class)
    else:
        problems = []
    # arguments only a Python caller can give (a function): the target's PYTHON_ONLY, argument -> who gives it
    python_only: Mapping[str, str] = getattr(target, "PYTHON_ONLY", {})
    keys = set(map(str, node.keys()))
    problems += [f"{name}.{key}: training supplies it from {supplied[key]}, not from the {name} section"
                 for key in sorted(keys & set(supplied))]
    problems += [f"{name}.{key}: an argument for {python_only[key]}, not a config key"
                 for key in sorted(keys & set(python_only))]
    unknown = sorted(keys - set(params) - HYDRA_KEYS - read_elsewhere - set(supplied) - set(python_only))
    if unknown:
        known = sorted(k for k in params if k != "self" and k not in supplied and k not in python_only)
        problems.append(f"{name}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} for "
                        f"{node['_target_']} (known: {', '.join(known) or 'none'})")
    return problems


def check_data(data_node: Any, method: Any = None, model: Any = None) -> list[str]:
    """The data section parses and resolves with the model section and the teacher views the method asks
    for (:meth:`~ifdistill.train.method.MethodHooks.teacher_views`; the thinking flag); each local source file exists and its first rows load."""
    from ifdistill.data.build import DataConfig
    from ifdistill.data.sources import load_source

    if data_node is None:
        return ["data: missing section"]
    from ifdistill.train.method import teacher_views_of

    try:
        views = teacher_views_of(method)
    except Exception:  # noqa: BLE001 - an unimportable _target_ is reported by check_target_keys
        views = None
    try:
        data = DataConfig.resolve(data_node, icl=views, model=model)
    except (ValueError, TypeError, KeyError) as err:
        return [f"data: {err}"]
    problems = [] if data.sources else ["data.sources is empty: nothing to train on"]
    for role, specs in (("sources", data.sources), ("replay", data.replay)):
        for spec in specs:
            if spec.max_examples is not None and spec.max_examples < 1:
                problems.append(f"data.{role} {spec.name!r}: max_examples={spec.max_examples} must be >= 1")
                continue
            if not spec.path:  # synthetic (generated here) or a hub dataset (loaded with the data)
                if spec.synthetic and spec.max_examples is not None:
                    problems += check_heldout(data.heldout, role, spec, spec.max_examples)
                continue
            # enough rows to see each source outlast data.heldout (the split build_train_dataset makes)
            limit = min(spec.max_examples or SAMPLE_ROWS, max(SAMPLE_ROWS, data.heldout + 1))
            try:
                loaded = load_source(dataclasses.replace(spec, max_examples=limit), tolerant=data.tolerant)
            except (OSError, ValueError) as err:  # FileNotFoundError, DataError (file:line, field), ...
                problems.append(f"data.{role} {spec.name!r}: {err}")
                continue
            if loaded.stats.rows_read == 0:
                problems.append(f"data.{role} {spec.name!r}: {spec.path} holds no rows")
            elif not loaded.examples and loaded.stats.rows_read < limit:
                problems.append(f"data.{role} {spec.name!r}: none of the {loaded.stats.rows_read} rows of "
                                f"{spec.path} is usable ({loaded.stats.to_dict()['rows_invalid'] or 'all unverified'})")
            else:
                # asked for more than heldout rows: fewer is the whole source (or its max_examples)
                problems += check_heldout(data.heldout, role, spec, len(loaded.examples))
    return problems


def check_heldout(heldout: int, role: str, spec: Any, examples: int) -> list[str]:
    """``data.heldout`` leaves training examples in a source of (at most) ``examples`` usable rows."""
    if heldout <= 0 or examples > heldout:
        return []
    return [f"data.heldout={heldout} leaves no training example in data.{role} {spec.name!r} "
            f"({spec.path or spec.synthetic}: {examples} usable row{'s' if examples != 1 else ''}); "
            "lower data.heldout or add rows"]


def _method(tree: Mapping[str, Any]):
    """The hooks of the ``method`` section (:func:`ifdistill.train.method.method_hooks`: no model code imported),
    or ``None`` when there is no section or its ``_target_`` does not import (reported by :func:`check_target_keys`)."""
    from ifdistill.train.method import method_hooks

    method = tree.get("method")
    if not isinstance(method, Mapping):
        return None
    try:
        return method_hooks(method)
    except Exception:  # noqa: BLE001 - an unimportable _target_ is reported by check_target_keys
        return None


def method_sections(tree: Mapping[str, Any]) -> tuple[str, ...]:
    """Top-level sections the method reads besides ``method`` (:meth:`MethodHooks.sections`)."""
    cls = _method(tree)
    return cls.sections() if cls is not None else ()


def check_method(tree: Mapping[str, Any]) -> list[str]:
    """The method's own checks (:meth:`ifdistill.train.method.MethodHooks.config_problems`)."""
    cls = _method(tree)
    return cls.config_problems(tree["method"], tree) if cls is not None else []


def check_extra_evals(tree: Mapping[str, Any]) -> list[str]:
    """The run's ``eval`` and each extra benchmark of the checkpoint-eval callback
    (``callbacks.checkpoint_eval.evals.<name>``) is a valid eval section (its benchmark's checks, no other
    benchmark's section set): a mistake there would otherwise surface at the first checkpoint."""
    from ifdistill.benchmarks.registry import namespaces
    from ifdistill.evaluator.settings import eval_settings

    problems = []
    sections = lookup(tree, "callbacks.checkpoint_eval.evals") or {}
    checked = {"eval": tree.get("eval"), **{f"callbacks.checkpoint_eval.evals.{name}": section
                                            for name, section in sections.items()}}
    for name, section in checked.items():
        if section is None:
            continue
        try:
            eval_settings(section)
        except Exception as err:  # noqa: BLE001 - schema and interpolation errors; the message names the key
            problems.append(f"{name}: {err}".replace("\n", " "))
    try:  # two sections on one W&B namespace would overwrite each other's keys
        namespaces({None: lookup(tree, "eval.benchmark"), **{str(k): v.get("benchmark") for k, v in sections.items()}})
    except ValueError as err:
        problems.append(f"callbacks.checkpoint_eval.evals: {err}")
    return problems


def check_divergence_policy(tree: Mapping[str, Any]) -> list[str]:
    """``run.on_nonfinite=skip`` needs an optimizer that steps from ``param.grad`` (not DeepSpeed's
    partitions, :mod:`ifdistill.train.nonfinite`); ``run.resume_from`` names a run directory."""
    problems = []
    if lookup(tree, "run.on_nonfinite") == "skip" and "deepspeed" in strategy_name(tree).lower():
        problems.append("run.on_nonfinite=skip is not available with DeepSpeed (its optimizer steps from its "
                        "own gradient partitions): use run.on_nonfinite=stop")
    origin = lookup(tree, "run.resume_from")
    if origin and not (Path(str(origin)) / "checkpoints").is_dir():
        problems.append(f"run.resume_from: {origin} is not a run directory (it has no checkpoints/)")
    return problems


def preflight(tree: Mapping[str, Any], *, check_model: bool = True) -> None:
    """Raise :class:`PreflightError` listing every problem of the config ``tree`` (plain data, resolved:
    :func:`ifdistill.runs.rundir.resolved_tree`) that shows without loading a model."""
    problems: list[str] = []
    try:
        check_sections(tree)
    except ConfigError as err:
        problems.append(str(err).replace("\n", " "))
    unknown = sorted(set(map(str, tree.keys())) - TOP_LEVEL - set(method_sections(tree)))
    if unknown:
        problems.append(f"unknown top-level key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}")
    problems += check_ranges(tree)
    problems += check_divergence_policy(tree)
    problems += check_data(tree.get("data"), tree.get("method"), tree.get("model"))
    problems += check_method(tree)
    for name, node in (tree.get("callbacks") or {}).items():  # null switches a callback off
        if node is not None and not (isinstance(node, Mapping) and node.get("_target_")):
            problems.append(f"callbacks.{name}: a callback is a mapping with a _target_, got {node!r} (settings "
                            f"for a callback the chosen callbacks group does not define? `callbacks.{name}=null` "
                            "switches one off)")
    if not problems:  # importing the targets (Lightning, the module classes) takes seconds: only now
        for name in TARGETS:
            problems += check_target_keys(tree.get(name), name)
        for name, node in (tree.get("callbacks") or {}).items():
            problems += check_target_keys(node, f"callbacks.{name}")
        problems += check_extra_evals(tree)
    if check_model and not problems:
        from ifdistill.models import ModelUnavailableError, check_model_available

        model = tree.get("model") or {}
        try:
            check_model_available(str(model.get("name_or_path")), model.get("revision"))
        except ModelUnavailableError as err:
            problems.append(str(err))
    if problems:
        raise PreflightError("; ".join(problems))

