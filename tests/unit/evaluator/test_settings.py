"""The eval config group composes, validates strictly, and holds the documented defaults."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from ifdistill.config import ConfigError
from ifdistill.evaluator.cli import compose_config, load_config
from ifdistill.evaluator.settings import GenerationSettings, RuntimeSettings, eval_settings


@pytest.mark.parametrize("option", ["ifeval", "ifeval_local", "synthetic"])
def test_every_eval_option_composes_into_the_schema(option, tmp_path):
    cfg = compose_config([f"eval={option}"], output_dir=str(tmp_path))
    config = load_config([f"eval={option}"], output_dir=str(tmp_path))
    settings, run = config.eval, config.run
    assert run.output_dir == str(tmp_path) and run.export_kind == "auto"
    # every key of the schema is present in the config, so any can be overridden without '+'
    for part in ("data", "generation", "runtime"):
        schema_keys = {f.name for f in dataclasses.fields(getattr(settings, part))}
        assert set(cfg.eval[part].keys()) == schema_keys, part
    assert set(cfg.eval.fewshot.pool.keys()) == set(cfg.eval.data.keys())


def test_ifeval_defaults_follow_lm_eval_and_the_model_group(tmp_path):
    cfg = compose_config(["model=qwen3_1.7b"], output_dir=str(tmp_path))
    s = eval_settings(cfg.eval)
    assert s.name == "ifeval" and s.backend == "vllm"
    assert s.data.hf_name == "google/IFEval" and s.data.fallback_path.endswith("ifeval/input_data.jsonl")
    g = s.generation
    assert (g.greedy, g.max_new_tokens, g.stop) == (True, 1280, [])
    # template settings and dtype come from the model group unless the eval group overrides them
    assert g.enable_thinking is False and s.dtype == "bfloat16" and s.max_model_len == 4096
    assert s.fewshot.k == 0


def test_overrides_reach_the_settings(tmp_path):
    cfg = compose_config(["eval=synthetic", "eval.generation.max_new_tokens=7", "eval.fewshot.k=2",
                          "eval.data.max_examples=3", "eval.runtime.cpu_threads_bind=1"], output_dir=str(tmp_path))
    s = eval_settings(cfg.eval)
    assert (s.generation.max_new_tokens, s.fewshot.k, s.data.max_examples) == (7, 2, 3)
    assert s.runtime.cpu_threads_bind == "1"


def test_unknown_or_mistyped_keys_fail_at_start_up(tmp_path):
    cfg = compose_config(["eval=synthetic"], output_dir=str(tmp_path))
    section = OmegaConf.to_container(cfg.eval, resolve=True)
    section["generation"]["max_new_token"] = 3
    with pytest.raises(ConfigError, match="max_new_token"):
        eval_settings(section)
    section = OmegaConf.to_container(cfg.eval, resolve=True)
    section["generation"]["max_new_tokens"] = "many"
    with pytest.raises(ConfigError, match="max_new_tokens"):
        eval_settings(section)
    section = OmegaConf.to_container(cfg.eval, resolve=True)
    section["backend"] = "tgi"
    with pytest.raises(ConfigError, match="backend"):
        eval_settings(section)
    with pytest.raises(ConfigError, match="adaptor_dir"):
        load_config(["+adaptor_dir=x"], output_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="export_kind"):
        load_config(["export_kind=both"], output_dir=str(tmp_path))


def test_fewshot_needs_a_pool_and_sane_numbers():
    with pytest.raises(ConfigError, match="pool"):
        eval_settings({"fewshot": {"k": 2, "pool": None}})
    with pytest.raises(ConfigError, match="max_new_tokens"):
        eval_settings({"generation": {"max_new_tokens": 0}})


def test_runtime_holds_only_resource_settings():
    """A guard for the hash rule: adding a field to runtime is adding it to what the hash ignores."""
    assert {f.name for f in dataclasses.fields(RuntimeSettings)} == {
        "kv_cache_memory_bytes", "gpu_memory_utilization", "cpu_threads_bind", "cpu_reserved", "num_threads",
        "cuda_visible_devices", "tensor_parallel_size", "max_num_seqs", "enforce_eager", "hf_batch_size",
        "hf_device", "progress", "gpu_shared_with_training",  # sleep mode: weights restored exactly on wake-up
        "engine_in_process"}  # where vLLM's engine runs: test_serve_faults compares the two byte for byte
    assert "max_new_tokens" in {f.name for f in dataclasses.fields(GenerationSettings)}


@pytest.mark.parametrize("override, named", [("eval.generation.max_new_tokens=64", "eval.generation.max_new_tokens=64"),
                                             ("eval.generation.greedy=false", "eval.generation.greedy=False"),
                                             ("eval.generation.stop=[Q:]", "eval.generation.stop=['Q:']")])
def test_lmeval_refuses_decoding_settings_its_tasks_decide(override, named, tmp_path):
    """lm-eval decodes as each task's generation_kwargs say: a shared decoding setting changed for an lm-eval
    section would change nothing, so it is refused, naming the setting; the defaults pass."""
    base = ["eval=lmeval", "eval.lmeval.tasks=[gsm8k]"]
    eval_settings(compose_config(base, output_dir=str(tmp_path)).eval)
    with pytest.raises(ConfigError, match="no effect") as err:
        eval_settings(compose_config([*base, override], output_dir=str(tmp_path)).eval)
    assert named in str(err.value) and "generation_kwargs" in str(err.value)
