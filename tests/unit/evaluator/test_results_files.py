"""results.json's schema (ifdistill's validator, cross-checked with jsonschema where installed) and the atomic
publication of results.json + samples.jsonl."""

from __future__ import annotations

import copy
import json

import pytest

from ifdistill.benchmarks.instruction_following.schema import RESULTS_SCHEMA, SAMPLE_SCHEMA, SchemaError, validate
from ifdistill.evaluator import results as results_module
from ifdistill.evaluator.errors import OutputExistsError
from ifdistill.evaluator.output import RESULTS_FILE, SAMPLES_FILE, read_results
from ifdistill.evaluator.results import publish

H64, H16 = "a" * 64, "0123456789abcdef"


def _metrics():
    out = {}
    for m in ("prompt_level_strict_acc", "inst_level_strict_acc", "prompt_level_loose_acc", "inst_level_loose_acc"):
        out.update({m: 0.5, f"{m}_stderr": 0.1, f"{m}_count": 1})
    return {**out, "num_prompts": 2, "num_instructions": 2}


def valid_results() -> dict:
    return {
        "schema_version": 1, "eval_config_hash": H16, "fingerprint": {"x": 1}, "metrics": _metrics(),
        "per_instruction_type": {"punctuation:no_comma": {"strict_acc": 0.5, "loose_acc": 0.5, "count": 2}},
        "counts": {"num_prompts": 2, "num_instructions": 2, "generated_tokens": 9, "finish_reasons": {"stop": 2}},
        "model": {"configured": "m", "kind": "model", "path": "/m", "adapter_path": None, "export_dir": None,
                  "tokenizer_path": "/m", "weights_sha256": {"model.safetensors": H64}, "adapter_weights_sha256": {},
                  "weights_digest": H64, "tokenizer_sha256": H64, "chat_template_sha256": H64,
                  "adapter_config": None},
        "data": {"eval": {"kind": "local"}, "fewshot_pool": None},
        "config": {"eval": {}, "model": {}, "adapter_dir": None, "export_dir": None, "export_kind": "auto",
                   "output_dir": "/o"},
        "backend": {"name": "hf", "settings": {}},
        "versions": {"python": "3.11.7", "vllm": None},
        "timings": {"prepare_s": 1.0, "load_s": 1.0, "generate_s": 1.0, "score_s": 0.1, "total_s": 3.1,
                    "generated_tokens_per_s": 9.0},
        "created_at": "2026-01-01T00:00:00+00:00", "host": "h",
    }


def valid_sample() -> dict:
    return {"key": "1", "prompt": "p", "rendered_prompt": "<p>", "prompt_num_tokens": 3, "demo_uids": [],
            "response": "r", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}], "strict_inst": [True],
            "loose_inst": [True], "strict_prompt": True, "loose_prompt": True, "num_generated_tokens": 2,
            "finish_reason": "stop"}


def _broken():
    cases = []
    for path, value, message in [
        (("metrics", "prompt_level_strict_acc"), 1.5, "maximum"),
        (("metrics", "num_prompts"), "2", "expected integer"),
        (("eval_config_hash",), "XYZ", "does not match"),
        (("model", "kind"), "lora", "not one of"),
        (("timings", "load_s"), -1, "minimum"),
        (("model", "weights_sha256", "model.safetensors"), "short", "does not match"),
    ]:
        doc = valid_results()
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        cases.append(pytest.param(doc, message, id=".".join(path)))
    missing = valid_results()
    del missing["timings"]["generate_s"]
    cases.append(pytest.param(missing, "missing required key 'generate_s'", id="missing"))
    extra = valid_results()
    extra["metrics"]["accuracy"] = 0.1
    cases.append(pytest.param(extra, "unexpected key 'accuracy'", id="extra"))
    return cases


def test_a_valid_document_passes():
    validate(valid_results())
    validate(valid_sample(), SAMPLE_SCHEMA)
    doc = valid_results()
    doc["metrics"]["prompt_level_strict_acc_stderr"] = None  # NaN is written as null
    validate(doc)


@pytest.mark.parametrize("doc,message", _broken())
def test_violations_name_the_place(doc, message):
    with pytest.raises(SchemaError, match=message):
        validate(doc)


def test_the_schema_is_standard_json_schema():
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(RESULTS_SCHEMA)
    jsonschema.Draft202012Validator.check_schema(SAMPLE_SCHEMA)
    jsonschema.validate(valid_results(), RESULTS_SCHEMA)
    for param in _broken():
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(param.values[0], RESULTS_SCHEMA)


def test_publish_renames_a_fresh_directory_into_place(tmp_path):
    out = publish(tmp_path / "evals" / "step_000100", valid_results(), [valid_sample()])
    results, samples = read_results(out)
    assert results["eval_config_hash"] == H16 and samples == [valid_sample()]
    assert sorted(p.name for p in out.iterdir()) == [RESULTS_FILE, SAMPLES_FILE]
    assert [p.name for p in out.parent.iterdir()] == ["step_000100"]  # no temporary left over


def test_publish_into_a_hydra_run_directory_and_overwrite(tmp_path):
    out = tmp_path / "run"
    (out / ".hydra").mkdir(parents=True)
    (out / "eval.log").write_text("log")
    publish(out, valid_results(), [valid_sample()])
    assert {p.name for p in out.iterdir()} == {".hydra", "eval.log", RESULTS_FILE, SAMPLES_FILE}
    with pytest.raises(OutputExistsError, match="overwrite"):
        publish(out, valid_results(), [])
    changed = valid_results()
    changed["host"] = "other"
    publish(out, changed, [], overwrite=True)
    results, samples = read_results(out)
    assert results["host"] == "other" and samples == []


def test_a_crash_while_writing_leaves_no_result(tmp_path, monkeypatch):
    real = results_module._write

    def failing(path, data):
        if path.name == RESULTS_FILE:
            raise OSError("disk full")
        real(path, data)

    monkeypatch.setattr(results_module, "_write", failing)
    for out in (tmp_path / "fresh", tmp_path / "existing"):
        if out.name == "existing":
            out.mkdir()
            (out / "eval.log").write_text("log")
        with pytest.raises(OSError, match="disk full"):
            publish(out, valid_results(), [valid_sample()])
        assert not (out / RESULTS_FILE).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing"]  # no partial directory left


def test_nan_is_written_as_null_and_samples_are_plain_jsonl(tmp_path):
    doc = copy.deepcopy(valid_results())
    doc["metrics"]["inst_level_loose_acc_stderr"] = float("nan")
    out = publish(tmp_path / "o", doc, [valid_sample(), valid_sample()])
    assert json.loads((out / RESULTS_FILE).read_text())["metrics"]["inst_level_loose_acc_stderr"] is None
    assert len((out / SAMPLES_FILE).read_text().splitlines()) == 2
