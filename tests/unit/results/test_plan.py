"""The detectable effect of seed groups and ``ifdistill-report plan``, every figure derived here from the
samples.jsonl files: discordances and per-prompt variances counted from the files, the seeds' spread from
a two-way analysis of variance of the 0/1 outcome matrix (numpy), the design from the planning formula
stated in docs/results-page.md.

A pilot sweep: the base model, SFT and off-policy distillation with three seeds each (150 prompts of 1-3
instructions; each seed of a setup has its own skill, so the seeds spread); a single run with its base; a
pilot on a benchmark of only 60 prompts.
"""

from __future__ import annotations

import json
import math
from statistics import NormalDist

import numpy as np
import pytest

from ifdistill.results import page_render, runs
from ifdistill.cli.report import main
from ifdistill.results.page import build_page
from ifdistill.results.report import group_labels

from tests.unit.results.result_files import simple_rows, skilled_rows, write_eval_dir, write_run_dir

N = 150
EFFECT = 0.05  # 5 points
MDE_SE = 2 + NormalDist().inv_cdf(0.8)  # the 2-se rule detects d = (2 + z_0.8) se 80 % of the time
SKILL = {"sft": (0.40, 0.03), "distill": (0.37, 0.01)}  # seed r: skill a + b * r
SEEDS = (1, 2, 3)
TOL = 1e-9  # sums of at most 450 terms of 0/1 in float64, a few square roots


def _data_file(path, rows):
    path.write_text("".join(json.dumps({"key": i}) + "\n" for i in range(rows)))
    return {"eval_overrides": {"data.path": str(path)}}


@pytest.fixture(scope="module")
def pilot(tmp_path_factory):
    root = tmp_path_factory.mktemp("pilot")
    data = _data_file(root / "ifeval_rows.jsonl", 541)
    write_eval_dir(root / "base", skilled_rows(N, 0.3), **data)
    for method, (a, b) in SKILL.items():
        for seed in SEEDS:
            write_run_dir(root / "sweep" / f"{method}_s{seed}", run_id=f"{method}_s{seed}", seed=seed,
                          config={"method": {"name": method}, "lr": 1e-4}, method=method,
                          config_hash=f"cfg-{method}-{seed}",
                          checkpoints={100: skilled_rows(N, a + b * seed, jitter_seed=10 * seed)}, **data)
    return root


def _samples(path):
    return {r["key"]: r for r in map(json.loads, (path / "samples.jsonl").read_text().splitlines())}


def _prompt_matrix(dirs):
    """0/1 prompt-level strict outcomes, one row per evaluation, prompts in key order."""
    rows = [_samples(d) for d in dirs]
    keys = sorted(rows[0])
    return np.array([[float(r[k]["strict_prompt"]) for k in keys] for r in rows])


def _anova(y):
    """(MS_inter, seed variance) of a seeds x prompts matrix: the two-way mean squares, the seed variance
    (MS_seed - MS_inter) / n truncated at 0; none for one seed."""
    k, n = y.shape
    if k < 2:
        return 0.0, 0.0
    seed_means, prompt_means = y.mean(axis=1), y.mean(axis=0)
    ms_seed = n * seed_means.var(ddof=1)
    resid = y - prompt_means[None, :] - seed_means[:, None] + y.mean()
    ms_inter = (resid ** 2).sum() / ((n - 1) * (k - 1))
    return ms_inter, max(0.0, (ms_seed - ms_inter) / n)


def _expected(a, b, b_trained=True):
    """The comparison's figures from two outcome matrices (module docstring)."""
    diff = a.mean(axis=0) - b.mean(axis=0)
    s_d = diff.var(ddof=1)
    (inter_a, seed_a), (inter_b, seed_b) = _anova(a), _anova(b)
    se = math.sqrt(s_d / N + seed_a / len(a) + seed_b / len(b))
    var_d = max(0.0, s_d - inter_a / len(a) - inter_b / len(b))
    var_d = max(var_d, EFFECT * (1 - EFFECT) - inter_a - inter_b)  # the least a 0/1 difference of 5 points varies
    inter, seed = inter_a + (inter_b if b_trained else 0), seed_a + (seed_b if b_trained else 0)

    def prompts(k):
        room = EFFECT ** 2 - MDE_SE ** 2 * seed / k
        x = MDE_SE ** 2 * (var_d + inter / k) / room if room > 0 else math.inf
        assert x == math.inf or abs(x - round(x)) > 1e-6  # rounding up is unambiguous
        return math.ceil(x) if x < math.inf else x

    k = next(k for k in range(1, 65) if prompts(k) <= 541)
    return {"delta": diff.mean(), "se": se, "mde": MDE_SE * se, "seeds": k, "prompts": prompts(k),
            "seed_sd": math.sqrt(seed_a)}


def _dirs(root, method):
    return [root / "sweep" / f"{method}_s{s}" / "evals" / "step_000100" for s in SEEDS]


def test_seed_groups_se_counts_the_spread_across_seeds(pilot):
    loaded = runs.load_all([pilot / "sweep"])
    page = build_page(loaded, [pilot / "base"], labels=group_labels(loaded))
    base = _prompt_matrix([pilot / "base"])
    groups = {g["label"]: g for g in page["seed_groups"]}
    assert set(groups) == {"sft", "distill"}
    for method in SKILL:
        want = _expected(_prompt_matrix(_dirs(pilot, method)), base, b_trained=False)
        got = groups[method]["columns"]["IFEval prompt strict"]
        assert got["se_kind"] == "paired" and got["seeds"] == 3 and groups[method]["seeds"] == list(SEEDS)
        for key in ("delta", "se", "mde", "seed_sd"):
            assert got[key] == pytest.approx(want[key], abs=TOL), key
        # the seeds spread here: the group's se is larger than the prompts' part alone
        assert want["seed_sd"] > 0 and got["se"] > math.sqrt(_prompt_matrix(_dirs(pilot, method)).mean(axis=0)
                                                             .__sub__(base[0]).var(ddof=1) / N)
        gain = want["delta"] >= 2 * want["se"]
        assert groups[method]["verdict"]["verdict"] == ("wins" if gain else "underpowered" if 100 * want["mde"] > 5
                                                        else "no clear gain")
    md = "\n".join(page_render.render_markdown(page))
    want = _expected(_prompt_matrix(_dirs(pilot, "sft")), base, b_trained=False)
    assert f"{100 * want['delta']:+.2f} ± {100 * want['se']:.2f} (MDE {100 * want['mde']:.2f})" in \
        md.split("### Seed groups against base")[1]


def test_plan_of_a_sweep_with_seeds(pilot, tmp_path, capsys):
    assert main(["plan", str(pilot / "sweep"), "--base-model", str(pilot / "base"), "--effect", "5",
                 "--compare", "sft:distill", "--compare", "sft:base", "--columns", "ifeval:prompt_level_strict_acc",
                 "-o", str(tmp_path)]) == 0
    plan = json.loads((tmp_path / "plan.json").read_text())
    sft, distill = _prompt_matrix(_dirs(pilot, "sft")), _prompt_matrix(_dirs(pilot, "distill"))
    cases = {("sft", "distill"): _expected(sft, distill), ("sft", "base"): _expected(sft, _prompt_matrix([pilot / "base"]),
                                                                                      b_trained=False)}
    assert [(c["a"], c["b"]) for c in plan["comparisons"]] == list(cases)
    for comp, (key, want) in zip(plan["comparisons"], cases.items()):
        c = comp["columns"]["prompt_level_strict_acc"]
        assert c["n"] == N and c["seeds"] == [3, 3 if key[1] != "base" else 1] and c["available"] == 541
        assert c["delta"] == pytest.approx(want["delta"], abs=TOL) and c["se"] == pytest.approx(want["se"], abs=TOL)
        assert c["mde"] == pytest.approx(want["mde"], abs=TOL) and c["seed_spread_measured"]
        assert (c["design"]["seeds"], c["design"]["prompts"]) == (want["seeds"], want["prompts"]), key
    assert "seeds needed" in capsys.readouterr().out


def test_plan_of_a_single_run_from_its_discordance(pilot, tmp_path, capsys):
    """One run and its base: prompt level from the discordant prompts, instruction level from the
    clustered standard error of the per-prompt differences (statistics.py's formula); one seed."""
    run = pilot / "sweep" / "sft_s1"
    assert main(["plan", str(run), "--base-model", str(pilot / "base"), "--effect", "5", "-o", str(tmp_path)]) == 0
    plan = json.loads((tmp_path / "plan.json").read_text())
    (comp,) = plan["comparisons"]
    base, mine = _samples(pilot / "base"), _samples(run / "evals" / "step_000100")
    gained = sum(mine[k]["strict_prompt"] and not base[k]["strict_prompt"] for k in base)
    lost = sum(base[k]["strict_prompt"] and not mine[k]["strict_prompt"] for k in base)
    delta = (gained - lost) / N
    var = (gained + lost - N * delta ** 2) / (N - 1)  # the per-prompt variance of a 0/1 difference
    d = [sum(mine[k]["strict_inst"]) - sum(base[k]["strict_inst"]) for k in base]
    m = [len(base[k]["strict_inst"]) for k in base]
    ratio = sum(d) / sum(m)
    inst_se = math.sqrt(N / (N - 1) * sum((x - ratio * y) ** 2 for x, y in zip(d, m))) / sum(m)
    for label, per_prompt in (("IFEval prompt strict", var), ("IFEval inst strict", N * inst_se ** 2)):
        c = comp["columns"][label]
        x = MDE_SE ** 2 * per_prompt / EFFECT ** 2
        assert abs(x - round(x)) > 1e-6 and math.ceil(x) <= 541
        assert c["mde"] == pytest.approx(MDE_SE * math.sqrt(per_prompt / N), abs=TOL)
        assert c["design"]["prompts"] == math.ceil(x) and c["design"]["seeds"] == 1
        assert not c["seed_spread_measured"]
    assert comp["columns"]["IFEval prompt strict"]["discordant"] == [gained, lost]
    out = capsys.readouterr().out
    assert f"+{gained}/−{lost}" in out and "seed spread not measured" in out


def test_a_benchmark_too_small_for_the_effect(tmp_path, capsys):
    """60 prompts in all: the pilot's discordance asks for more at 5 points; the plan says so, with the MDE
    all 60 could reach: (2 + z_0.8) sqrt(var / 60)."""
    data = _data_file(tmp_path / "small.jsonl", 60)
    base_rows, run_rows = skilled_rows(60, 0.3), skilled_rows(60, 0.45, jitter_seed=5)
    write_eval_dir(tmp_path / "base", base_rows, **data)
    write_run_dir(tmp_path / "run", run_id="run", seed=1, config={"lr": 1e-4}, checkpoints={10: run_rows}, **data)
    assert main(["plan", str(tmp_path / "run"), "--base-model", str(tmp_path / "base"), "--effect", "5",
                 "--columns", "ifeval:prompt_level_strict_acc", "-o", str(tmp_path / "plan")]) == 0
    a = np.array([float(r["strict_prompt"]) for r in run_rows]) - np.array([float(r["strict_prompt"]) for r in base_rows])
    var = a.var(ddof=1)
    assert MDE_SE ** 2 * var / EFFECT ** 2 > 60 and var > EFFECT * (1 - EFFECT)  # the pilot's own variance
    c = json.loads((tmp_path / "plan" / "plan.json").read_text())["comparisons"][0]["columns"]["prompt_level_strict_acc"]
    assert c["available"] == 60 and c["design"]["enough"] is False and c["design"]["limit"] == "prompts"
    assert c["design"]["mde_limit"] == pytest.approx(MDE_SE * math.sqrt(var / 60), abs=TOL)
    assert f"even all 60 prompts are not enough: with any number of seeds they detect at best " \
           f"{100 * MDE_SE * math.sqrt(var / 60):.1f} points" in capsys.readouterr().out


def test_plan_refuses_what_it_cannot_plan(pilot, tmp_path, capsys):
    assert main(["plan", str(pilot / "sweep"), "--effect", "5"]) == 2  # no base, no comparison
    assert "--base-model" in capsys.readouterr().err
    assert main(["plan", str(pilot / "sweep"), "--base-model", str(pilot / "base"), "--effect", "5",
                 "--compare", "nosuch:base"]) == 2
    assert "'nosuch' names no seed group" in capsys.readouterr().err
    assert main(["plan", str(pilot / "sweep"), "--base-model", str(pilot / "base"), "--effect", "-1"]) == 2


def test_a_pilot_with_fewer_discordant_prompts_than_the_effect_plans_with_the_floor(tmp_path):
    """One prompt of 48 gained, none lost: the pilot's per-prompt variance (1 - 48 delta^2) / 47 = 0.0204 is
    below what a 0/1 difference with a mean of 5 points must have, 0.05 x 0.95; the plan takes the latter:
    ceil(2.8416^2 x 0.0475 / 0.0025) prompts."""
    base = [i < 6 for i in range(48)]
    write_eval_dir(tmp_path / "base", simple_rows(base))
    write_run_dir(tmp_path / "run", run_id="run", seed=1, config={"lr": 1e-4},
                  checkpoints={12: simple_rows([i < 7 for i in range(48)])})
    assert main(["plan", str(tmp_path / "run"), "--base-model", str(tmp_path / "base"), "--effect", "5",
                 "--columns", "ifeval:prompt_level_strict_acc", "--available", "ifeval=541", "-o", str(tmp_path / "p")]) == 0
    c = json.loads((tmp_path / "p" / "plan.json").read_text())["comparisons"][0]["columns"]["prompt_level_strict_acc"]
    assert c["discordant"] == [1, 0] and c["prompt_var"] == pytest.approx((1 - 48 * (1 / 48) ** 2) / 47, abs=TOL)
    x = MDE_SE ** 2 * EFFECT * (1 - EFFECT) / EFFECT ** 2
    assert c["design"]["prompts"] == math.ceil(x) and c["available"] == 541
