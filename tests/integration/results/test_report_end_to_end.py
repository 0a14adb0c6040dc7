"""ifdistill-report end to end on run directories made of real evaluator-format files.

Responses are GPT-4's IFEval answers (shared data) and systematic degradations of them, scored with
the real scorer; results.json follows the evaluator's schema and is published with the evaluator's
own atomic writer; run directories carry training's run.json / config.yaml and a metrics.json
written through ``run_metrics``. The CLI runs as a separate process, as a researcher would run it.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ifdistill.benchmarks.instruction_following.scoring import score_rows
from ifdistill.benchmarks.instruction_following.stats import aggregate, mcnemar_exact
from ifdistill.benchmarks.registry import get as _benchmark
from ifdistill.results import run_metrics
from tests.support import require
from tests.unit.results.result_files import results_json, sample

N_PROMPTS = 80
REPO = Path(__file__).resolve().parents[3]


def _gpt4_rows() -> list[dict]:
    path = _benchmark("ifeval").local_rows()
    responses_file = path.parent / "input_response_data_gpt4_20231107_145030.jsonl"
    require(path.is_file() and responses_file.is_file(), "shared IFEval prompts and GPT-4 responses")
    responses = {}
    with open(responses_file) as f:
        for line in f:
            r = json.loads(line)
            responses[r["prompt"]] = r["response"]
    rows = []
    with open(path) as f:
        for line in f:
            p = json.loads(line)
            if p["prompt"] in responses:
                rows.append({**p, "key": str(p["key"]), "response": responses[p["prompt"]]})
            if len(rows) == N_PROMPTS:
                break
    return rows


VARIANTS = {
    "full": lambda text: text,
    "first_40_words": lambda text: " ".join(text.split()[:40]),
    "lowercase": lambda text: text.lower(),
    "no_markdown": lambda text: text.replace("*", "").replace("#", ""),
}


def _publish(out_dir: Path, prompts: list[dict], variant: str, k: int = 0) -> list[dict]:
    """Score one variant of the responses and publish it like the evaluator does."""
    from ifdistill.evaluator.results import publish
    from ifdistill.benchmarks.instruction_following.schema import SAMPLE_SCHEMA, validate

    transform = VARIANTS[variant]
    scored = score_rows([{**p, "response": transform(p["response"])} for p in prompts]).rows
    samples = [sample(r["key"], r["prompt"], r["response"], r["instruction_id_list"], r["kwargs"],
                      r["strict_inst"], r["loose_inst"]) for r in scored]
    results = results_json(samples, k=k, output_dir=str(out_dir))
    validate(results)
    for s in samples:
        validate(s, SAMPLE_SCHEMA)
    publish(out_dir, results, samples)
    return samples


def _run_dir(root: Path, name: str, method: str, seed: int, steps: dict[int, str], prompts: list[dict]) -> Path:
    run = root / name
    hashed = {"seed": seed, "method": {"_target_": f"ifdistill.train.{method}_module.X"},
              "model": {"name_or_path": "builtin:tiny"}, "optim": {"lr": 1e-4}}
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"run_id": name, "config_hash": f"{name}-hash", "hash_ignore": ["paths"],
                                              "hashed_config": hashed, "launches": []}))
    run_metrics.update(run, lambda d: d.update(run_metrics.empty(name, f"{name}-hash", seed=seed)))
    for i, (step, variant) in enumerate(sorted(steps.items())):
        rel = f"evals/step_{step:06d}"
        _publish(run / rel, prompts, variant)
        results = json.loads((run / rel / "results.json").read_text())
        run_metrics.record_checkpoint(run, step, results, rel, "callback")
        acc = (0.60 if method == "distill" else 0.50) + 0.05 * i
        run_metrics.record_train_metrics(run, step, {"val/synthetic/acc": acc, "val/synthetic/ce": 2.0 - acc,
                                                     "train/acc": 0.9})
    return run


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, "-m", "ifdistill.cli.report", *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=300)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e")
    prompts = _gpt4_rows()
    base = _publish(root / "base_eval", prompts, "first_40_words")
    sft = _run_dir(root / "sweep", "sft", "sft", 42, {100: "first_40_words", 200: "full"}, prompts)
    distill = _run_dir(root / "sweep", "distill", "distill", 42, {100: "no_markdown", 200: "lowercase"}, prompts)
    return root, base, sft, distill


def _prompt_vector(run_dir: Path, step: int) -> dict[str, bool]:
    with open(run_dir / f"evals/step_{step:06d}" / "samples.jsonl") as f:
        return {r["key"]: r["strict_prompt"] for r in map(json.loads, f)}


def test_report_from_run_dirs(runs):
    root, base, sft, distill = runs
    out = root / "report"
    proc = _cli(str(root / "sweep"), "--base-model", str(root / "base_eval"), "-o", str(out),
                "--bootstrap-resamples", "1000")
    assert proc.returncode == 0, proc.stderr
    assert "3 row(s), baseline base" in proc.stdout
    combined = json.loads((out / "metrics.json").read_text())
    rows = {r["name"]: r for r in combined["runs"]}
    assert set(rows) == {"base", "sft", "distill"}
    assert rows["sft"]["method"] == "sft" and rows["distill"]["method"] == "distill"

    # the final metrics are the scorer's aggregates of the final checkpoint's samples
    with open(sft / "evals/step_000200/samples.jsonl") as f:
        expected = aggregate([json.loads(line) for line in f])
    assert rows["sft"]["final"]["prompt_level_strict_acc"] == pytest.approx(expected["prompt_level_strict_acc"])
    assert rows["sft"]["final"]["inst_level_loose_acc_stderr"] == pytest.approx(expected["inst_level_loose_acc_stderr"])
    # teacher-forced metrics found under the SFT module's names (val/<set>/acc, val/<set>/ce)
    assert rows["distill"]["tfa"] == pytest.approx(0.65) and rows["distill"]["tfce"] == pytest.approx(1.35)

    base_vec = {s["key"]: s["strict_prompt"] for s in base}
    for d in combined["deltas"]:
        run_vec = _prompt_vector(sft if d["run"] == "sft" else distill, 200)
        keys = sorted(base_vec)
        test = mcnemar_exact([base_vec[k] for k in keys], [run_vec[k] for k in keys])
        assert (d["mcnemar"]["strict"]["gained"], d["mcnemar"]["strict"]["lost"]) == (test["b01"], test["b10"])
        assert d["mcnemar"]["strict"]["p_value"] == pytest.approx(test["p_value"])
        assert d["n_paired"] == N_PROMPTS and d["eval_config_match"]

    # lowercasing everything forgets the capital-letter instructions the full answers followed
    lower = combined["per_instruction_type"]["runs"]["distill"]
    caps = lower.get("change_case:english_capital")
    if caps is not None:
        assert caps["run"] == 0.0
    # distill imitates "better" (higher TFA) yet scores lower on IFEval than sft here
    assert ["distill", "sft"] in combined["rankings"]["tfa_disagrees"]

    md = (out / "report.md").read_text()
    assert "## Deltas against base" in md and "| sft | sft |" in md
    with open(out / "report.csv", newline="") as f:
        assert [r["name"] for r in csv.DictReader(f)] == ["base", "distill", "sft"]
    for png in ("ifeval_vs_step.png", "tf_vs_ifeval.png", "per_type_heatmap.png"):
        assert (out / png).stat().st_size > 10_000


def test_icl_gap_from_two_evaluator_dirs(runs, tmp_path):
    root, _, _, _ = runs
    prompts = _gpt4_rows()
    _publish(tmp_path / "k0", prompts, "first_40_words", k=0)
    _publish(tmp_path / "k4", prompts, "full", k=4)
    proc = _cli("icl-gap", str(tmp_path / "k0"), str(tmp_path / "k4"), "-o", str(tmp_path / "gap"),
                "--bootstrap-resamples", "500")
    assert proc.returncode == 0, proc.stderr
    gap = json.loads((tmp_path / "gap" / "icl_gap.json").read_text())
    assert gap["zero_shot"]["k"] == 0 and gap["k_shot"]["k"] == 4 and gap["same_model"]
    assert gap["unexpected_differences"] == []
    assert "# ICL gap" in (tmp_path / "gap" / "icl_gap.md").read_text()
