"""``evaluate(cfg)`` end to end with the transformers backend (in-process, seconds), and the input
errors, each raised before any backend is started."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ifdistill.evaluator import run as run_module
from ifdistill import checksum
from ifdistill.evaluator.cli import load_config
from ifdistill.evaluator.errors import (ChatTemplateError, EmptyDatasetError, EvaluatorError, ModelNotFoundError,
                                        OutputExistsError, PromptTooLongError)
from ifdistill.benchmarks.instruction_following.schema import SAMPLE_SCHEMA, validate
from ifdistill.evaluator.output import read_results
from ifdistill.evaluator.run import evaluate

SMALL = ["eval=ifeval_local", "eval.backend=hf", "eval.data.max_examples=3", "eval.generation.max_new_tokens=4",
         "eval.runtime.progress=false"]


def test_hf_evaluation_writes_valid_results(tmp_path):
    out = tmp_path / "evals" / "base"
    results = evaluate(load_config(SMALL, output_dir=str(out)))
    on_disk, samples = read_results(out)
    assert on_disk.pop("checksum") == checksum.digest(on_disk)  # recorded by the writer over the rest
    assert on_disk == json.loads(json.dumps(results, allow_nan=True).replace("NaN", "null"))
    validate(on_disk)
    for row in samples:
        validate(row, SAMPLE_SCHEMA)
    assert [s["key"] for s in samples] == ["1000", "1001", "1005"]  # data order, IFEval keys
    assert all(s["num_generated_tokens"] <= 4 and s["rendered_prompt"].startswith("<|im_start|>user\n")
               for s in samples)
    assert on_disk["metrics"]["num_prompts"] == 3 and on_disk["counts"]["generated_tokens"] == sum(
        s["num_generated_tokens"] for s in samples)
    assert on_disk["backend"]["name"] == "hf" and on_disk["model"]["kind"] == "model"
    assert on_disk["data"]["eval"]["kind"] == "local" and on_disk["versions"]["transformers"]
    assert on_disk["config"]["eval"]["generation"]["max_new_tokens"] == 4


@pytest.fixture()
def no_backend(monkeypatch):
    """Input errors must surface before the (expensive) backend starts."""
    def refuse(*args, **kwargs):
        raise AssertionError("a backend was started")

    monkeypatch.setattr(run_module, "make_backend", refuse)


@pytest.fixture()
def model_without_template(tiny_model_dir, tmp_path):
    out = tmp_path / "no_template_model"
    shutil.copytree(tiny_model_dir, out)
    (out / "chat_template.jinja").unlink()
    cfg = json.loads((out / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (out / "tokenizer_config.json").write_text(json.dumps(cfg))
    return out


def test_input_errors_are_clear_and_early(no_backend, model_without_template, tmp_path):
    out = str(tmp_path / "out")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    unknown = tmp_path / "unknown.jsonl"
    unknown.write_text(json.dumps({"key": 1, "prompt": "Hi.", "instruction_id_list": ["format:haiku"],
                                   "kwargs": [{}]}) + "\n")
    cases = [
        (ModelNotFoundError, "does not exist", [f"model.name_or_path={tmp_path / 'missing_model'}"]),
        (ChatTemplateError, "no chat template", [f"model.name_or_path={model_without_template}"]),
        (EmptyDatasetError, "holds no prompt", [f"eval.data.path={empty}"]),
        (EvaluatorError, "evaluation row 1: .*format:haiku", [f"eval.data.path={unknown}"]),
        (PromptTooLongError, "context of 32 tokens", ["eval.max_model_len=32"]),
    ]
    for error, message, overrides in cases:
        with pytest.raises(error, match=message):
            evaluate(load_config([*SMALL, *overrides], output_dir=out))
    # a configured template makes the template-less tokenizer usable (up to the backend start)
    template = "'{% for m in messages %}{{ m.content }}{% endfor %}'"
    with pytest.raises(AssertionError, match="backend was started"):
        evaluate(load_config([*SMALL, f"model.name_or_path={model_without_template}",
                                 f"model.chat_template={template}"], output_dir=out))


def test_an_existing_result_is_not_overwritten_silently(no_backend, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text("{}")
    with pytest.raises(OutputExistsError, match="overwrite=true"):
        evaluate(load_config(SMALL, output_dir=str(out)))


def test_the_cli_reports_input_errors_in_one_line(tmp_path):
    script = Path(sys.executable).parent / "ifdistill-eval"
    done = subprocess.run([str(script), *SMALL, f"model.name_or_path={tmp_path / 'missing'}",
                           f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2
    assert f"ifdistill-eval: error: model directory '{tmp_path / 'missing'}' does not exist" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_cli_refuses_a_corrupt_export_before_loading_it(tiny_model_dir, tmp_path):
    """4 KB flipped inside an export's model.safetensors (same size): one error line naming the file,
    exit 2, and no results.json (the check runs before any weight is loaded)."""
    from ifdistill.hashing import weight_hashes
    from tests.support import eval_cli, flip_bytes

    export = tmp_path / "exports" / "step_000010"
    shutil.copytree(tiny_model_dir, export / "model")
    (export / "export.json").write_text(json.dumps({"step": 10, "kinds": ["model"], "base_model": "builtin:tiny",
                                                    "weights": weight_hashes(export, recursive=True)}))
    flip_bytes(export / "model" / "model.safetensors")
    done, out = eval_cli(tmp_path, *SMALL, f"export_dir={export}")
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"ifdistill-eval: error: {export / 'model' / 'model.safetensors'}: sha256" in done.stderr
    assert "Traceback" not in done.stderr and not (out / "results.json").exists()


def test_help_lists_only_the_evaluators_config_groups(tmp_path):
    script = Path(sys.executable).parent / "ifdistill-eval"
    done = subprocess.run([str(script), "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    groups = done.stdout.split("== Configuration groups ==")[1].split("== Config ==")[0]
    named = [line.split(":")[0] for line in groups.splitlines() if ": " in line]
    assert named == ["eval", "model", "paths"], groups
    assert "ifeval_local" in groups and "_base" not in groups  # options from conf/eval/, bases hidden
    assert "outputs/eval/jobs/" in done.stdout and not (tmp_path / "outputs").exists()


@pytest.mark.parametrize("override, says", [("nosuchkey=1", "Key 'nosuchkey' is not in struct"),
                                            ("eval=nosuch", "Could not find 'eval/nosuch'")])
def test_a_malformed_override_is_one_line_and_exit_2(tmp_path, override, says):
    done = subprocess.run([str(Path(sys.executable).parent / "ifdistill-eval"), override], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("ifdistill-eval: error: ") and says in done.stderr


@pytest.mark.slow  # two ifdistill-eval processes (~20 s each on 2 cores)
def test_a_hand_run_prints_its_own_lines_and_a_rerun_repeats_it(tmp_path):
    """By hand, the console holds the evaluator's own lines (the summary, the results path); the libraries'
    INFO records land in console.log beside results.json (``verbose=true`` would show them as well).
    ``ifdistill-eval rerun <eval dir>`` evaluates with the recorded configuration: the same hash and samples."""
    script = str(Path(sys.executable).parent / "ifdistill-eval")
    first, again = tmp_path / "first", tmp_path / "again"
    done = subprocess.run([script, *SMALL, f"output_dir={first}", f"hydra.run.dir={first}"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in (done.stdout + done.stderr).split("\n") if line.strip()]
    assert len(lines) <= 15 and lines[-1].strip() == f"results: {first / 'results.json'}", lines
    assert all("ifdistill" in line or not line.startswith("[") for line in lines), lines  # no library's records
    assert "[INFO]" in (first / "console.log").read_text()
    done = subprocess.run([script, "rerun", str(first), f"output_dir={again}"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (a, _), (b, _) = read_results(first), read_results(again)
    assert a["eval_config_hash"] == b["eval_config_hash"] and a["config"]["eval"] == b["config"]["eval"]
    assert (first / "samples.jsonl").read_bytes() == (again / "samples.jsonl").read_bytes()
    missing = subprocess.run([script, "rerun", str(tmp_path / "nothing")], capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "results.json" in missing.stderr
