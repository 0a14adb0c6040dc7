"""The W&B view of the 24-run replay sweep: sections, panels, metric keys, grouping; offline.

The keys are checked here against the logging code's own lists (``callbacks.eval_logging``, the IFEval
registry, the data module's held-out names); that runs really log them is checked on a real offline
run in tests/integration/train/test_wandb_view_keys.py.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ifdistill.benchmarks.instruction_following.stats import METRICS as AGGREGATES
from ifdistill.benchmarks.ifeval.instruction_ids import INSTRUCTION_REGISTRY
from ifdistill.callbacks.eval_logging import step_key
from ifdistill.runs.sweeps import swept_values
from ifdistill.cli.wandb_view import benchmarks, compose, main, metric_keys, to_workspace, view_spec

STEP_KEY = step_key("ifeval")

ROOT = Path(__file__).resolve().parents[2]
PRESET = ["experiment=ifeval_replay_sweep"]
GROUP = "ifeval_replay_sweep-2026-11-23_05-00-00"


@pytest.fixture(scope="module")
def cfg():
    return compose(PRESET)


@pytest.fixture(scope="module")
def spec(cfg):
    return view_spec(cfg, group=GROUP, entity="lab")


def _panels(spec, section):
    (sec,) = [s for s in spec["sections"] if s["name"] == section]
    return sec["panels"]


def test_sections_are_the_benchmark_the_disagreement_training_and_one_per_type_panel(spec):
    assert [s["name"] for s in spec["sections"]] == [
        "IFEval", "teacher-forced vs IFEval", "training", "IFEval per instruction type"]
    assert spec["benchmarks"] == ["ifeval"]  # the preset evaluates IFEval only: no second-benchmark section
    assert (spec["entity"], spec["project"], spec["group"]) == ("lab", "ifdistill", GROUP)


def test_ifeval_section_plots_prompt_and_instruction_strict_and_loose_on_the_eval_step(spec):
    panels = _panels(spec, "IFEval")
    assert {p["x"] for p in panels} == {STEP_KEY}
    assert sorted(y for p in panels for y in p["y"]) == sorted(f"ifeval/{a}" for a in AGGREGATES)


def test_training_section_plots_train_and_each_held_out_set(spec, cfg):
    panels = _panels(spec, "training")
    ys = {y for p in panels for y in p["y"]}
    held = [cfg.data.sources[0].name, *[r.name for r in cfg.data.replay]]  # the preset's data: new + replay
    assert held == ["ifeval_like", "smol_constraints"]
    # held-out ce and acc, and the drift from the base (run.drift_from_base, on by default)
    assert ys == {"train/ce", "train/acc",
                  *(f"val/{n}/{m}" for n in held for m in ("ce", "acc", "kl_base_model", "kl_model_base"))}
    assert {p["x"] for p in panels} == {"trainer/global_step"}


def test_disagreement_section_pairs_teacher_forced_accuracy_with_prompt_strict_ifeval(spec):
    scatter, tf_line, ifeval_line = _panels(spec, "teacher-forced vs IFEval")
    assert scatter["type"] == "scatter"
    assert (scatter["x"], scatter["y"]) == ("val/ifeval_like/acc", "ifeval/prompt_level_strict_acc")
    assert (tf_line["x"], tf_line["y"]) == ("trainer/global_step", ["val/ifeval_like/acc"])
    assert (ifeval_line["x"], ifeval_line["y"]) == (STEP_KEY, ["ifeval/prompt_level_strict_acc"])


def test_per_type_results_are_one_panel_with_every_ifeval_type(spec):
    (panel,) = _panels(spec, "IFEval per instruction type")
    assert panel["type"] == "bar"
    assert sorted(panel["metrics"]) == sorted(f"ifeval_type/{i}/strict_acc" for i in INSTRUCTION_REGISTRY)
    assert len(panel["metrics"]) == 25


def test_grouping_splits_method_and_ratio_and_averages_seeds_over_the_24_runs(cfg, spec):
    assert spec["groupby"] == ["sweep/ratio", "sweep/method"]
    assert spec["aggregate"] == {"func": "mean", "range": "stderr"}
    params = {k: str(v).split(",") for k, v in cfg.hydra.sweeper.params.items()}
    runs = []
    for combo in itertools.product(*params.values()):
        job = compose([*PRESET, *(f"{k}={v}" for k, v in zip(params, combo))])
        values = swept_values(job)
        # each value is what the job really trains with
        assert values["sweep/ratio"] == job.data.ratio and values["sweep/seed"] == job.seed
        assert job.method._target_.endswith({"sft": "SFTModule", "distill": "ICLDistillModule"}[values["sweep/method"]])
        runs.append(values)
    assert len({tuple(sorted(v.items())) for v in runs}) == 24
    cells: dict[tuple, set] = {}
    for v in runs:
        cells.setdefault(tuple(v[k] for k in spec["groupby"]), set()).add(v["sweep/seed"])
    assert len(cells) == 8 and all(seeds == {1, 2, 3} for seeds in cells.values())
    keys = metric_keys(spec)
    assert keys["config"] <= set(runs[0])


def test_workspace_builds_offline_with_the_group_filter_and_grouping(spec):
    model = to_workspace(spec)._to_model()
    runset = model.spec.section.run_sets[0]
    assert [k.name for k in runset.grouping] == ["sweep/ratio.value", "sweep/method.value"]
    assert runset.filters["filters"] == [
        {"key": {"section": "run", "name": "group"}, "op": "=", "value": GROUP, "disabled": False}]
    sections = model.spec.section.panel_bank_config.sections
    assert [len(s.panels) for s in sections] == [len(s["panels"]) for s in spec["sections"]]
    dumped = json.dumps(model.model_dump(by_alias=True, mode="json"))
    assert '"stderr"' in dumped and "ifeval_type/length_constraints:number_words/strict_acc" in dumped


def test_a_second_benchmark_comes_from_the_config():
    cfg = compose([*PRESET, "callbacks=checkpoint_eval_ifbench"])
    assert benchmarks(cfg) == ["ifeval", "ifbench"]
    assert benchmarks(compose([*PRESET, "callbacks=none"])) == []
    spec = view_spec(cfg, group=GROUP)
    assert {"IFBench", "IFBench per instruction type"} <= {s["name"] for s in spec["sections"]}
    assert {p["x"] for p in _panels(spec, "IFBench")} == {"ifbench/step"}


def test_dry_run_prints_the_spec(capsys, spec):
    assert main([*PRESET, "--group", GROUP, "--entity", "lab", "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out) == spec


def test_the_group_comes_from_the_sweep_dir_through_the_preset_or_is_refused(capsys):
    assert main([*PRESET, "hydra.sweep.dir=outputs/train/multiruns/2026-11-23_05-00-00", "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out)["group"] == GROUP
    assert main([*PRESET, "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--group" in err and len(err.splitlines()) == 1, err


_NO_NET = """
import sys
def hook(event, args):
    if event.startswith(("socket.", "urllib.")) and event != "socket.__new__":
        raise RuntimeError(f"network access: {event} {args!r:.200}")
sys.addaudithook(hook)
import wandb_workspaces.workspaces, wandb_workspaces.reports.v2
from ifdistill.cli.wandb_view import main
sys.exit(main(sys.argv[1:]))
"""


def test_dry_run_touches_no_network_and_needs_no_key_and_wandb_stays_pinned():
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    out = subprocess.run([sys.executable, "-c", _NO_NET, *PRESET, "--group", GROUP, "--dry-run"], cwd=ROOT,
                         env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout)["group"] == GROUP
    pinned = re.search(r'"wandb==([^"]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert version("wandb") == pinned and version("wandb-workspaces") == "0.4.13"


def test_runs_outside_a_sweep_preset_log_no_sweep_keys():
    from hydra.core.hydra_config import HydraConfig

    assert swept_values(compose(["experiment=demo"])) == {}  # a preset without hydra.sweeper.params
    HydraConfig.instance().cfg = None  # a programmatic train(config) call: no Hydra at all
    assert swept_values(OmegaConf.create({"seed": 1, "method": {"_target_": "x"}})) == {}


def test_swept_keys_with_one_short_name_are_refused():
    cfg = OmegaConf.create({"hydra": {"sweeper": {"params": {"optim.lr": "1,2", "teacher.lr": "3,4"}},
                                      "runtime": {"choices": {}}}, "optim": {"lr": 1}, "teacher": {"lr": 3}})
    with pytest.raises(ValueError, match="share the name 'sweep/lr'"):
        swept_values(cfg)


def test_a_sweep_of_several_configs_shows_every_panel_key_of_each_once():
    """Jobs of one sweep whose data differ (a replay source in some): the view unites their held-out sets
    and grouping keys, keeps each panel once and each key once within it."""
    from ifdistill.cli.wandb_view import merge_specs

    def spec(vals, groupby):
        return {"group": "g", "groupby": groupby, "benchmarks": ["ifeval"], "sections": [
            {"name": "training", "panels": [{"type": "line", "title": "held-out ce", "x": "trainer/global_step",
                                              "y": [f"val/{v}/ce" for v in vals]}]},
            {"name": "teacher-forced vs IFEval", "panels": [
                {"type": "scatter", "title": f"val/{vals[0]}/acc vs ifeval", "x": f"val/{vals[0]}/acc", "y": "ifeval/x"}]}]}

    merged = merge_specs([spec(["a"], ["sweep/ratio"]), spec(["a", "b"], ["sweep/ratio", "sweep/method"])])
    assert merged["groupby"] == ["sweep/ratio", "sweep/method"]
    (training,) = [s for s in merged["sections"] if s["name"] == "training"]
    assert [p["y"] for p in training["panels"]] == [["val/a/ce", "val/b/ce"]]
    (scatter,) = [s for s in merged["sections"] if s["name"] == "teacher-forced vs IFEval"]
    assert [p["x"] for p in scatter["panels"]] == ["val/a/acc"]  # the same panel in both jobs: once


@pytest.mark.slow  # lm-eval's task index (built once per machine, then read from its cache)
def test_dry_run_with_ifeval_lmeval_and_the_judge_has_a_section_per_eval_section(capsys):
    """The view of a run evaluating IFEval, two lm-eval sections and the judge at each checkpoint: one section
    per eval section, each line on its own step axis; an extra section's keys are ``<section>/...``, so the
    two lm-eval sections do not share ``lmeval/*``; lm-eval's keys are ``<task>/<metric>[/<filter>]`` of the
    tasks' YAMLs (the keys such a run logs: tests/integration/test_benchmark_contract.py)."""
    overrides = [*PRESET, "+eval@callbacks.checkpoint_eval.evals.lmeval=lmeval",
                 "callbacks.checkpoint_eval.evals.lmeval.lmeval.tasks=[gsm8k]",
                 "+eval@callbacks.checkpoint_eval.evals.lab=lmeval", "callbacks.checkpoint_eval.evals.lab.lmeval.tasks=[commonsense_qa]",
                 "+eval@callbacks.checkpoint_eval.evals.judge=judge"]
    assert main([*overrides, "--group", GROUP, "--dry-run"]) == 0
    spec = json.loads(capsys.readouterr().out)
    assert spec["benchmarks"] == ["ifeval", "lmeval", "lab", "judge"]
    lines = {p["y"][0]: p["x"] for p in _panels(spec, "lm-eval")}
    assert lines == {"lmeval/gsm8k/exact_match/strict-match": "lmeval/step",
                     "lmeval/gsm8k/exact_match/flexible-extract": "lmeval/step"}
    assert {p["y"][0]: p["x"] for p in _panels(spec, "lab (lm-eval)")} == {"lab/commonsense_qa/acc": "lab/step"}
    assert [(p["x"], p["y"]) for p in _panels(spec, "Judge")] == [("judge/step", ["judge/score_mean"])]
