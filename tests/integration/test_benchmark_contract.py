"""The benchmark contract: every registered benchmark, one tiny evaluation, every consumer of its result.

For each registration (:func:`ifdistill.benchmarks.registry.names`, so a new one is covered without
editing this file) and for a small benchmark registered here from the test tree: its smoke evaluation
(:meth:`~ifdistill.benchmarks.base.Benchmark.smoke_overrides`) runs through ``evaluate`` on the tiny
model with the transformers backend, then

- W&B (offline, read back from the run file): every metric at the checkpoint's step on ``<name>/step``,
  and a samples table whose columns are fields of the benchmark's own samples.jsonl rows;
- the W&B view: every line-panel key of the benchmark's section is a key the run logged, and every
  per-type key logged has a place in the per-type panel;
- ``ifdistill-status``: the run's table shows the benchmark's headline metrics;
- the results page: a column of the headline metric holds the value results.json holds;
- ``ifdistill-report``'s tables: the evaluation against itself has the benchmark's headline metrics as
  columns, each with a delta of exactly 0, paired over every document that holds a value of it.
"""

from __future__ import annotations

import collections
import json
import os
import time
from pathlib import Path
from typing import Any, Optional

import pytest

from ifdistill.callbacks.eval_logging import flat_metrics, log_evaluation, step_key
from ifdistill.benchmarks import registry
from ifdistill.benchmarks.base import Benchmark, short_name
from ifdistill.evaluator.cli import load_config
from ifdistill.evaluator.output import read_results
from ifdistill.evaluator.plan import EvalPlan, generate_responses, rows_plan
from ifdistill.evaluator.results import package_versions, publish
from ifdistill.statistics import binomial_stderr

pytestmark = pytest.mark.slow
STEP = 10
TEST_BENCHMARK = "test_stops"


class StopRate(Benchmark):
    """A benchmark of the test tree: the share of responses that end on their own (finish reason ``stop``)."""

    name = TEST_BENCHMARK
    display = "Stops"
    fractions = True
    sample_columns = ("key", "prompt", "response", "finish_reason")

    def prepare(self, settings: Any, run: Any, model_cfg: dict, source: Any, *, t0: float) -> EvalPlan:
        return rows_plan(settings, run, model_cfg, source, t0=t0, check_row=lambda ex: None,
                         scorer_version=lambda examples: "stops-1")

    def execute(self, plan: EvalPlan, backend: Any, *, own: bool, runtime: Optional[dict], t0: float) -> dict:
        from ifdistill.evaluator.generation import finalize

        raw, backend_info, _ = generate_responses(plan, backend, own=own)
        done = [finalize(ids, r, plan.sampling, plan.tokenizer) for ids, r in zip(raw, plan.requests)]
        stops = sum(c.finish_reason == "stop" for c in done)
        samples = [{"key": p.key, "prompt": p.example.prompt, "response": c.text, "finish_reason": c.finish_reason}
                   for p, c in zip(plan.prompts, done)]
        results = plan.results_record(
            scores={"metrics": {"stop_rate": stops / len(done), "stop_rate_stderr": binomial_stderr(stops, len(done)),
                                "num_prompts": len(done)}},
            data={"eval": plan.data.identity, "fewshot_pool": None}, backend=backend_info, runtime=runtime,
            versions=package_versions(), timings={"total_s": round(time.perf_counter() - t0, 3)})
        publish(plan.run.output_dir, results, samples, overwrite=plan.run.overwrite)
        return results

    def headline_metrics(self, results: Any) -> list[str]:
        return ["stop_rate"]

    def panel_metrics(self, section: Any) -> list[str]:
        return ["stop_rate"]

    def smoke_overrides(self, workdir: Path) -> list[str]:
        return ["eval=ifeval_local", f"eval.benchmark={TEST_BENCHMARK}", "eval.data.max_examples=3",
                "eval.generation.max_new_tokens=4"]


@pytest.fixture(scope="module", autouse=True)
def test_benchmark():
    registry.register(StopRate())
    yield
    registry.unregister(TEST_BENCHMARK)


def _evaluate(name: str, workdir: Path) -> tuple[Path, dict, list[dict]]:
    from ifdistill.evaluator.run import evaluate

    bench = registry.get(name)
    out = workdir / "evals" / name / f"step_{STEP:06d}"
    overrides = [*bench.smoke_overrides(workdir / "data"), "eval.backend=hf", "eval.runtime.progress=false"]
    evaluate(load_config(overrides, output_dir=str(out)))
    results, samples = read_results(out)
    return out, results, samples


def _log_to_wandb(results: dict, out: Path, wandb_dir: Path, monkeypatch) -> dict:
    import wandb
    from lightning.pytorch.loggers import WandbLogger

    from ifdistill.tracking.wandb_offline import find_run_dirs, read_run

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    logger = WandbLogger(project="contract", save_dir=str(wandb_dir), offline=True)
    try:
        for s in range(1, 2 * STEP):  # training moved past the checkpoint before its evaluation finished
            logger.experiment.log({"train/loss": 1.0 / s})
        log_evaluation([logger], STEP, results, out)
        logger.experiment.finish()
    finally:
        wandb.teardown()
    (run_dir,) = find_run_dirs(wandb_dir)
    return read_run(run_dir)


def _status_table(results: dict, out: Path, root: Path, capsys) -> str:
    from ifdistill.results import run_metrics
    from ifdistill.cli.status import main

    run = root / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"run_id": "r", "launches": [
        {"pid": None, "host": os.uname().nodename, "finished": "t", "final_step": STEP}]}))
    run_metrics.record_checkpoint(run, STEP, results, str(out), "callback")
    assert main([str(run)]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("name", [*registry.names(), TEST_BENCHMARK])
def test_every_benchmark_through_every_consumer(name, tmp_path, monkeypatch, capsys):
    from ifdistill.results.page import Column, PageOptions, build_page
    from ifdistill.tracking.wandb_offline import load_table
    from ifdistill.cli.wandb_view import instruction_ids

    bench = registry.get(name)
    out, results, samples = _evaluate(name, tmp_path)
    assert registry.benchmark_of(results) == name and samples
    values = bench.metric_values(results)
    headline = bench.headline_metrics(results)
    # a headline may be undefined (null: e.g. the tiny judge writes no parsable verdict); it is then logged nowhere
    undefined = {h for h in headline if results["metrics"].get(h) is None}
    assert headline and all(h in values or h in undefined for h in headline)

    # W&B, read back: every metric at the checkpoint's step, on the benchmark's own axis
    got = _log_to_wandb(results, out, tmp_path / "wandb", monkeypatch)
    (row,) = [r for r in got["history"] if step_key(name) in r]
    assert row[step_key(name)] == STEP and got["metrics"][f"{name}/*"] == step_key(name)
    flat = flat_metrics(results)
    assert flat and {k: row.get(k) for k in flat} == flat  # the values as logged, bit for bit
    table = load_table(got, row[f"{name}/samples"])
    own_fields = set().union(*(s.keys() for s in samples))
    assert table["columns"] and set(table["columns"]) <= own_fields, (table["columns"], own_fields)
    assert len(table["data"]) == min(64, len(samples))

    # the W&B view: its line panels read keys the run logged
    logged = set().union(*(r.keys() for r in got["history"]))
    panel = [f"{name}/{m}" for m in bench.panel_metrics(results["config"]["eval"])]
    assert panel and set(panel) <= logged | {f"{name}/{h}" for h in undefined}, set(panel) - logged
    types = {k for k in logged if k.startswith(f"{name}_type/")}
    assert types <= {f"{name}_type/{i}/{v}" for i in instruction_ids(name) for v in ("strict_acc", "loose_acc", "count")}

    # ifdistill-status: the headline metrics as columns, this evaluation's values in them
    table_text = _status_table(results, out, tmp_path, capsys)
    header, _, run_row = table_text.splitlines()[:3]
    for metric in headline:
        v = values.get(metric)
        if all(bench.is_fraction(m) for m in headline):  # a percentage column per headline metric
            assert short_name(metric) in header
            assert f"{100 * v:.1f}" in run_row if v is not None else "| - |" in run_row
        elif v is not None:  # one column of every metric, value±stderr
            assert f"{metric} {v:.4f}" in run_row

    # the results page: the base row's cell is results.json's value
    page = build_page([], [out], PageOptions(columns=(Column("headline", name, headline[0]),)))
    cell = page["rows"][0]["cells"]["headline"]
    if headline[0] in undefined:
        assert cell is None
    else:
        assert cell["value"] == values[headline[0]] and cell["eval_config_hash"] == results["eval_config_hash"]
    _report_against_itself(bench, out, values, samples)


def _report_against_itself(bench: Benchmark, out: Path, values: dict, samples: list[dict]) -> None:
    """ifdistill-report's tables of the evaluation and its copy: the headline metrics as columns, a delta of
    0 in each (paired where documents hold the metric), each column's delta in report.md."""
    from ifdistill.results import runs, tables
    from ifdistill.results.report import ReportOptions, build_report

    a, b = runs.load_eval_dir(out, name="a"), runs.load_eval_dir(out, name="b")
    report = build_report([b], a, ReportOptions(n_resamples=10))
    shown = [m for m in bench.headline_metrics({"metrics": a.final.metrics}) if m in values]
    assert [c["metric"] for c in report["columns"]] == bench.headline_metrics({"metrics": a.final.metrics})
    (delta,) = report["deltas"]
    for metric in shown:
        d = delta["metrics"][metric]
        assert d["delta"] == 0 and d["within_2se"] is True, (metric, d)
        documents = bench.document_values(samples, metric) if not bench.prompt_decisions else None
        paired = bench.prompt_decisions or (documents is not None and len(documents) >= 2)
        assert d["se_kind"] == ("paired" if paired else "unpaired"), (metric, d)
    text = tables.render_markdown(report)
    assert all(f"Δ {c['label']}" in text for c in report["columns"]), text


def test_every_registration_has_a_smoke_evaluation_and_its_own_namespace():
    counts = collections.Counter(registry.get(n).name for n in registry.names())
    assert all(c == 1 for c in counts.values()) and sum(registry.get(n).default for n in registry.names()) == 1
    for n in registry.names():
        assert registry.get(n).smoke_overrides.__func__ is not Benchmark.smoke_overrides, n
