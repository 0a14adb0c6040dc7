"""Each eval section's evaluations land in W&B under its own namespace and step axis (real offline run).

An IFEval and an IFBench evaluation of the same checkpoint, logged after training moved on, give
``ifeval/*`` on ``ifeval/step`` and ``ifbench/*`` on ``ifbench/step`` (and ``<benchmark>_type/*``);
a second section of one benchmark (``evals.hard``, IFBench again) logs ``hard/*`` on ``hard/step``,
never into the first's keys; a results.json without ``config.eval.benchmark`` (written before the
field existed) stays IFEval.
"""

from __future__ import annotations

import pytest

from ifdistill.callbacks.eval_logging import benchmark_of, flat_metrics, log_evaluation
from ifdistill.benchmarks.registry import namespaces
from ifdistill.tracking.wandb_offline import find_run_dirs, load_table, read_run


def results(benchmark: str | None, acc: float) -> dict:
    config = {"eval": {"benchmark": benchmark}} if benchmark else {}
    return {"metrics": {"prompt_level_loose_acc": acc, "prompt_level_loose_acc_stderr": 0.01},
            "per_instruction_type": {"x:y": {"strict": acc, "loose": acc}}, "config": config}


def test_benchmark_defaults_to_ifeval():
    assert benchmark_of(results(None, 0.1)) == "ifeval"
    assert set(flat_metrics(results("ifbench", 0.1))) == {
        "ifbench/prompt_level_loose_acc", "ifbench/prompt_level_loose_acc_stderr",
        "ifbench_type/x:y/strict", "ifbench_type/x:y/loose"}


@pytest.fixture
def wandb_logger(tmp_path, monkeypatch):
    import wandb
    from lightning.pytorch.loggers import WandbLogger

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    logger = WandbLogger(project="t", save_dir=str(tmp_path), offline=True)
    yield logger, tmp_path
    wandb.teardown()


def test_two_benchmarks_two_step_axes(wandb_logger, tmp_path):
    """Logged after training reached step 50: each evaluation still lands at its own checkpoint's step."""
    logger, wandb_dir = wandb_logger
    run = logger.experiment
    for s in range(1, 51):
        run.log({"train/loss": 1.0 / s})
    log_evaluation([logger], 20, results(None, 0.25), tmp_path)
    log_evaluation([logger], 20, results("ifbench", 0.125), tmp_path)
    log_evaluation([logger], 40, results("ifbench", 0.5), tmp_path, section="ifbench")
    log_evaluation([logger], 40, results("ifbench", 0.75), tmp_path, section="hard")
    run.finish()
    (run_dir,) = find_run_dirs(wandb_dir)
    got = read_run(run_dir)
    assert got["metrics"]["ifeval/*"] == "ifeval/step" and got["metrics"]["ifbench/*"] == "ifbench/step"
    assert got["metrics"]["ifbench_type/*"] == "ifbench/step"
    ifbench = [(r["ifbench/step"], r["ifbench/prompt_level_loose_acc"]) for r in got["history"]
               if "ifbench/prompt_level_loose_acc" in r]
    ifeval = [(r["ifeval/step"], r["ifeval/prompt_level_loose_acc"]) for r in got["history"]
              if "ifeval/prompt_level_loose_acc" in r]
    assert ifbench == [(20, 0.125), (40, 0.5)] and ifeval == [(20, 0.25)]
    assert not any("ifeval/step" in r and "ifbench/step" in r for r in got["history"])
    assert got["summary"]["ifbench/prompt_level_loose_acc"] == 0.5 and got["summary"]["ifbench/step"] == 40
    assert got["summary"]["ifeval/prompt_level_loose_acc"] == 0.25
    hard = [(r["hard/step"], r["hard/prompt_level_loose_acc"], r["hard_type/x:y/strict"]) for r in got["history"]
            if "hard/prompt_level_loose_acc" in r]
    assert hard == [(40, 0.75, 0.75)] and got["metrics"]["hard/*"] == "hard/step"
    assert got["summary"]["hard/prompt_level_loose_acc"] == 0.75


def test_sections_that_would_share_a_namespace_are_refused():
    assert namespaces({None: "lmeval", "lab": "lmeval", "ifbench": "ifbench"}) == {
        None: "lmeval", "lab": "lab", "ifbench": "ifbench"}
    with pytest.raises(ValueError, match="eval and evals.lmeval would both log W&B keys lmeval/"):
        namespaces({None: "lmeval", "lmeval": "lmeval"})


def _lmeval_evaluation(out_dir, *, corrupt_samples: bool = False):
    """A published lm-eval evaluation of a section mixing a generative task (gsm8k: ``target`` the answer's
    text) and a multiple-choice one (csqa: ``target`` the right choice's index), built with the evaluator's
    own writers from lm-eval's output shape (:data:`tests.unit.evaluator.test_lmeval_output.RES`)."""
    from ifdistill.benchmarks.lmeval.output import metrics_of, sample_rows
    from ifdistill.evaluator.results import publish
    from tests.unit.evaluator.test_lmeval_output import RES

    results = {"config": {"eval": {"benchmark": "lmeval"}}, "metrics": metrics_of(RES), "eval_config_hash": "h"}
    publish(out_dir, results, sample_rows(RES, ["gsm8k", "csqa"]))
    if corrupt_samples:  # a samples file cut short by a full disk
        (out_dir / "samples.jsonl").write_text('{"key": "gsm8k/0", "tar')
    return results


def _land(run_root, out_dir, logger):
    """The checkpoint-eval callback's landing of a finished evaluation of step 20 (section ``lab``)."""
    from ifdistill.callbacks.eval_jobs import EvalEvent, EvalJob, EvalQueue
    from ifdistill.callbacks.evaluations import CheckpointEvaluations
    from ifdistill.runs.rundir import RunDir

    evaluations = CheckpointEvaluations(RunDir(run_root), {None: {"benchmark": "ifeval"}, "lab": {"benchmark": "lmeval"}},
                                        queue=EvalQueue(), source="callback")
    evaluations.land([EvalEvent("ok", EvalJob(20, run_root / "exports", out_dir, [], {}, benchmark="lab"))], [logger])


@pytest.mark.parametrize("corrupt", [False, True], ids=["table", "unreadable-samples"])
def test_a_mixed_lmeval_section_logs_its_metrics_and_table(wandb_logger, tmp_path, capsys, corrupt):
    """Multiple-choice beside generative in one section: the scalars and the samples table read back from the
    offline run, ``target`` as text in both rows; a table that cannot be built (samples.jsonl cut short) costs
    only the table: the scalars are there, the failure is one console line and one metrics.json entry."""
    from ifdistill.results import run_metrics

    logger, wandb_dir = wandb_logger
    out = tmp_path / "run" / "evals" / "lab" / "step_000020"
    results = _lmeval_evaluation(out, corrupt_samples=corrupt)
    _land(tmp_path / "run", out, logger)
    logger.experiment.finish()

    (run_dir,) = find_run_dirs(wandb_dir)
    got = read_run(run_dir)
    expected = {f"lab/{k}": v for k, v in results["metrics"].items() if v is not None}
    rows = [r for r in got["history"] if "lab/csqa/acc" in r]
    assert len(rows) == 1 and {k: rows[0][k] for k in expected} == expected and rows[0]["lab/step"] == 20
    assert got["metrics"]["lab/*"] == "lab/step" and got["summary"]["lab/gsm8k/exact_match/strict-match"] == 0.25
    tables = [r for r in got["history"] if "lab/samples" in r]
    failures = run_metrics.read(tmp_path / "run")["failures"]
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "logging the evaluation failed" in ln]
    if corrupt:
        assert not tables and len(failures) == 1 and len(lines) == 1
        assert "samples.jsonl:1: invalid JSON" in lines[0] and "the metrics were logged" in failures[0]["reason"]
    else:
        assert not failures and not lines and len(tables) == 1 and tables[0]["lab/step"] == 20
        table = load_table(got, tables[0]["lab/samples"])
        target = table["columns"].index("target")
        assert [[row[0], row[target]] for row in table["data"]] == [["gsm8k/0", "4"], ["csqa/0", "1"]]


def test_a_column_of_mixed_types_becomes_text_and_others_keep_theirs():
    from ifdistill.callbacks.eval_logging import one_type_per_column

    rows = [["a", 1, 0.5, None, None], ["b", "x", 0.25, 2, None], ["c", True, None, None, None]]
    assert one_type_per_column(rows) == [["a", "1", 0.5, None, None], ["b", "x", 0.25, 2, None],
                                         ["c", "True", None, None, None]]
    assert one_type_per_column([[1, None], ["", 2.5]]) == [["1", None], ["", 2.5]]
