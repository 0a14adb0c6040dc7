"""Typed schemas for the parts of the config that are plain data, checked once at start-up.

Groups that build objects carry a ``_target_`` and are checked by instantiating them before any work
starts (an unknown argument fails there, not at step 500). Plain-data sections are checked here:
:func:`validate` merges each section into its dataclass schema in struct mode, so an unknown key or a
wrong type raises an error naming the key, at start-up. The OmegaConf resolvers the YAML under conf/
uses are registered through :func:`register_resolvers`, each by the module that owns it.
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any, Callable, Optional

from omegaconf import DictConfig, OmegaConf


@dataclass
class ModelSchema:
    name_or_path: str
    revision: Optional[str] = None
    dtype: str = "float32"
    # training's attention kernel: auto is flash_attention_2 where flash-attn imports on a GPU, else packed_sdpa
    # on a GPU, sdpa on CPU; or sdpa | eager | packed_sdpa | flash_attention_2 | flash_attention_3
    # (ifdistill/train/packed_attention.py)
    attn_implementation: str = "auto"
    chat_template: Optional[str] = None  # null: the tokenizer's own; a template string or a .jinja file
    enable_thinking: Optional[bool] = None  # Qwen3-style templates only (docs/qwen3-template.md)
    max_length: int = 2048


@dataclass
class PathsSchema:
    """Where things are read from and written to (never part of a run's config hash)."""

    root_dir: str = "."
    shared_data_dir: str = "../shared/data"
    output_root: str = "outputs"
    output_dir: str = "outputs"


SCHEMAS: dict[str, type] = {"model": ModelSchema, "paths": PathsSchema}


class ConfigError(ValueError):
    """A config section does not fit its schema; the message names the section and key."""


def register_schema(section: str, schema: type) -> None:
    """Let a subpackage add the schema of its section (``run`` by training, ``eval`` by the evaluator); it
    becomes Hydra's ``schema/<section>`` too (:func:`store_schemas`)."""
    SCHEMAS[section] = schema
    store_schemas({section: schema})


def store_schemas(schemas: Optional[dict[str, type]] = None) -> None:
    """Each plain-data section's schema as Hydra's config ``schema/<section>`` (registered as its owner imports:
    ``import ifdistill.conf`` imports them all), which the YAML of that section extends (``defaults: [/schema@_here_: model, _self_]``; ``schema@optim: optim`` in ``train.yaml``). The
    composed tree then holds every key with the dataclass's default, the one home of each default; the YAML
    states only its choices (``tests/unit/test_one_home_per_default.py``), and a key or type the schema does
    not have is refused as Hydra composes."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    for section, schema in (schemas if schemas is not None else SCHEMAS).items():
        store.store(group="schema", name=section, node=schema)


#: ``_target_`` path -> the dataclass of its settings (:func:`store_target_schema`), for :func:`settings_problems`.
TARGET_SETTINGS: dict[str, type] = {}

#: Field metadata of a setting the composed node holds only when a command line adds it (``+method.topk=4``):
#: :func:`only_when_set`.
WHEN_SET = "only_when_set"


def only_when_set(default: Any = None) -> Any:
    """A dataclass field left out of the node Hydra composes (:func:`store_target_schema`): the object still
    has it, with ``default``, and ``+<section>.<key>=`` adds it. For a setting added after configurations
    were hashed: as a composed key it would change the config hash of every shipped tree of that section."""
    from dataclasses import field

    return field(default=default, metadata={WHEN_SET: True})


def store_target_schema(name: str, schema: type, *, targets: tuple[str, ...] = (), closed: bool = False) -> None:
    """``schema`` (the dataclass of a ``_target_``'s settings, the home of their defaults) as Hydra's config
    ``schema/<name>``, which that target's YAML extends as a plain-data section's YAML extends its schema
    (:func:`store_schemas`). Values are typed as Hydra composes.

    An open node (the default) also takes keys the dataclass does not have: Hydra's (``_target_``,
    ``_recursive_``), the target's wiring (``eval_cfg: ${eval}``) and a method's data-layer keys, so a misspelt
    key is refused by preflight, against the target's signature. A ``closed`` node refuses it as Hydra
    composes: for a target whose ``**kwargs`` preflight cannot check (a strategy factory), whose dataclass
    then has fields for ``_target_`` and the wiring too. ``targets``: the ``_target_`` paths whose nodes
    :func:`settings_problems` checks with ``schema`` (its ``__post_init__`` holds the range checks)."""
    from hydra.core.config_store import ConfigStore

    TARGET_SETTINGS.update(dict.fromkeys(targets, schema))
    node = OmegaConf.structured(schema)
    OmegaConf.set_struct(node, False)
    for f in dataclasses.fields(schema):
        if f.metadata.get(WHEN_SET):
            del node[f.name]  # only_when_set: composed only when a command line adds it
    OmegaConf.set_struct(node, closed)
    ConfigStore.instance().store(group="schema", name=name, node=node)


class SettingsError(ValueError):
    """A settings dataclass refuses its values: :attr:`problems`, one line each starting with its key (a range,
    a choice, a combination of its own fields). Its ``__post_init__`` raises it, so an object with such values
    never exists; preflight reports every line (:func:`settings_problems`)."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = list(problems)


def settings_problems(node: Mapping[str, Any], where: str, schema: Optional[type] = None) -> list[str]:
    """A ``_target_`` node's values that its settings dataclass refuses, one line each ``<where>.<message>``;
    the dataclass's own ``__post_init__`` says what is wrong, starting with the key (every problem where it
    raises :class:`SettingsError`). ``schema``: the dataclass (a method's settings class); by default the one
    registered for the node's target (:data:`TARGET_SETTINGS`), and none for a target without one."""
    schema = schema or TARGET_SETTINGS.get(str(node.get("_target_")))
    if schema is None:
        return []
    names = {f.name for f in dataclasses.fields(schema) if f.init and not f.name.startswith("_")}
    try:
        schema(**{k: v for k, v in node.items() if k in names})
    except (TypeError, ValueError) as err:
        return [f"{where}.{problem}" for problem in getattr(err, "problems", None) or [str(err)]]
    return []


#: ``(key, ok(value), what it must be)``: one range check of a plain-data section, held by the section's
#: dataclass as its ``ranges`` (``OptimSchema.ranges``); preflight applies them to the composed tree.
Range = tuple[str, Callable[[Any], bool], str]


def is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def is_num(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def range_problems(section: Mapping[str, Any], ranges: tuple[Range, ...], where: str) -> list[str]:
    """``<where>.<key>=<value> must be <what>`` for each key of a plain ``section`` outside its range; a key the
    section does not hold is not checked."""
    return [f"{where}.{key}={section[key]!r} must be {what}" for key, ok, what in ranges
            if key in section and not ok(section[key])]


def check_schema(schema: type, node: Any, where: str, *, resolve: bool = False, as_object: bool = False) -> Any:
    """``node`` merged into ``schema`` in struct mode; an unknown key or a wrong type raises
    :class:`ConfigError` starting with ``where`` and naming the key.

    ``resolve``: a DictConfig node is resolved against its own root first (its interpolations may
    point outside the section). ``as_object``: the result is the schema's dataclass, not a DictConfig.
    """
    try:
        if resolve and isinstance(node, DictConfig):
            node = OmegaConf.to_container(node, resolve=True)
        merged = OmegaConf.merge(OmegaConf.structured(schema), node)
        return OmegaConf.to_object(merged) if as_object else merged
    except Exception as err:  # omegaconf raises several types; the message names the key
        raise ConfigError(f"{where}: {err}".strip()) from None


def validate(cfg: DictConfig, sections: Optional[list[str]] = None) -> DictConfig:
    """Check the named (default: all known and present) sections of a composed tree against their schemas:
    :func:`check_sections` of their plain form (a node composed from its schema would carry a ``+``-added key
    along). Returns ``cfg`` unchanged; raises :class:`ConfigError` with the offending key."""
    nodes = {name: OmegaConf.select(cfg, name, throw_on_missing=True) for name in sections or SCHEMAS if name in cfg}
    check_sections({name: OmegaConf.to_container(node, resolve=False) if isinstance(node, DictConfig) else node
                    for name, node in nodes.items()})
    return cfg


def lookup(tree: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """The value at dotted ``key`` (``trainer.strategy``) of a plain config tree; ``default`` where a part
    of the path is absent."""
    node: Any = tree
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def check_sections(tree: Mapping[str, Any]) -> None:
    """Each known section present in a plain tree against its schema; :class:`ConfigError` naming the key."""
    for name in [s for s in SCHEMAS if tree.get(s) is not None]:
        check_schema(SCHEMAS[name], tree[name], f"config section '{name}'")


def _shared_data_resolver() -> str:
    from ifdistill.paths import REPO_ROOT, shared_data_dir

    found = shared_data_dir(required=False)
    return str(found if found is not None else REPO_ROOT.parent / "shared" / "data")


def _config_groups(*groups: str) -> str:
    """``group: option, option`` lines for the named config groups of ``ifdistill.conf`` (options
    starting with ``_`` are shared bases, not choices) -- a program's ``--help`` lists its own groups
    only, from the files that exist."""
    from importlib.resources import files

    conf = files("ifdistill.conf")
    lines = []
    for group in groups:
        options = sorted(f.name.removesuffix(".yaml") for f in conf.joinpath(group).iterdir()
                         if f.name.endswith(".yaml") and not f.name.startswith("_"))
        lines.append(f"{group}: {', '.join(options)}")
    return "\n".join(lines)


def register_resolvers(resolvers: Mapping[str, Any]) -> None:
    """OmegaConf resolvers (``{name: function}``) the YAML under conf/ uses, registered by the module that
    owns them as it imports (idempotent): the shared data folder and a program's config groups here, the
    sweep's job and run names where sweeps are (:mod:`ifdistill.runs.sweeps`)."""
    for name, fn in resolvers.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


register_resolvers({
    # The shared data folder as ifdistill.paths finds it ($IFDISTILL_SHARED_DATA, then beside the
    # checkout), so configs work from any working directory.
    "ifdistill.shared_data": _shared_data_resolver,
    "ifdistill.config_groups": _config_groups,
})
store_schemas()
