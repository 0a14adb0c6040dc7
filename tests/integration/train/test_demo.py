"""`experiment=demo` end to end (shortened): held-out cross-entropy falls, the run directory has its
layout, and calling train() again with the same config finds the finished run instead of retraining.

The full preset (150 steps) is timed by hand and reported; here 20 steps show the mechanics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from ifdistill.train.run import train

pytestmark = pytest.mark.slow

CONF = Path(__file__).resolve().parents[3] / "conf"


def _cfg(tmp_path):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("train", overrides=[
            "experiment=demo", f"paths.output_root={tmp_path}", f"paths.output_dir={tmp_path}/hydra",
            "trainer.max_steps=20", "run.eval_every_n_steps=20", "run.checkpoint_every_n_steps=10",
            "data.heldout=32"])


def test_demo_trains_and_a_rerun_finds_its_finished_run(tmp_path):
    first = train(_cfg(tmp_path))
    run_dir = Path(first["run_dir"])
    assert run_dir.parent == tmp_path / "train" / "runs" and run_dir.name == f"demo-{first['config_hash'][:12]}"
    for rel in ("config.yaml", "run.json", "data/manifest.json", "checkpoints/step=000020.ckpt", "exports"):
        assert (run_dir / rel).exists(), rel
    first_log = sorted((run_dir / "logs" / "csv").glob("version_*/metrics.csv"))[0]
    rows = [ln.split(",") for ln in first_log.read_text().splitlines()]
    header = rows[0]
    ce = header.index("val/synthetic_train/ce")
    curve = [float(r[ce]) for r in rows[1:] if r[ce]]
    assert len(curve) == 2 and curve[-1] < curve[0] - 0.5, curve  # step 0, then step 20

    again = train(_cfg(tmp_path))  # the same command after the end (or a crash): same run, nothing retrained
    assert again["run_id"] == first["run_id"] and again["global_step"] == 20
    assert again["resumed_from"].endswith("step=000020.ckpt")
    launches = json.loads((run_dir / "run.json").read_text())["launches"]
    assert [bool(x["resumed_from"]) for x in launches] == [False, True]


def test_distillation_with_replay_through_the_cli_config(tmp_path):
    """The sweep's distillation setting on the tiny model (shared demonstrations, replay 50 %, 4 steps):
    the data layer gets k and the scheme from the method section, the module gets neither (it would
    refuse unknown arguments), and the divergence is logged."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=[
            "experiment=demo", "method=distill", "method.k=2", "data=synthetic_replay", "data.ratio=0.5",
            f"paths.output_root={tmp_path}", f"paths.output_dir={tmp_path}/hydra", "trainer.max_steps=4",
            "trainer.log_every_n_steps=2", "run.eval_every_n_steps=1000", "run.checkpoint_every_n_steps=4",
            "run.validate_at_start=false", "data.heldout=0", "+data.sources.0.max_examples=64",
            "datamodule.micro_batch_size=4"])
    out = train(cfg)
    assert out["global_step"] == 4 and "train/kd" in out["metrics"]
    manifest = json.loads((Path(out["run_dir"]) / "data" / "manifest.json").read_text())
    assert manifest["icl"]["k"] == 2 and manifest["icl"]["demos"] == "shared"
    assert "icl_k" not in manifest["config"]  # method.k is the one source
