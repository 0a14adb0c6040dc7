"""Builders of evaluator outputs and run directories in the formats the report reads (for tests).

The files mirror what ``ifdistill-eval`` and the checkpoint callback write: results.json in the
evaluator's layout (``ifdistill/benchmarks/instruction_following/schema.py``; aggregates under ``metrics`` computed by the
real scorer's ``aggregate``, per-type accuracy, ``eval_config_hash``, the resolved config with
``eval.fewshot.k``, the model identity); samples.jsonl with one scored row per prompt; a run's
``config.yaml`` and metrics.json written through :mod:`ifdistill.results.run_metrics`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ifdistill.benchmarks.instruction_following.stats import aggregate, per_instruction_type
from ifdistill.evaluator.results import dumps_results
from ifdistill.results import run_metrics


def sample(key: str, prompt: str, response: str, ids: Sequence[str], kwargs: Sequence[dict],
           strict: Sequence[bool], loose: Sequence[bool]) -> dict[str, Any]:
    """One samples.jsonl row as the evaluator writes it."""
    return {"key": str(key), "prompt": prompt,
            "rendered_prompt": f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n",
            "prompt_num_tokens": 12, "demo_uids": [], "response": response,
            "instruction_id_list": list(ids), "kwargs": [dict(k) for k in kwargs],
            "strict_inst": [bool(x) for x in strict], "loose_inst": [bool(x) for x in loose],
            "strict_prompt": all(strict), "loose_prompt": all(loose),
            "num_generated_tokens": max(1, len(response.split())), "finish_reason": "stop"}


def simple_rows(passes: Sequence[bool], loose: Sequence[bool] | None = None,
                instruction: str = "punctuation:no_comma") -> list[dict[str, Any]]:
    """One instruction per prompt; prompt ``i`` passes strict iff ``passes[i]`` (loose: ``loose[i]``)."""
    loose = passes if loose is None else loose
    return [sample(str(1000 + i), f"prompt {i}", f"response {i}", [instruction], [{}], [s], [lo])
            for i, (s, lo) in enumerate(zip(passes, loose))]


def _hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def results_json(rows: Sequence[Mapping[str, Any]], *, k: int = 0, eval_config_hash: str | None = None,
                 model_path: str = "/models/tiny", eval_overrides: Mapping[str, Any] | None = None,
                 output_dir: str = "out") -> dict[str, Any]:
    """results.json content in the evaluator's layout (``ifdistill.benchmarks.instruction_following.schema.RESULTS_SCHEMA``)."""
    totals = aggregate(list(rows))
    generation = {"greedy": True, "max_new_tokens": 1280, "seed": 0, "chat_template": None,
                  "enable_thinking": None, "stop": [], "stop_token_ids": []}
    eval_cfg = {"backend": "vllm", "dtype": "float32", "max_model_len": 2048,
                "data": {"name": "ifeval", "path": "input_data.jsonl", "layout": "ifeval"},
                "fewshot": {"k": k, "seed": 0, "pool": {"name": "synthetic_train", "synthetic": "train"}},
                "generation": generation, "runtime": {"kv_cache_memory_bytes": 268435456}}
    for dotted, value in (eval_overrides or {}).items():
        node = eval_cfg
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = value
    digest = _hex(model_path)
    return {
        "schema_version": 1,
        "eval_config_hash": eval_config_hash or _hex(json.dumps(eval_cfg, sort_keys=True))[:16],
        "fingerprint": {"fewshot": {"k": k}},
        "metrics": totals,
        "per_instruction_type": per_instruction_type(list(rows)),
        "counts": {"num_prompts": totals["num_prompts"], "num_instructions": totals["num_instructions"],
                   "generated_tokens": sum(r["num_generated_tokens"] for r in rows), "finish_reasons": {"stop": len(rows)}},
        "model": {"configured": model_path, "kind": "model", "path": model_path, "adapter_path": None,
                  "export_dir": None, "tokenizer_path": model_path,
                  "weights_sha256": {"model.safetensors": digest}, "adapter_weights_sha256": {},
                  "weights_digest": digest, "tokenizer_sha256": _hex("tok"), "chat_template_sha256": _hex("tpl"),
                  "adapter_config": None},
        "data": {"eval": {"name": "ifeval", "rows": len(rows)}, "fewshot_pool": None},
        "config": {"eval": eval_cfg, "model": {"name_or_path": model_path}, "adapter_dir": None, "export_dir": None,
                   "export_kind": "auto", "output_dir": output_dir},
        "backend": {"name": "vllm", "settings": {}},
        "versions": {"ifdistill": "0.1.0"},
        "timings": {"prepare_s": 0.5, "load_s": 1.0, "generate_s": 2.0, "score_s": 0.1, "total_s": 3.6,
                    "generated_tokens_per_s": 100.0},
        "created_at": "2026-01-01T00:00:00+00:00", "host": "test",
    }


def write_eval_dir(path: Path, rows: Sequence[Mapping[str, Any]], *, nested: bool = True,
                   **results_kwargs: Any) -> Path:
    """An evaluator output directory; ``nested=False`` puts the aggregates at the top level (an
    older layout the reader still accepts)."""
    path.mkdir(parents=True, exist_ok=True)
    results = results_json(rows, output_dir=str(path), **results_kwargs)
    if not nested:  # an older layout: written before results.json recorded its checksum
        results.update(results.pop("metrics"))
        (path / "results.json").write_text(json.dumps(results, indent=2))
    else:  # the evaluator's own bytes (with the checksum)
        (path / "results.json").write_bytes(dumps_results(results))
    with open(path / "samples.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(dict(r)) + "\n")
    return path


def write_run_dir(path: Path, *, run_id: str, seed: int, config: dict,
                  checkpoints: Mapping[int, Sequence[Mapping[str, Any]]],
                  train: Mapping[int, Mapping[str, float]] | None = None, method: str | None = None,
                  key_config: dict | None = None, config_hash: str | None = None, **eval_kwargs: Any) -> Path:
    """A training run: ``config.yaml``, metrics.json, and ``evals/step_XXXXXX/`` per checkpoint
    (``eval_kwargs``: :func:`results_json`'s, for every checkpoint's evaluation)."""
    from omegaconf import OmegaConf

    path.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.create({**config, "seed": seed}), path / "config.yaml")
    run_metrics.update(path, lambda d: d.update(run_metrics.empty(
        run_id, config_hash or f"cfg-{run_id}", seed=seed, method=method, config=key_config or {})))
    for step, rows in checkpoints.items():
        rel = f"evals/step_{step:06d}"
        write_eval_dir(path / rel, rows, **eval_kwargs)
        results = json.loads((path / rel / "results.json").read_text())
        run_metrics.record_checkpoint(path, step, results, rel, "callback")
    for step, values in (train or {}).items():
        run_metrics.record_train_metrics(path, step, dict(values))
    return path


TYPES = ("punctuation:no_comma", "detectable_format:number_highlighted_sections",
         "length_constraints:number_words", "change_case:english_lowercase", "keywords:existence",
         "detectable_format:json_format", "startend:end_checker", "combination:repeat_prompt")


def skilled_rows(n_prompts: int, skill: Mapping[str, float] | float, *, jitter_seed: int = 0,
                 jitter: float = 0.03, loose_bonus: float = 0.08) -> list[dict[str, Any]]:
    """Prompts with 1-3 instruction types and a fixed difficulty per instruction (the same for every
    call, so two "runs" are correlated per prompt the way real checkpoints are); an instruction is
    followed when its difficulty is under the run's ``skill`` for that type (plus a little jitter)."""
    import random

    layout = random.Random(0)
    noise = random.Random(jitter_seed)
    rows = []
    for i in range(n_prompts):
        ids = layout.sample(TYPES, layout.choice((1, 1, 2, 3)))
        difficulty = [layout.random() for _ in ids]
        level = [(skill[t] if isinstance(skill, Mapping) else skill) + noise.uniform(-jitter, jitter) for t in ids]
        strict = [d < s for d, s in zip(difficulty, level)]
        loose = [d < s + loose_bonus for d, s in zip(difficulty, level)]
        rows.append(sample(str(1000 + i), f"prompt {i}", f"response {i}", ids, [{} for _ in ids], strict, loose))
    return rows


def write_scenario(root: Path, n_prompts: int = 300) -> dict[str, Path]:
    """A base model, an SFT setup with two seeds and a distillation run, five checkpoints each.

    Like ../shared/context.md: distillation imitates better (higher teacher-forced accuracy) yet
    scores lower on IFEval, and it forgets ``detectable_format:json_format`` relative to the base.
    """
    base_skill = {t: 0.3 for t in TYPES} | {"detectable_format:json_format": 0.6}
    base = write_eval_dir(root / "base_eval", skilled_rows(n_prompts, base_skill))
    config = {"model": {"name_or_path": "builtin:tiny"}, "method": {"name": "sft", "lr": 1e-4},
              "data": {"replay_ratio": 0.18}, "paths": {"output_dir": "x"}}
    out = {"base": base}
    steps = (200, 400, 600, 800, 1000)
    curves = {"sft": (0.45, 0.52, 0.55, 0.54, 0.55), "distill": (0.42, 0.47, 0.48, 0.48, 0.46)}
    for name, seed, method in (("sft_s1", 1, "sft"), ("sft_s2", 2, "sft"), ("distill_s1", 1, "distill")):
        cfg = config if method == "sft" else {**config, "method": {"name": "distill", "lr": 1e-4}}
        ckpts, train = {}, {}
        for i, step in enumerate(steps):
            level = curves[method][i]
            skill = {t: level for t in TYPES} | {"detectable_format:json_format": 0.7 if method == "sft" else 0.3}
            ckpts[step] = skilled_rows(n_prompts, skill, jitter_seed=100 * seed + i)
            tfa = (0.55 if method == "sft" else 0.62) + 0.02 * i
            tfce = (1.9 if method == "sft" else 1.7) - 0.05 * i
            train[step] = {"val/tfa": tfa + 0.002 * seed, "val/tfce": tfce}
        out[name] = write_run_dir(root / "sweep" / name, run_id=name, seed=seed, config=cfg, checkpoints=ckpts,
                                  train=train, method=method, key_config={"replay_ratio": 0.18})
    return out


def lmeval_res(tasks: Mapping[str, tuple[str, str, Sequence[float]]]) -> dict[str, Any]:
    """lm-eval's ``evaluate`` output for ``{task: (metric, filter, per-document values)}``: a filter other
    than ``none`` is a generate_until task, ``none`` a multiple-choice (loglikelihood) one. The aggregate
    is the mean and its standard error the sample sd over sqrt(n), as lm-eval's ``mean_stderr``."""
    import statistics

    results, samples = {}, {}
    for task, (metric, filt, values) in tasks.items():
        n = len(values)
        results[task] = {f"{metric},{filt}": sum(values) / n,
                         f"{metric}_stderr,{filt}": statistics.stdev(values) / n ** 0.5, "alias": task}
        rows = []
        for i, v in enumerate(values):
            if filt == "none":
                args, resps = [[f"q{i}", " a"], [f"q{i}", " b"]], [[(-1.0, True)], [(-2.0, False)]]
                filtered = [(-1.0, True), (-2.0, False)]
            else:
                args, resps, filtered = [[f"q{i}", {"until": ["\n"]}]], [[f"answer {i}"]], [f"{i}"]
            rows.append({"doc_id": i, "doc_hash": _hex(f"{task}{i}"), "arguments": args, "resps": resps,
                         "filtered_resps": filtered, "target": "a", "filter": filt, "metrics": [metric],
                         metric: v})
        samples[task] = rows
    return {"results": results, "samples": samples, "versions": {t: 1 for t in tasks},
            "n-shot": {t: 0 for t in tasks}, "higher_is_better": {t: {m: True} for t, (m, _, _) in tasks.items()},
            "n-samples": {t: {"effective": len(v), "original": len(v)} for t, (_, _, v) in tasks.items()}}


def write_lmeval_dir(path: Path, tasks: Mapping[str, tuple[str, str, Sequence[float]]],
                     eval_config_hash: str = "lmeval-cfg") -> dict[str, Any]:
    """An lm-eval evaluator output through the evaluator's own writers (metrics_of, sample_rows, publish);
    returns results.json's content."""
    from ifdistill.benchmarks.lmeval import output
    from ifdistill.evaluator.results import publish

    res = lmeval_res(tasks)
    results = {"schema_version": 1, "eval_config_hash": eval_config_hash, "metrics": output.metrics_of(res),
               "tasks": output.task_records(res), "config": {"eval": {"benchmark": "lmeval"}}}
    publish(path, results, output.sample_rows(res, list(tasks)))
    return results


def add_lmeval(run_dir: Path, step: int, tasks: Mapping[str, tuple[str, str, Sequence[float]]],
               eval_config_hash: str = "lmeval-cfg", name: str = "lmeval") -> None:
    """A training run's extra benchmark ``name`` at ``step`` (``evals/<name>/step_X``, metrics.json)."""
    rel = f"evals/{name}/step_{step:06d}"
    results = write_lmeval_dir(run_dir / rel, tasks, eval_config_hash)
    run_metrics.record_checkpoint(run_dir, step, results, rel, "callback", benchmark=name)
