"""scripts/miniature_more_columns.sh, cheaply: the commands it runs over a miniature's output tree (the
programs replaced by recorders), and that the section it back-fills into a run is the base evaluation's eval
config -- the page compares a column only under one eval_config_hash.

The back-fill machinery itself (``+eval@evals.NAME=OPTION`` over a finished run, byte-identical to an
evaluation in training) is tested on a real run in tests/integration/callbacks/test_checkpoint_eval.py."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "miniature_more_columns.sh"
RECORDER = '#!/usr/bin/env bash\necho "$(basename "$0") $*" >> "$CALLS"\n'


def _run(out: Path, tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("ifdistill-eval", "ifdistill-report"):
        (bin_dir / name).write_text(RECORDER)
        (bin_dir / name).chmod(0o755)
    calls = tmp_path / "calls.txt"
    calls.unlink(missing_ok=True)
    proc = subprocess.run(["bash", str(SCRIPT), str(out), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "IFDISTILL_BIN": str(bin_dir), "CALLS": str(calls)})
    return proc, [shlex.split(line) for line in calls.read_text().splitlines()] if calls.exists() else []


def _miniature(tmp_path: Path) -> Path:
    out = tmp_path / "miniature"
    for run, steps in (("method-sft_ratio-0-aaa", (12, 24)), ("method-distill_ratio-0.18-bbb", (12, 24))):
        for step in steps:
            (out / "train" / "runs" / run / "exports" / f"step_{step:06d}").mkdir(parents=True)
    (out / "train" / "runs" / "unfinished-ccc").mkdir(parents=True)  # no export: left alone
    return out


def test_the_base_and_every_runs_final_checkpoint_then_the_page(tmp_path):
    out = _miniature(tmp_path)
    proc, calls = _run(out, tmp_path)
    assert proc.returncode == 0, proc.stderr
    base, *backfills, report = calls
    assert base == ["ifdistill-eval", "model=smollm2_135m", "eval=ifeval_multiturn", "eval.data.max_examples=48",
                    "eval.generation.max_new_tokens=128", "eval.runtime.progress=false",
                    f"output_dir={out}/base/multiturn", f"hydra.run.dir={out}/base/multiturn"]
    assert sorted(c[2] for c in backfills) == sorted(f"run_dir={out}/train/runs/{r}" for r in (
        "method-sft_ratio-0-aaa", "method-distill_ratio-0.18-bbb"))
    for call in backfills:
        assert call[:2] == ["ifdistill-eval", "backfill"] and call[3:] == [
            "steps=[24]", "runner=local", "+eval@evals.multiturn=ifeval_multiturn", "evals.multiturn.data.max_examples=48",
            "evals.multiturn.generation.max_new_tokens=128", "evals.multiturn.runtime.progress=false"]
    assert report == ["ifdistill-report", f"{out}/train/runs", "--base-model", f"{out}/base", "-o", f"{out}/report"]
    assert "unfinished-ccc: no export, skipped" in proc.stdout


def test_a_scored_base_is_kept_and_bad_arguments_are_refused(tmp_path):
    out = _miniature(tmp_path)
    (out / "base" / "mi").mkdir(parents=True)
    (out / "base" / "mi" / "results.json").write_text("{}")
    proc, calls = _run(out, tmp_path, "mi=mifeval_fr")
    assert proc.returncode == 0 and "base/mi: already scored" in proc.stdout
    assert all(c[1] == "backfill" for c in calls[:-1]) and "+eval@evals.mi=mifeval_fr" in calls[0]
    proc, _ = _run(out, tmp_path, "ifeval_multiturn")
    assert proc.returncode == 2 and "expected NAME=OPTION" in proc.stderr
    proc, _ = _run(tmp_path / "nothing", tmp_path)
    assert proc.returncode == 2 and "run make miniature first" in proc.stderr


def test_the_backfilled_section_is_the_base_evaluations_eval_config(tmp_path):
    """The section back-fill composes into a miniature run (its own model and paths) is, setting for setting,
    the eval config the base evaluation reads: the same eval_config_hash on the same model."""
    from ifdistill.callbacks.backfill import added_evals, added_sections
    from ifdistill.evaluator.cli import load_config
    from ifdistill.evaluator.settings import as_dict, eval_settings
    from tests.unit.test_configs import _compose

    out = _miniature(tmp_path)
    _, calls = _run(out, tmp_path)
    base_call, backfill_call = calls[0], calls[1]
    composed = _compose("train", ["experiment=smollm2_miniature_comparison", "method=sft"])
    run_cfg = OmegaConf.create(OmegaConf.to_container(composed, resolve=True))  # as the run's config.yaml loads
    added, _ = added_evals(backfill_call[2:])
    section = eval_settings(added_sections(run_cfg, added)["multiturn"])
    base = load_config([a for a in base_call[1:] if not a.startswith(("output_dir=", "hydra."))],
                       output_dir=str(tmp_path / "base")).eval
    mine, theirs = as_dict(section), as_dict(base)
    mine.pop("runtime"), theirs.pop("runtime")
    assert mine == theirs
