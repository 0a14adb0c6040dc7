"""config_hash ignores paths/logging keys and nothing else; the run directory follows from it."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from ifdistill.train.rundir import DEFAULT_HASH_IGNORE, RunDir, config_hash, hashed_config, run_id

BASE = {
    "seed": 42, "task_name": "train",
    "paths": {"output_root": "/a", "output_dir": "${hydra:runtime.output_dir}"},
    "model": {"name_or_path": "builtin:tiny"},
    "optim": {"lr": 1e-3},
    "trainer": {"max_steps": 10, "log_every_n_steps": 5, "enable_progress_bar": False},
    "logger": {"_target_": "x.CSVLogger"},
    "run": {"name": "demo", "eval_every_n_steps": 50},
    "data": {"cache": "${paths.output_root}/ignored-by-hash-only-if-under-paths"},
}


def cfg(**changes):
    c = OmegaConf.create(BASE)
    for k, v in changes.items():
        OmegaConf.update(c, k, v)
    return c


def test_hash_ignores_paths_loggers_run_and_logging_cadence():
    h = config_hash(cfg())
    assert len(h) == 64
    for key, value in [("paths.output_root", "/a"), ("logger._target_", "x.WandbLogger"), ("run.name", "other"),
                       ("run.eval_every_n_steps", 7), ("trainer.log_every_n_steps", 1),
                       ("trainer.enable_progress_bar", True)]:
        if key == "paths.output_root":
            continue  # data.cache interpolates it: see the next test
        assert config_hash(cfg(**{key: value})) == h, key


def test_hash_changes_with_what_is_trained():
    h = config_hash(cfg())
    for key, value in [("seed", 1), ("optim.lr", 2e-3), ("trainer.max_steps", 11), ("model.name_or_path", "x")]:
        assert config_hash(cfg(**{key: value})) != h, key


def test_hydra_only_values_never_need_to_resolve():
    # paths.output_dir uses the hydra resolver, which does not exist here; paths is ignored, so fine.
    hc = hashed_config(cfg())
    assert "paths" not in hc and "logger" not in hc and "run" not in hc
    assert hc["trainer"] == {"max_steps": 10}
    assert hc["data"]["cache"].startswith("/a/")  # resolved values enter the hash


def test_run_dir_layout_and_launch_record(tmp_path):
    c = cfg()
    h = config_hash(c)
    rd = RunDir(tmp_path / run_id("demo", h))
    meta = rd.write_launch(c, run_id=run_id("demo", h), digest=h, ignore=DEFAULT_HASH_IGNORE, resumed_from=None)
    for sub in ("checkpoints", "exports", "logs", "data"):
        assert (rd.root / sub).is_dir()
    assert rd.root.name == f"demo-{h[:12]}"
    saved = json.loads(rd.run_json.read_text())
    assert saved["config_hash"] == h and saved["run_id"] == f"demo-{h[:12]}" and len(saved["launches"]) == 1
    assert "optim" in saved["hashed_config"]
    rd.write_launch(c, run_id=meta["run_id"], digest=h, ignore=DEFAULT_HASH_IGNORE, resumed_from="step=000002.ckpt")
    assert [x["resumed_from"] for x in rd.read_meta()["launches"]] == [None, "step=000002.ckpt"]
    with pytest.raises(RuntimeError, match="belongs to config_hash"):
        rd.write_launch(c, run_id="x", digest="0" * 64, ignore=DEFAULT_HASH_IGNORE, resumed_from=None)
