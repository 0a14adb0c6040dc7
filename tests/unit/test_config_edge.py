"""The Hydra tree stops at each command's edge: below it, library code takes typed objects or plain dicts.

A module *names* the tree when its text matches the acceptance's own search, ``omegaconf|DictConfig``
(``git grep -l -E "omegaconf|DictConfig" -- ifdistill callbacks launchers``). :data:`EDGES` are the modules
allowed to, each with the reason: the commands' entry points, the schema checker they share, the run
directory's hashing and the readers of a run's or a sweep's recorded config. Below them, training reads a
:class:`~ifdistill.train.schemas.TrainConfig` and evaluation an :class:`~ifdistill.evaluator.settings.EvalConfig`.
An edge that no longer names the tree fails the test too, so the list stays the true one.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("ifdistill", "callbacks", "launchers")
PATTERN = re.compile(r"omegaconf|DictConfig")

EDGES = {
    "ifdistill/config.py": "the schema checker every edge uses (struct-mode merge, the config resolvers)",
    "ifdistill/cli/train.py": "ifdistill-train's entry point: the Hydra app",
    "ifdistill/train/config_edge.py": "train_config(): the composed tree becomes the typed TrainConfig",
    "ifdistill/evaluator/cli.py": "ifdistill-eval's entry point: eval_config() makes the typed EvalConfig",
    "ifdistill/evaluator/rerun.py": "ifdistill-eval rerun: the recorded config and the command's overrides",
    "callbacks/backfill.py": "ifdistill-eval backfill: reads a run's config.yaml and composes added benchmarks",
    "ifdistill/runs/rundir.py": "the run directory's config hash and config.yaml",
    "ifdistill/runs/sweep_configs.py": "the reader of a sweep's recorded configs",
    "ifdistill/results/run_config.py": "the reader of a run's config.yaml for ifdistill-report (plain dicts out)",
    "ifdistill/evaluator/results.py": "names the omegaconf package among the library versions results.json records",
    "ifdistill/cli/wandb_view.py": "ifdistill-wandb-view's entry point: composes or reads the sweep's job configs "
                                        "(view_spec and below read plain trees)",
}


def naming_the_tree() -> set[str]:
    return {path.relative_to(ROOT).as_posix()
            for top in SCANNED for path in sorted((ROOT / top).rglob("*.py"))
            if PATTERN.search(path.read_text(encoding="utf-8"))}


def test_only_the_edges_name_the_hydra_tree():
    naming = naming_the_tree()
    unexpected = sorted(naming - set(EDGES))
    assert not unexpected, f"modules below a command's edge that name the Hydra tree: {unexpected}"
    gone = sorted(set(EDGES) - naming)
    assert not gone, f"no longer name the Hydra tree; remove them from EDGES: {gone}"

