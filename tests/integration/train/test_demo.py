"""`experiment=demo` end to end (shortened): held-out cross-entropy falls, the run directory has its
layout, and calling train() again with the same config finds the finished run and, nothing being
missing, changes nothing.

The full preset (150 steps) is timed by hand and reported; here 20 steps show the mechanics. The demo's
console contract (``make demo``: ifdistill's lines only, one screen, the table last) is checked on a
shortened run of its tiny-model smoke path (``ifdistill.cli.demo --model tiny``; the real model's demo runs in
``tests/integration/test_real_model.py``'s setting, not here)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

import ifdistill.conf  # noqa: F401  (the resolvers and section schemas the YAML under conf/ uses)
from ifdistill.train.config_edge import train_config
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
    first = train(train_config(_cfg(tmp_path)))
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

    kept = lambda: {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")  # noqa: E731
                    if p.is_file() and p.name not in ("run.lock", "console.log")}  # console.log: what each launch did
    files = kept()
    again = train(train_config(_cfg(tmp_path)))  # the same command after the end: same run, nothing retrained
    assert again["run_id"] == first["run_id"] and again["global_step"] == 20 and again["nothing_to_do"]
    assert again["resumed_from"].endswith("step=000020.ckpt")
    launches = json.loads((run_dir / "run.json").read_text())["launches"]
    assert [bool(x["resumed_from"]) for x in launches] == [False]  # finished, nothing missing: no launch
    assert kept() == files


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
    out = train(train_config(cfg))
    assert out["global_step"] == 4 and "train/kd" in out["metrics"]
    manifest = json.loads((Path(out["run_dir"]) / "data" / "manifest.json").read_text())
    assert manifest["icl"]["k"] == 2 and manifest["icl"]["demos"] == "shared"
    assert "icl_k" not in manifest["config"]  # method.k is the one source


# Every line the demo's console may show: ifdistill's own (commands, progress, evaluations, the table).
OWN_LINE = re.compile("|".join([
    r"", r"\$ .*", r"\[demo\] .*", r"\[train\] step \d+/\d+ .*", r"\[checkpoint-eval\] step \d+: .*",
    r"\[persistent-eval\] .*", r"\[[\d-]+ [\d:,]+\]\[ifdistill\.[\w.]+\]\[\w+\] - .*", r'\{"run_id": .*\}',
    r"run directory: .*", r"W&B offline run: .*", r"plots: .*",
    r"IFEval on the synthetic eval split .*", r"\|.*\|", r"eval_config_hash identical in training and after: \w+",
]))
FULL_DEMO = {"steps": 150, "eval_every": 50, "log_every": 10}  # the tiny preset (ifdistill/cli/demo.py, conf/experiment/demo.yaml)


def test_demo_console_is_ifdistills_lines_and_ends_with_the_table(tmp_path):
    """``make demo``'s console contract on a shortened tiny-model demo (10 steps, evaluations at 0 -- the
    base -- and 10): every line is ifdistill's, the last are the table and the identity line, and the count
    scaled to the full demo (its progress lines and evaluations) is at most 40 -- one screen."""
    steps, every = 10, 10
    proc = subprocess.run([sys.executable, "-m", "ifdistill.cli.demo", "model=tiny", f"--steps={steps}",
                           f"--eval-every={every}", "--max-new-tokens=16", f"--out={tmp_path}"], cwd=CONF.parent,
                          capture_output=True,
                          text=True, timeout=1200, env={**os.environ, "PYTHONPATH": str(CONF.parent)})
    lines = (proc.stdout + proc.stderr).rstrip("\n").splitlines()
    assert proc.returncode == 0, "\n".join(lines[-40:])
    assert not proc.stderr.strip(), proc.stderr[-3000:]  # all of it on stdout, in order
    foreign = [ln for ln in lines if not OWN_LINE.fullmatch(ln)]
    assert not foreign, foreign
    evals = 1 + steps // every  # step 0 (the base) and every `every` steps
    assert lines[-1] == "eval_config_hash identical in training and after: True"
    table = lines[-(evals + 4):-1]  # header, rule, one row per evaluation, the post-training row
    assert table[0] == ("| step | prompt strict | inst strict | prompt loose | inst loose | Δ prompt strict vs base "
                        "| MDE | verdict |") and table[1] == "|---" * 8 + "|"
    assert [row.split(" | ")[0] for row in table[2:]] == ["| 0 (base)"] + \
        [f"| {s}" for s in range(every, steps + 1, every)] + [f"| {steps} (ifdistill-eval, after training)"]
    assert table[2].endswith("| - | - | (base) |")
    verdicts = ("wins", "forgetting", "unverified gain", "no clear gain", "underpowered")  # the results page's
    assert all(row.rsplit(" | ", 1)[1].removesuffix(" |").startswith(verdicts) for row in table[3:]), table
    progress = sum(ln.startswith("[train] step") for ln in lines)
    assert progress == steps // FULL_DEMO["log_every"]  # demo preset: a line every 10 steps
    # the full demo: its progress lines, and one evaluation line and table row per evaluation more
    full_evals = 1 + FULL_DEMO["steps"] // FULL_DEMO["eval_every"]
    full = len(lines) - progress + FULL_DEMO["steps"] // FULL_DEMO["log_every"] + 2 * (full_evals - evals)
    print(f"\ndemo console: {len(lines)} lines here, {full} for the full demo")
    assert full <= 40, "\n".join(lines)
    log = next((tmp_path / "train" / "runs").glob("demo-*")) / "logs" / "console.log"
    assert "vllm" in log.read_text() and "lightning" in log.read_text()  # the libraries' lines went here
