"""Grouping hash (what it ignores), seed-group statistics by hand, and reading result directories."""

from __future__ import annotations

import json
import math

import pytest

from ifdistill.benchmarks.instruction_following.stats import METRICS
from ifdistill.evaluator import output as eval_output
from ifdistill.results import run_config, runs, seed_groups

from tests.unit.results.result_files import simple_rows, write_eval_dir, write_run_dir

CONFIG = {
    "seed": 1, "task_name": "train",
    "model": {"name_or_path": "builtin:tiny", "dtype": "float32"},
    "method": {"name": "sft", "lr": 1e-4},
    "data": {"replay_ratio": 0.18, "seed": 7},
    "paths": {"output_dir": "/runs/a"}, "run": {"dir": "outputs/2026-01-01_00-00-00"},
    "logger": {"wandb": {"project": "x"}}, "trainer": {"default_root_dir": "/x", "dirpath": "/ckpt"},
}


def _with(config, **changes):
    out = json.loads(json.dumps(config))
    for dotted, value in changes.items():
        node = out
        *parents, leaf = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def test_grouping_hash_ignores_seed_paths_and_logging_only():
    h = run_config.grouping_hash(CONFIG)
    same = [_with(CONFIG, seed=2), _with(CONFIG, data__seed=8), _with(CONFIG, paths__output_dir="/runs/b"),
            _with(CONFIG, run__dir="outputs/other"), _with(CONFIG, logger__wandb__project="y"),
            _with(CONFIG, trainer__dirpath="/elsewhere"), _with(CONFIG, task_name="again")]
    assert all(run_config.grouping_hash(c) == h for c in same)
    different = [_with(CONFIG, method__lr=2e-4), _with(CONFIG, data__replay_ratio=0.5),
                 _with(CONFIG, model__name_or_path="Qwen/Qwen3-1.7B"),
                 _with(CONFIG, trainer__default_root_dir="/y")]  # not in the ignore list: counts
    assert len({run_config.grouping_hash(c) for c in different} | {h}) == len(different) + 1


def test_differing_keys_name_what_distinguishes_rows():
    configs = [CONFIG, _with(CONFIG, seed=3, data__replay_ratio=0.5), _with(CONFIG, method__lr=2e-4)]
    assert run_config.differing_keys(configs) == ["data.replay_ratio", "method.lr"]


def test_seed_group_mean_and_spread_by_hand(tmp_path):
    # Three seeds of one setup with 3, 5 and 7 of 10 prompts passing; one run of another setup.
    for seed, k in ((1, 3), (2, 5), (3, 7)):
        write_run_dir(tmp_path / f"sft_s{seed}", run_id=f"sft_s{seed}", seed=seed, config=CONFIG,
                      checkpoints={10: simple_rows([i < k for i in range(10)])},
                      train={10: {"val/tfa": 0.1 * seed}})
    write_run_dir(tmp_path / "other", run_id="other", seed=1, config=_with(CONFIG, method__lr=1.0),
                  checkpoints={10: simple_rows([True] * 10)})
    loaded = runs.load_all([tmp_path])
    assert [r.name for r in loaded] == ["other", "sft_s1", "sft_s2", "sft_s3"]
    groups = seed_groups.group_by_seed(loaded, list(METRICS), {r.name: {"tfa": r.train_at(10, ["val/tfa"])[0]} for r in loaded})
    by_n = {g["n"]: g for g in groups}
    assert set(by_n) == {1, 3}
    g = by_n[3]
    assert g["seeds"] == [1, 2, 3] and g["method"] == "sft"
    s = g["stats"]["prompt_level_strict_acc"]
    assert s["mean"] == pytest.approx(0.5) and s["sd"] == pytest.approx(0.2)  # sd of .3 .5 .7 (n-1)
    assert (s["min"], s["max"]) == (pytest.approx(0.3), pytest.approx(0.7))
    assert g["stats"]["tfa"]["mean"] == pytest.approx(0.2) and g["stats"]["tfa"]["sd"] == pytest.approx(0.1)
    assert math.isnan(by_n[1]["stats"]["prompt_level_strict_acc"]["sd"])


def test_eval_output_reads_nested_and_top_level_aggregates(tmp_path):
    rows = simple_rows([True, False, True, True])
    a = eval_output.load(write_eval_dir(tmp_path / "a", rows))
    b = eval_output.load(write_eval_dir(tmp_path / "b", rows, nested=False))
    assert a.metrics["prompt_level_strict_acc"] == b.metrics["prompt_level_strict_acc"] == 0.75
    assert a.per_instruction_type["punctuation:no_comma"]["count"] == 4
    assert [s.strict_prompt for s in a.samples] == [True, False, True, True]
    assert len(a.eval_config_hash) == 16 and a.num_prompts == 4
    assert a.eval_config["eval"]["fewshot"]["k"] == 0 and a.model["kind"] == "model"


def test_unfinished_or_broken_eval_dirs_are_reported(tmp_path):
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "samples.jsonl").write_text("{}\n")
    with pytest.raises(eval_output.EvalOutputError, match="missing"):
        eval_output.load(tmp_path / "half")
    write_eval_dir(tmp_path / "dup", simple_rows([True, True]))
    lines = (tmp_path / "dup" / "samples.jsonl").read_text().splitlines()
    (tmp_path / "dup" / "samples.jsonl").write_text(lines[0] + "\n" + lines[0] + "\n")
    with pytest.raises(eval_output.EvalOutputError, match="duplicate"):
        eval_output.read_samples(tmp_path / "dup")


def test_final_best_and_training_metrics_at_a_step(tmp_path):
    ckpts = {100: simple_rows([i < 4 for i in range(10)]), 200: simple_rows([i < 6 for i in range(10)]),
             250: simple_rows([i < 6 for i in range(10)]), 300: simple_rows([i < 5 for i in range(10)])}
    write_run_dir(tmp_path / "r", run_id="r", seed=0, config=CONFIG, checkpoints=ckpts,
                  train={50: {"val/tfa": 0.4}, 100: {"val/tfa": 0.5, "val/tfce": 2.0}, 250: {"val/tfa": 0.6}})
    run = runs.load_training_run(tmp_path / "r")
    assert run.final.step == 300 and run.best().step == 200  # a tie goes to the earlier step
    assert run.train_at(300, ["val/tfa"]) == (0.6, 250)
    assert run.train_at(300, ["val/tfce"]) == (2.0, 100)
    assert run.train_at(40, ["val/tfa"]) == (None, None)
    assert run.final.output.samples is not None and run.seed == 0
    assert run.method == "sft"  # from config.method.name when metrics.json names none
    assert run.group_hash == run_config.grouping_hash(CONFIG)



@pytest.mark.parametrize("target, method", [
    ("ifdistill.methods.sft.module.SFTModule", "sft"),
    ("ifdistill.methods.onpolicy_distill.module.OnPolicyDistillModule", "onpolicy_distill"),
    ("ifdistill.train.distill_module.ICLDistillModule", "distill"),  # a run configured before method folders
])
def test_the_method_of_a_run_is_its_folder_or_its_old_module(target, method):
    assert runs.method_of({"method": {"_target_": target}}) == method
