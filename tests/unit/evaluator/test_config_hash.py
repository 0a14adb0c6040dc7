"""eval_config_hash changes with every generation, data, template, few-shot, backend or scorer setting,
and stays when only output paths or resource settings (eval.runtime) change.

Every key of ``eval.generation`` and ``eval.runtime`` is perturbed automatically, so a key added later
is covered without editing this test. ``prepare`` does all the work up to the hash (no backend).
"""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from ifdistill.evaluator import run as run_module
from ifdistill.evaluator.cli import load_config
from ifdistill.evaluator.run import prepare
from ifdistill.evaluator.settings import GenerationSettings, RuntimeSettings
from ifdistill.benchmarks.registry import get as _benchmark

BASE = ["eval=ifeval_local", "eval.data.max_examples=12", "eval.generation.max_new_tokens=64"]
OTHER_TEMPLATE = ("{%- for m in messages -%}{{- '<|im_start|>' + m['role'] + ':\\n' + m['content'] + '<|im_end|>\\n' -}}"
                  "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant:\\n' -}}{%- endif -%}")


@pytest.fixture(autouse=True)
def _no_process_changes(monkeypatch):
    """Runtime perturbations must not pin or re-device the test process itself."""
    monkeypatch.setattr(run_module, "apply_runtime", lambda runtime: None)


def _hash(tmp_path, *overrides: str) -> str:
    return prepare(load_config([*BASE, *overrides], output_dir=str(tmp_path / "out"))).eval_config_hash


@pytest.fixture(scope="module")
def base_hash(tmp_path_factory):
    return _hash(tmp_path_factory.mktemp("base"))


def _changed(name: str, default):
    """A different, valid value for a setting of the given default."""
    special = {"chat_template": repr(OTHER_TEMPLATE), "enable_thinking": "false", "strip_thinking": "true", "system_prompt": "'Be brief.'",
               "temperature": "0.7", "top_p": "0.9", "stop": "['###']", "stop_token_ids": "[5]",
               "cpu_threads_bind": "nobind", "hf_device": "cpu", "cuda_visible_devices": "'0'",
               "gpu_memory_utilization": "0.5", "enforce_eager": "false"}
    if name in special:
        return special[name]
    if isinstance(default, bool):
        return str(not default).lower()
    if isinstance(default, int):
        return str(default + 1)
    if default is None:
        return "3"
    raise AssertionError(f"no perturbation for {name}={default!r}")


GENERATION_KEYS = [f.name for f in dataclasses.fields(GenerationSettings)]
RUNTIME_KEYS = [f.name for f in dataclasses.fields(RuntimeSettings)]


SAMPLED = "eval.generation.greedy=false"  # k responses per prompt need sampling


@pytest.mark.parametrize("key", GENERATION_KEYS)
def test_every_generation_setting_changes_the_hash(key, tmp_path, base_hash):
    default = getattr(GenerationSettings(), key)
    if key == "max_new_tokens":
        default = 64
    if key == "samples":  # against a sampled evaluation of one response per prompt
        assert _hash(tmp_path, SAMPLED, f"eval.generation.samples={_changed(key, default)}") != _hash(tmp_path, SAMPLED)
        return
    assert _hash(tmp_path, f"eval.generation.{key}={_changed(key, default)}") != base_hash


def test_a_setting_added_later_leaves_every_hash_at_its_default(tmp_path, base_hash):
    """``samples`` enters the fingerprint only away from its default (HASHED_WHEN_SET): stated or not, one
    response per prompt hashes as before the setting existed (the pinned hashes:
    tests/unit/evaluator/test_benchmark_identity.py)."""
    plan = prepare(load_config([*BASE, "eval.generation.samples=1"], output_dir=str(tmp_path / "out")))
    assert plan.eval_config_hash == base_hash and "samples" not in plan.fingerprint["generation"]
    plan = prepare(load_config([*BASE, SAMPLED, "eval.generation.samples=3"], output_dir=str(tmp_path / "out")))
    assert plan.fingerprint["generation"]["samples"] == 3 and len(plan.requests) == 3 * len(plan.prompts)


@pytest.mark.parametrize("overrides", [
    ["eval.data.max_examples=11"],                                  # other rows
    ["eval=synthetic", "eval.data.max_examples=12", "eval.generation.max_new_tokens=64"],  # other data
    ["eval.fewshot.k=1"],                                           # k-shot
    ["eval.backend=hf"],
    ["eval.dtype=bfloat16"],
    ["eval.max_model_len=1024"],                                    # caps the token budget
    ["model.chat_template=" + repr(OTHER_TEMPLATE)],                # via the model group's interpolation
], ids=lambda o: " ".join(o))
def test_data_fewshot_backend_and_context_change_the_hash(overrides, tmp_path, base_hash):
    assert _hash(tmp_path, *overrides) != base_hash


def test_demo_selection_seed_changes_the_hash(tmp_path):
    assert _hash(tmp_path, "eval.fewshot.k=1") != _hash(tmp_path, "eval.fewshot.k=1", "eval.fewshot.seed=1")


def test_scorer_version_changes_the_hash(tmp_path, base_hash, monkeypatch):
    import ifdistill.benchmarks.instruction_following.scoring as scoring

    monkeypatch.setattr(scoring, "SCORER_VERSION", scoring.SCORER_VERSION + "-next")
    assert _hash(tmp_path) != base_hash


def test_a_changed_prompt_changes_the_hash_but_a_moved_copy_does_not(tmp_path, base_hash):
    copy = tmp_path / "elsewhere" / "ifeval.jsonl"
    copy.parent.mkdir()
    shutil.copy(_benchmark("ifeval").local_rows(), copy)
    assert _hash(tmp_path, f"eval.data.path={copy}") == base_hash
    rows = [json.loads(line) for line in copy.read_text().splitlines()]
    rows[3]["prompt"] += " Please."
    copy.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert _hash(tmp_path, f"eval.data.path={copy}") != base_hash


@pytest.mark.parametrize("key", RUNTIME_KEYS)
def test_resource_settings_leave_the_hash(key, tmp_path, base_hash):
    default = getattr(RuntimeSettings(), key)
    assert _hash(tmp_path, f"eval.runtime.{key}={_changed(key, default)}") == base_hash


def test_output_paths_leave_the_hash(tmp_path, base_hash):
    assert _hash(tmp_path, f"output_dir={tmp_path / 'x' / 'y'}", "overwrite=true",
                 f"paths.output_root={tmp_path / 'root'}") == base_hash


def test_fingerprint_is_recorded_in_readable_form(tmp_path):
    plan = prepare(load_config([*BASE, "eval.fewshot.k=2"], output_dir=str(tmp_path / "out")))
    fp = plan.fingerprint
    assert fp["generation"]["max_new_tokens"] == 64 and fp["fewshot"]["k"] == 2
    assert fp["data"]["num_prompts"] == 12 and len(fp["data"]["rows_sha256"]) == 64
    assert fp["context_len"] == 2048 and fp["backend"] == "vllm"
    assert "runtime" not in fp and "output_dir" not in json.dumps(fp)


def test_a_source_config_error_is_reported_not_taken_for_an_unreachable_hub(tmp_path):
    """The hub fallback is for a hub that cannot be reached; a file given beside google/IFEval's name (both
    ``path`` and ``hf_name`` set) is the user's error, never a silent read of the local IFEval copy."""
    from ifdistill.evaluator.errors import EvaluatorError

    with pytest.raises(EvaluatorError, match="set exactly one of path, hf_name, synthetic"):
        prepare(load_config([*BASE, "eval=ifeval", f"eval.data.path={tmp_path / 'mine.jsonl'}"],
                            output_dir=str(tmp_path / "out")))


def test_the_same_rows_from_the_hub_layout_or_the_hub_fallback_give_the_same_hash(tmp_path, base_hash):
    """Data identity is content: google/IFEval unreachable (tests run offline) -> the shared copy is read
    and recorded as a fallback; rows in the Hugging Face layout (every kwarg present, unused ones None)
    normalise to the same rows."""
    plan = prepare(load_config([*BASE, "eval=ifeval"], output_dir=str(tmp_path / "out")))
    assert plan.eval_config_hash == base_hash
    assert plan.data.identity["fallback_from"]["hf_name"] == "google/IFEval"
    names = sorted({k for line in _benchmark("ifeval").local_rows().read_text().splitlines()
                    for kw in json.loads(line)["kwargs"] for k in kw})
    hub_layout = tmp_path / "hub_layout.jsonl"
    with open(hub_layout, "w") as f:
        for line in _benchmark("ifeval").local_rows().read_text().splitlines():
            row = json.loads(line)
            row["kwargs"] = [{n: kw.get(n) for n in names} for kw in row["kwargs"]]
            f.write(json.dumps(row) + "\n")
    assert _hash(tmp_path, f"eval.data.path={hub_layout}") == base_hash


def test_the_transformers_backends_sampler_is_in_the_hash_of_its_sampled_evaluations_only(tmp_path):
    from ifdistill.evaluator.fingerprint import HF_SAMPLER

    def generation(*overrides):
        return prepare(load_config([*BASE, *overrides], output_dir=str(tmp_path / "out"))).fingerprint["generation"]

    assert generation("eval.backend=hf", SAMPLED)["hf_sampler"] == HF_SAMPLER
    assert "hf_sampler" not in generation("eval.backend=hf") and "hf_sampler" not in generation(SAMPLED)
