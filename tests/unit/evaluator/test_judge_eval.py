"""``eval=judge`` through the evaluator's one path: what enters eval_config_hash (phase 1 only: no
engine starts), bad input (one line, exit 2, nothing on disk), and a pairwise evaluation end to end
with the transformers backend and the tiny model as judge."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ifdistill.benchmarks.judge import verdicts as V
from ifdistill.config import ConfigError
from ifdistill.evaluator import run as run_module
from ifdistill.evaluator.cli import load_config
from ifdistill.evaluator.errors import EvaluatorError
from ifdistill.evaluator.output import metric_values, read_results
from ifdistill.paths import shared_data_dir

N = 3
JUDGE = ["eval=judge", "eval.data.hf_name=null", "eval.data.path=${paths.shared_data_dir}/ifeval/input_data.jsonl",
         "eval.backend=hf", f"eval.data.max_examples={N}", "eval.generation.max_new_tokens=4",
         "eval.runtime.progress=false", "eval.judge.model.name_or_path=builtin:tiny", "eval.judge.max_new_tokens=4"]


def _rows(n: int = N) -> list[dict]:
    lines = (Path(shared_data_dir()) / "ifeval" / "input_data.jsonl").read_text().splitlines()[:n]
    return [json.loads(line) for line in lines]


def write_reference(path: Path, answer: str = "A reference answer {response_b}.", rows=None) -> Path:
    """A samples.jsonl of reference responses for the first prompts (key, prompt, response)."""
    rows = rows if rows is not None else [{"key": str(r["key"]), "prompt": r["prompt"], "response": f"{answer} {i}"}
                                          for i, r in enumerate(_rows())]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _prepare(tmp_path, *extra):
    return run_module.prepare(load_config([*JUDGE, *extra], output_dir=str(tmp_path / "out")))


def _pairwise(ref: Path) -> list[str]:
    return ["eval.judge.mode=pairwise", f"eval.judge.reference={ref}"]


@pytest.fixture()
def perturbed_judge(tiny_model_dir, tmp_path):
    """A copy of the tiny model with one weight changed: another judge under an unremarkable path."""
    from safetensors.torch import load_file, save_file

    out = tmp_path / "judge_b"
    shutil.copytree(tiny_model_dir, out)
    (weights,) = out.glob("*.safetensors")
    tensors = load_file(weights)
    name = sorted(tensors)[0]
    tensors[name] = tensors[name] + 1e-3
    save_file(tensors, weights, metadata={"format": "pt"})
    return out


def test_judge_identity_enters_the_hash(tmp_path, tiny_model_dir, perturbed_judge):
    base = _prepare(tmp_path)
    assert base.fingerprint["judge"]["weights_digest"] == base.judge_identity["weights_digest"]
    same = {
        "judge copied elsewhere": _prepare(tmp_path, f"eval.judge.model.name_or_path={shutil.copytree(tiny_model_dir, tmp_path / 'copy')}"),
        "runtime only": _prepare(tmp_path, "eval.runtime.hf_batch_size=2"),
        "the other mode's template": _prepare(tmp_path, "eval.judge.pairwise_template='{prompt} {response_a} {response_b}!'"),
    }
    for name, plan in same.items():
        assert plan.eval_config_hash == base.eval_config_hash, name
    other = {
        "judge weights": _prepare(tmp_path, f"eval.judge.model.name_or_path={perturbed_judge}"),
        "template": _prepare(tmp_path, "eval.judge.absolute_template='Rate 1-10. {prompt} {response} Score:'"),
        "judge decoding": _prepare(tmp_path, "eval.judge.max_new_tokens=8"),
        "score range": _prepare(tmp_path, "eval.judge.score_max=5"),
        "score range's low end": _prepare(tmp_path, "eval.judge.score_min=2"),
        "judge dtype": _prepare(tmp_path, "eval.judge.model.dtype=bfloat16"),
        "judge thinking": _prepare(tmp_path, "eval.judge.model.enable_thinking=true"),
        "judge context": _prepare(tmp_path, "eval.judge.model.max_model_len=1024"),
        "judge chat template": _prepare(tmp_path, "eval.judge.model.chat_template='{% for m in messages %}{{ m.content }}{% endfor %}'"),
        "evaluated model's generation": _prepare(tmp_path, "eval.generation.max_new_tokens=5"),
    }
    for name, plan in other.items():
        assert plan.eval_config_hash != base.eval_config_hash, name
    ref_a = _prepare(tmp_path, *_pairwise(write_reference(tmp_path / "a.jsonl")))
    ref_a_moved = _prepare(tmp_path, *_pairwise(write_reference(tmp_path / "a_moved.jsonl")))
    ref_b = _prepare(tmp_path, *_pairwise(write_reference(tmp_path / "b.jsonl", answer="Another answer")))
    assert ref_a.eval_config_hash == ref_a_moved.eval_config_hash  # the responses, not the path
    assert len({base.eval_config_hash, ref_a.eval_config_hash, ref_b.eval_config_hash}) == 3
    assert ref_a.fingerprint["judge"]["order_rule"] == "both_orders"


@pytest.mark.parametrize("case,expect", [
    ("missing file", "no such file"),
    ("row without prompt key", "no row with field 'key' '1005'"),
    ("prompt text differs", ":2: field 'prompt' differs"),
    ("response missing", ":3: field 'response' missing"),
    ("not json", ":1: invalid JSON"),
    ("not utf-8", r":2: not UTF-8 text \(byte 7: "),
])
def test_bad_reference_names_file_row_and_field(tmp_path, case, expect):
    rows = [{"key": str(r["key"]), "prompt": r["prompt"], "response": "x"} for r in _rows()]
    ref = tmp_path / "ref.jsonl"
    if case == "row without prompt key":
        rows = rows[:2]
    elif case == "prompt text differs":
        rows[1]["prompt"] += " (edited)"
    elif case == "response missing":
        del rows[2]["response"]
    if case == "not json":
        ref.write_text("{not json\n")
    elif case == "not utf-8":  # a Latin-1 line among UTF-8 ones
        ref.write_bytes(json.dumps(rows[0]).encode() + b'\n{"k": "\xe9"}\n')
    elif case != "missing file":
        write_reference(ref, rows=rows)
    with pytest.raises(EvaluatorError, match=expect) as err:
        _prepare(tmp_path, *_pairwise(ref))
    assert str(ref) in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("override,expect", [
    ("eval.judge.mode=ranking", "eval.judge.mode must be one of"),
    ("eval.judge.mode=pairwise", "eval.judge.reference: mode pairwise needs"),
    ("eval.judge.absolute_template='no placeholders'", "eval.judge.absolute_template: lacks the placeholder {prompt}"),
])
def test_bad_judge_config(tmp_path, override, expect):
    with pytest.raises(ConfigError, match=expect):
        _prepare(tmp_path, override)
    assert not (tmp_path / "out").exists()


def test_missing_judge_model_is_named(tmp_path):
    with pytest.raises(EvaluatorError, match=r"^eval\.judge\.model: .*no_such_judge") as err:
        _prepare(tmp_path, f"eval.judge.model.name_or_path={tmp_path / 'no_such_judge'}")
    assert "\n" not in str(err.value) and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_cli_bad_reference_exits_2_with_one_line(tmp_path):
    out = tmp_path / "out"
    argv = [str(Path(sys.executable).parent / "ifdistill-eval"), *JUDGE, *_pairwise(tmp_path / "missing.jsonl"),
            f"output_dir={out}", f"hydra.run.dir={tmp_path / 'hydra'}"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("ifdistill-eval: error:")]
    assert len(lines) == 1 and "missing.jsonl: no such file" in lines[0]
    assert not out.exists()


@pytest.mark.slow
def test_pairwise_judge_end_to_end(tmp_path):
    """The tiny model answers and judges (both orders); samples.jsonl holds each judgement's prompt, raw
    text and verdict, and results.json's metrics are the aggregates of those verdicts."""
    ref = write_reference(tmp_path / "ref.jsonl")
    plan = run_module.prepare(load_config([*JUDGE, *_pairwise(ref)], output_dir=str(tmp_path / "out")))
    results = run_module.execute(plan)
    on_disk, samples = read_results(tmp_path / "out")
    assert on_disk["eval_config_hash"] == plan.eval_config_hash == results["eval_config_hash"]
    assert on_disk["config"]["eval"]["benchmark"] == "judge"
    assert on_disk["judge"]["model"]["weights_digest"] == plan.fingerprint["judge"]["weights_digest"]
    assert [s["key"] for s in samples] == [str(r["key"]) for r in _rows()]
    references = {json.loads(line)["key"]: json.loads(line)["response"] for line in ref.read_text().splitlines()}
    verdicts, outcomes = [], []
    for s in samples:
        assert [j["order"] for j in s["judgements"]] == list(V.ORDERS)
        first, second = s["judgements"]
        assert s["reference_response"] == references[s["key"]]
        # candidate first: the candidate's text sits before the reference's in the judge's prompt
        assert first["judge_prompt"].index(s["response"]) < first["judge_prompt"].index(s["reference_response"])
        assert second["judge_prompt"].index(s["reference_response"]) < second["judge_prompt"].rindex(s["response"])
        parsed = [V.parse_preference(j["judge_raw"]) for j in (first, second)]
        assert [p.as_dict() for p in parsed] == [first["verdict"], second["verdict"]]
        assert s["outcome"] == V.pair_outcome(*parsed)
        verdicts += parsed
        outcomes.append(s["outcome"])
    expected = {**V.pairwise_metrics(outcomes, verdicts), "num_prompts": N}
    assert on_disk["metrics"] == json.loads(json.dumps(expected).replace("NaN", "null"))
    assert on_disk["counts"]["num_judgements"] == 2 * N
    # what W&B (judge/*), metrics.json and the results page read: every numeric metric, nulls left out
    assert metric_values(on_disk) == {k: float(v) for k, v in on_disk["metrics"].items()
                                      if isinstance(v, (int, float)) and not isinstance(v, bool)}
