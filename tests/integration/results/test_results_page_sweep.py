"""The results page of a real tiny sweep: ``ifdistill-train -m`` over 2 replay ratios x SFT/distill x
2 seeds (4 steps each, checkpoints at steps 2 and 4, held-out validation with the drift from the base
at steps 0, 2 and 4), every checkpoint evaluated by the checkpoint callback on IFEval (8 synthetic
prompts) and two lm-eval tasks (CommonsenseQA's and GSM8K's definitions -- the latter generative, with a strict
and a lenient filter -- on 8 local documents each), both on the HF backend and served by one persistent evaluator per run; the untrained tiny model evaluated the
same way by ``ifdistill-eval`` as the base row. ``ifdistill-report`` renders the page, and headless
chromium reads report.html's tables back.

Every process here runs on one thread, so the sweep is launched as a researcher narrows one: one
``-m`` per seed (``seed=1`` and ``seed=2``, each over the 4 other combinations), the two side by side
with the base evaluations beside them; the runs land in one ``train/runs`` and are named by every
swept value of the preset, seed included.

After 4 steps the numbers are near chance: the test checks that the page is whole (a row per run, no
gap, a delta and a verdict per run) and that every cell is the one its run's results.json holds; the
learning-and-forgetting section (ifdistill.results.forgetting) has its figures, their captions and
the reversal table in report.html, and each run's drift is 0 at step 0 and grows as it trains.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.lmeval.local_tasks import write_tasks
from tests.unit.results.page_tables import chromium_dom, html_tables, md_table

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
STEPS, EVERY = 4, 2
SEEDS = (1, 2)
N_IFEVAL, N_DOCS = 8, 8
LM_TASK, GEN_TASK = "commonsense_qa_local", "gsm8k_local"
COLUMNS = {"IFEval prompt strict": ("ifeval", "prompt_level_strict_acc"),
           "IFEval inst strict": ("ifeval", "inst_level_strict_acc"),
           "CommonsenseQA": ("lmeval", f"{LM_TASK}/acc"),
           "GSM8K strict": ("lmeval", f"{GEN_TASK}/exact_match/strict-match")}
EXTRA = "callbacks.checkpoint_eval.evals.lmeval"


def _eval_args(prefix: str) -> list[str]:
    """The one eval runtime of IFEval and lm-eval: HF backend, one thread, no progress bars."""
    return [f"{prefix}.backend=hf", f"{prefix}.runtime.num_threads=1", f"{prefix}.runtime.progress=false"]


def _ifeval(prefix: str = "eval") -> list[str]:
    return [f"{prefix}.data.max_examples={N_IFEVAL}", f"{prefix}.generation.max_new_tokens=16", *_eval_args(prefix)]


def _lmeval(prefix: str, tasks: Path) -> list[str]:
    return [f"{prefix}.lmeval.tasks=[{LM_TASK},{GEN_TASK}]", f"{prefix}.lmeval.include_path=[{tasks}]",
            f"{prefix}.lmeval.limit={N_DOCS}", *_eval_args(prefix)]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", "TOKENIZERS_PARALLELISM": "false",
            "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"}


def _start(argv: list[str], log: Path) -> tuple[subprocess.Popen, Path]:
    """The command in its own session (its evaluator servers with it), output to ``log``."""
    with log.open("w") as f:
        return subprocess.Popen(argv, cwd=ROOT, env=_env(), stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True), log


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _wait(started: tuple[subprocess.Popen, Path], timeout: float) -> None:
    proc, log = started
    try:
        proc.wait(timeout=timeout)
    finally:
        _stop(proc)
    assert proc.returncode == 0, "\n".join(log.read_text(errors="replace").splitlines()[-60:])


def _run(argv: list[str], log: Path, timeout: float) -> None:
    _wait(_start(argv, log), timeout)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """The sweep's runs (``train/runs``), the base's evaluations (``base/``) and the page (``report/``)."""
    out = tmp_path_factory.mktemp("page_sweep")
    tasks = write_tasks(out / "lmeval", n_test=N_DOCS)
    sweeps = [_start(_sweep_argv(out, tasks, seed), out / f"train_seed{seed}.log") for seed in SEEDS]
    try:
        base = {"ifeval": ["eval=synthetic", *_ifeval()], "lmeval": ["eval=lmeval", *_lmeval("eval", tasks)]}
        for name, args in base.items():
            _run([sys.executable, "-m", "ifdistill.evaluator.cli", "model=tiny", *args,
                  f"output_dir={out}/base/{name}", f"hydra.run.dir={out}/base/{name}"], out / f"base_{name}.log",
                 timeout=300)
        for started in sweeps:
            _wait(started, timeout=600)
    finally:
        for proc, _ in sweeps:
            _stop(proc)
    columns = [f"{label}={bench}:{metric}" for label, (bench, metric) in COLUMNS.items()]
    _run([sys.executable, "-m", "ifdistill.cli.report", str(out / "train" / "runs"), "--base-model", str(out / "base"),
          "--columns", *columns, "-o", str(out / "report")], out / "report.log", timeout=300)
    return out


def _sweep_argv(out: Path, tasks: Path, seed: int) -> list[str]:
    """``ifdistill-train -m`` over the ratios and methods at one seed, in its own sweep directory."""
    return [sys.executable, "-m", "ifdistill.cli.train", "-m",
          # the replay-sweep preset names each run by its swept values (ratio-0_method-sft_seed-1)
          "experiment=ifeval_replay_sweep", "data.ratio=0,0.5", "method=sft,distill", f"seed={seed}",
          "model=tiny", "data=synthetic_replay", "trainer=cpu", "trainer.accelerator=cpu", "trainer.devices=1",
          "trainer.accumulate_grad_batches=1", "gradient_checkpointing=false", "logger=csv",
          "peft=lora", "peft.r=4", "peft.dropout=0.0",
          "+data.sources.0.max_examples=32", "+data.replay.0.max_examples=32", "data.heldout=4",
          "data.max_length=384", "datamodule.micro_batch_size=2", f"trainer.max_steps={STEPS}",
          "optim.lr=1e-3", "optim.schedule=constant", f"run.eval_every_n_steps={EVERY}",
          f"run.checkpoint_every_n_steps={EVERY}",
          "callbacks=checkpoint_eval", "eval=synthetic", f"callbacks.checkpoint_eval.every_n_steps={EVERY}",
          "callbacks.checkpoint_eval.engine=persistent",  # one evaluator process per run serves both benchmarks
          *_ifeval(), f"+eval@{EXTRA}=lmeval", *_lmeval(EXTRA, tasks),
          f"paths.output_root={out}", f"hydra.sweep.dir={out}/sweep-seed{seed}"]


def _results(run_dir: Path, bench: str) -> dict:
    sub = run_dir / "evals" / ("lmeval" if bench == "lmeval" else "") / f"step_{STEPS:06d}" / "results.json"
    return json.loads(sub.read_text())


def _cell(value: float, se: float) -> str:
    return f"{100 * value:.2f} ± {100 * se:.2f}"


def test_the_page_of_a_real_sweep_has_every_run_and_benchmark(sweep):
    """A row per run named by its swept values after the base row; every cell is the final checkpoint's
    results.json value ± its standard error (base: ifdistill-eval's); a delta per run and column; a verdict
    per run; report.html as chromium builds it holds the same two tables as report.md."""
    md = (sweep / "report" / "report.md").read_text()
    table = md_table(md, "## Results page")
    header, body = table[0], {r[0]: r for r in table[1:]}
    runs = {p.name: p for p in (sweep / "train" / "runs").iterdir() if (p / "run.json").is_file()}
    swept = {f"ratio-{r}_method-{m}_seed-{s}" for r in (0, 0.5) for m in ("sft", "distill") for s in (1, 2)}
    assert {name.rsplit("-", 1)[0] for name in runs} == swept
    assert list(body)[0] == "base" and set(body) == {"base", *runs}
    sources = {"base": lambda bench: json.loads((sweep / "base" / bench / "results.json").read_text())}
    sources.update({name: (lambda bench, d=d: _results(d, bench)) for name, d in runs.items()})
    for name, results in sources.items():
        for label, (bench, metric) in COLUMNS.items():
            metrics = results(bench)["metrics"]
            assert body[name][header.index(label)] == _cell(metrics[metric], metrics[f"{metric}_stderr"]), (name, label)
    verdicts = {body[name][header.index("verdict")].split(" (")[0].split(":")[0] for name in runs}  # the rule's word
    assert verdicts and verdicts <= {"wins", "forgetting", "no clear gain", "underpowered"}, verdicts
    deltas = md_table(md, "### Deltas")
    assert {r[0] for r in deltas[1:]} == set(runs) and {r[1] for r in deltas[1:]} == {"base"}
    assert [f"Δ {label}" for label in COLUMNS] == deltas[0][2:]
    assert all(cell[0] in "+-" for r in deltas[1:] for cell in r[2:]), deltas  # a number in every cell, no gap

    dom = chromium_dom(sweep / "report" / "report.html", sweep / "profile")
    tables = html_tables(dom)
    assert tables[0] == table and tables[1] == deltas


def _drift(run_dir: Path) -> dict[int, float]:
    """KL(base || model) on the new data's held-out set by step: the checkpoints' from metrics.json, step 0's
    (validated before training, logged only to the loggers) from the CSV logger's file."""
    import csv

    from omegaconf import OmegaConf

    key = f"val/{OmegaConf.load(run_dir / 'config.yaml').data.sources[0].name}/kl_base_model"
    out = {int(s): v[key] for s, v in json.loads((run_dir / "metrics.json").read_text())["train"].items() if key in v}
    with next((run_dir / "logs" / "csv").glob("version_*/metrics.csv")).open() as f:
        out.update({0: float(r[key]) for r in csv.DictReader(f) if r["step"] == "0" and r.get(key)})
    return out


def test_the_forgetting_section_draws_the_tradeoff_and_names_reversals_and_drift_grows(sweep):
    """report.html as chromium builds it: the learning-and-forgetting section with a trade-off point per
    run, the trade-off and format-vs-task figures with their captions, and the reversal table (or its
    "none" line) matching the report's metrics.json; every run's drift is 0 at step 0 and grows."""
    report = json.loads((sweep / "report" / "metrics.json").read_text())
    forgetting = report["forgetting"]
    runs = {p.name: p for p in (sweep / "train" / "runs").iterdir() if (p / "run.json").is_file()}
    points = forgetting["tradeoff"]["points"]
    assert {p["run"] for p in points} == set(runs) and all(p["step"] == STEPS for p in points)
    assert len({p["method"] for p in points}) == 2 and sorted({p["replay_ratio"] for p in points}) == [0, 0.5]
    assert all(p["drift"] is not None and p["drift"] > 0 for p in points)
    gen = f"{GEN_TASK}: strict-match parse rate vs accuracy"
    for name in runs:  # base at step 0 and both checkpoints, on IFEval's categories and GSM8K's filters
        series = forgetting["format_task"]["runs"][name]
        for curve in (series["IFEval: format vs content instructions"], series[gen]):
            assert [p["step"] for p in curve["points"]] == [0, EVERY, STEPS]

    dom = chromium_dom(sweep / "report" / "report.html", sweep / "profile-forgetting")
    section = dom.split("<h2>Learning and forgetting</h2>", 1)[1]
    captions = re.findall(r"<figcaption>(.*?)</figcaption>", section, re.S)
    assert [c.split(":")[0] for c in captions] == ["Trade-off", "Format vs task over steps"], captions
    assert "colour = method, marker = replay ratio" in captions[0] and "drift from the base on x" in captions[0]
    tables = html_tables(section)
    assert {r[0] for r in tables[0][1:]} == set(runs)  # the trade-off table: a row per run
    reversals = forgetting["reversal"]["reversals"]
    if reversals:
        assert tables[1][1:] == [[r["column"], str(r["step"]), r["ahead_at_step"], *r_cells(r)] for r in reversals]
    else:
        assert "No pair of runs reverses." in section

    for name, run_dir in runs.items():
        drift = _drift(run_dir)
        assert sorted(drift) == [0, EVERY, STEPS], (name, drift)
        assert drift[0] == 0.0 and 0.0 < drift[EVERY] < drift[STEPS], (name, drift)


def r_cells(r: dict) -> list[str]:
    return [f"{100 * r['delta_at_step']:+.2f} ± {100 * r['se_at_step']:.2f}", r["ahead_at_final"],
            f"{100 * r['delta_at_final']:+.2f} ± {100 * r['se_at_final']:.2f}"]
