"""Every config composes: each option of each group under each primary config, resolved and validated.

Also: a typo'd key or a wrong type in a plain-data section is an error at start-up.
"""

from __future__ import annotations

import functools
import json
import sys
import warnings
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
#: A new option has no pin yet: the test composes it and reports it (:class:`UnpinnedOption`), and
#: ``make pin-config-hashes`` pins it without touching the others; ``make pin-config-hashes PIN_ARGS=--all``
#: re-pins every one, for a deliberate change only (docs/compatibility.md).
PINNED = Path(__file__).with_name("shipped_config_hashes.json")
PIN_COMMAND = "make pin-config-hashes"


class UnpinnedOption(UserWarning):
    """A shipped option whose config_hash has no pin yet: nothing guards it until it is pinned."""


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
        case = _case_id(primary, group, option)
        if case not in _pinned():
            warnings.warn(UnpinnedOption(f"{case}: a new shipped option, its config_hash is not pinned yet "
                                         f"({PINNED.name}); pin it with `{PIN_COMMAND}`"))
            return
        assert _train_hash(cfg) == _pinned()[case], f"{case}: config_hash changed ({PINNED.name})"


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


def pin(cases: dict[str, str], pinned: dict[str, str], *, everything: bool = False) -> tuple[dict[str, str], list[str]]:
    """The pins after pinning: ``cases`` (``{case: config_hash}`` of every shipped option) where no pin is
    (``everything``: all of them), the other pins as they were; pins of options no longer shipped dropped.
    Also the lines that say what changed."""
    out = dict(cases) if everything else {case: pinned.get(case, value) for case, value in cases.items()}
    lines = [f"pinned {case}: {out[case]}" for case in sorted(out) if pinned.get(case) != out[case]]
    lines += [f"dropped {case} (no longer shipped)" for case in sorted(set(pinned) - set(out))]
    return out, lines


def main(argv: list[str]) -> int:
    """``make pin-config-hashes [PIN_ARGS=--all]``: pin the config_hash of each shipped option without a pin
    (``--all``: re-pin every one -- a deliberate change, which orphans that option's existing runs)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    hashes = {_case_id(*c.values): _train_hash(_compose(c.values[0], [] if c.values[1] is None else
                                                        [f"{c.values[1]}={c.values[2]}"]))
              for c in _cases() if c.values[0] == "train"}
    pins, lines = pin(hashes, json.loads(PINNED.read_text()) if PINNED.exists() else {}, everything="--all" in argv)
    PINNED.write_text(json.dumps(pins, indent=1, sort_keys=True) + "\n")
    print("\n".join([*lines, f"{len(pins)} pinned config hashes in {PINNED} ({len(lines)} changed)"]))
    return 0


def test_pinning_adds_new_options_and_keeps_the_others():
    pinned = {"train": "a", "train-method=gone": "g"}
    assert pin({"train": "A", "train-method=new": "n"}, pinned) == (
        {"train": "a", "train-method=new": "n"},
        ["pinned train-method=new: n", "dropped train-method=gone (no longer shipped)"])
    assert pin({"train": "A"}, pinned, everything=True)[0] == {"train": "A"}


if __name__ == "__main__":  # make pin-config-hashes (PINNED)
    sys.exit(main(sys.argv[1:]))
