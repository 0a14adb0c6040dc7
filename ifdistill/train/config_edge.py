"""The edge of training: a composed Hydra tree becomes a checked, typed :class:`~ifdistill.train.schemas.TrainConfig`.

``ifdistill-train`` (:mod:`ifdistill.cli.train`) calls :func:`train_config` on the tree Hydra composed, and so
do tests and scripts before :func:`ifdistill.train.run.train`; nothing below it sees the tree
(tests/unit/test_config_edge.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

if TYPE_CHECKING:
    from ifdistill.train.schemas import TrainConfig


def train_config(cfg: DictConfig | Mapping[str, Any], *, check_model: bool = True) -> TrainConfig:
    """The edge: a composed config tree made plain (:func:`ifdistill.runs.rundir.resolved_tree`), checked
    by preflight (every problem that shows without a model, reported together as one
    :class:`~ifdistill.train.preflight.PreflightError`; ``check_model``: the model is here or reachable),
    then typed. Nothing below it sees the tree."""
    from ifdistill.runs.rundir import resolved_tree
    from ifdistill.train.preflight import preflight
    from ifdistill.train.schemas import TrainConfig

    tree = resolved_tree(cfg)
    preflight(tree, check_model=check_model)
    return TrainConfig.from_tree(tree)
