"""Every config composes: each option of each group under each primary config, resolved and validated.

Also: a typo'd key or a wrong type in a plain-data section is an error at start-up.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf, open_dict

import ifdistill.conf  # noqa: F401  (the resolvers and section schemas the YAML under conf/ uses)
from ifdistill.config import ConfigError, validate

CONF = Path(__file__).resolve().parents[2] / "conf"
PRIMARY = sorted(p.stem for p in CONF.glob("*.yaml"))


def _groups(primary: str) -> list[str]:
    """The config groups named in a primary config's defaults list (plus experiment/)."""
    defaults = OmegaConf.load(CONF / f"{primary}.yaml").get("defaults", [])
    names = []
    for entry in defaults:
        if isinstance(entry, str) or not hasattr(entry, "keys"):
            continue
        for key in entry.keys():
            key = str(key).removeprefix("override ").removeprefix("optional ")
            if (CONF / key).is_dir() and key != "hydra":
                names.append(key)
    return names


def _cases():
    for primary in PRIMARY:
        yield pytest.param(primary, None, None, id=f"{primary}")
        for group in _groups(primary):
            for option in sorted(p.stem for p in (CONF / group).glob("*.yaml")):
                if option.startswith("_"):
                    continue
                yield pytest.param(primary, group, option, id=f"{primary}-{group}={option}")


def _compose(primary: str, overrides: list[str]):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        # In a real run paths.output_dir is Hydra's runtime.output_dir, which compose() leaves unset.
        overrides = ["paths.output_dir=/tmp/ifdistill-compose-test", *overrides]
        cfg = compose(primary, overrides=overrides, return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)
        with open_dict(cfg):
            del cfg["hydra"]  # read-only; ${hydra:...} now resolves through HydraConfig
        OmegaConf.resolve(cfg)
        return cfg


#: ``config_hash`` of every shipped training configuration (the default, and each option of each group in
#: its place), as the code at commit 0ab0b30 (before the typed-configuration redesign) computes it: a run
#: directory is named by it, so a change here orphans every existing run of that configuration (no resume).
#: Regenerate only for a deliberate change, with ``python tests/unit/test_configs.py``.
PINNED = Path(__file__).with_name("shipped_config_hashes.json")


@functools.lru_cache(maxsize=1)  # read once, not once per composed case
def _pinned() -> dict[str, str]:
    return json.loads(PINNED.read_text())


def _case_id(primary: str, group: str | None, option: str | None) -> str:
    return primary if group is None else f"{primary}-{group}={option}"


def _train_hash(cfg) -> str:
    """The run directory's hash as training computes it: from the typed config's tree."""
    from ifdistill.runs.rundir import config_hash, resolved_tree
    from ifdistill.train.run import hash_ignore

    tree = resolved_tree(cfg)
    return config_hash(tree, hash_ignore(tree))


@pytest.mark.parametrize("primary,group,option", list(_cases()))
def test_every_config_composes_and_validates(primary, group, option):
    overrides = [] if group is None else [f"{group}={option}"]
    cfg = _compose(primary, overrides)
    validate(cfg)
    for node in _targets(cfg):
        _import_target(node)
    if primary == "train":  # composed already: its run-directory hash, against the pinned one
        assert _train_hash(cfg) == _pinned()[_case_id(primary, group, option)], "config_hash changed (PINNED)"


def _targets(node, found=None):
    found = [] if found is None else found
    if OmegaConf.is_dict(node):
        if "_target_" in node:
            found.append(node["_target_"])
        for v in node.values():
            _targets(v, found)
    elif OmegaConf.is_list(node):
        for v in node:
            _targets(v, found)
    return found


def _import_target(path: str):
    from hydra.utils import get_object

    assert get_object(path) is not None, path


def test_unknown_key_is_an_error_at_start_up():
    cfg = _compose(PRIMARY[0], ["+model.max_lenght=4096"])  # `+` adds a key even to a section with a schema
    with pytest.raises(ConfigError, match="max_lenght"):
        validate(cfg, ["model"])


def test_wrong_type_is_an_error_at_start_up():
    with pytest.raises(Exception, match="max_length"):
        _compose(PRIMARY[0], ["model.max_length=long"])
    cfg = _compose(PRIMARY[0], [])
    with open_dict(cfg):
        cfg.model = OmegaConf.merge(OmegaConf.to_container(cfg.model), {"max_length": "long"})
    with pytest.raises(ConfigError, match="max_length"):
        validate(cfg, ["model"])


if __name__ == "__main__":  # regenerate shipped_config_hashes.json (PINNED: a deliberate hash change only)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    hashes = {_case_id(*c.values): _train_hash(_compose(c.values[0], [] if c.values[1] is None else
                                                        [f"{c.values[1]}={c.values[2]}"]))
              for c in _cases() if c.values[0] == "train"}
    PINNED.write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n")
    print(f"{len(hashes)} hashes -> {PINNED}")
