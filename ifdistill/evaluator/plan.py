"""``PlanBase``: what every benchmark's plan holds; :func:`rows_plan`: the plan of a benchmark that generates
one response per row of ``eval.data``.

Each benchmark (:mod:`ifdistill.benchmarks.registry`) builds its own plan; the persistent server
(:mod:`ifdistill.evaluator.serve`) reads only :class:`PlanBase`'s fields, so it serves every benchmark
alike. A benchmark that scores responses to rows (an instruction-following scorer, a judge) builds an
:class:`EvalPlan` with :func:`rows_plan`, handing it its own row check and scorer version, and generates
with :func:`generate_responses`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import socket
import time
from typing import Any, Callable, Iterable, Mapping, Optional

from ifdistill.evaluator import fingerprint as fp
from ifdistill.evaluator.dataset import LoadedRows, load_eval_rows, load_rows
from ifdistill.evaluator.errors import EvaluatorError
from ifdistill.evaluator.generation import Request, Sampling, sample_seed
from ifdistill.evaluator.model_source import ModelSource, context_length, model_identity
from ifdistill.evaluator.prompts import (Prompt, build_prompts, demo_selection, load_tokenizer, max_tokens_for,
                                         stop_token_ids)
from ifdistill.evaluator.results import process_runtime
from ifdistill.evaluator.schema import RESULTS_SCHEMA_VERSION
from ifdistill.evaluator.settings import EvalRunSettings, EvalSettings, as_dict


@dataclasses.dataclass(kw_only=True)
class PlanBase:
    """The model, its engine's needs and the identity, decided before any engine starts."""

    settings: EvalSettings
    run: EvalRunSettings
    model_cfg: dict[str, Any]
    source: ModelSource
    tokenizer: Any
    chat_template: str
    context_len: int
    fingerprint: dict[str, Any]
    eval_config_hash: str
    model_identity: dict[str, Any]
    prepare_s: float

    def results_record(self, *, scores: Mapping[str, Any], data: Mapping[str, Any], backend: Mapping[str, Any],
                       runtime: Optional[Mapping[str, Any]], versions: Mapping[str, Any],
                       timings: Mapping[str, Any]) -> dict[str, Any]:
        """results.json's content: the identity, config and provenance every benchmark records the same way,
        around the benchmark's own ``scores`` (metrics, per-task records, counts), ``data`` identity and
        ``timings``. ``runtime``: the process's as given by its runner, else this process's."""
        return {
            "schema_version": RESULTS_SCHEMA_VERSION,
            "eval_config_hash": self.eval_config_hash,
            "fingerprint": self.fingerprint,
            **scores,
            "model": self.model_identity,
            "data": dict(data),
            "config": {"eval": as_dict(self.settings), "model": self.model_cfg, "adapter_dir": self.run.adapter_dir,
                       "export_dir": self.run.export_dir, "export_kind": self.run.export_kind,
                       "output_dir": str(self.run.output_dir)},
            "backend": dict(backend),
            "runtime": dict(runtime) if runtime is not None else process_runtime(),
            "versions": dict(versions),
            "timings": dict(timings),
            "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "host": socket.gethostname(),
        }


@dataclasses.dataclass(kw_only=True)
class EvalPlan(PlanBase):
    """Everything decided before generation (IFEval-style rows); ``eval_config_hash`` is final here.

    ``requests``: :attr:`samples` per prompt, prompt after prompt (``requests[i * samples + j]`` is sample ``j``
    of ``prompts[i]``)."""

    data: LoadedRows
    pool: Optional[LoadedRows]
    prompts: list[Prompt]
    requests: list[Request]
    sampling: Sampling

    @property
    def samples(self) -> int:
        """Responses per prompt (``eval.generation.samples``)."""
        return self.settings.generation.samples


def generate_responses(plan: EvalPlan, backend: Any, *, own: bool) -> tuple[list[list[int]], dict[str, Any], float]:
    """The evaluated model's raw generated ids for the plan's requests (each caller cuts and decodes them with
    :func:`~ifdistill.evaluator.generation.finalize`); the backend's record for results.json; the seconds
    generation took. ``own``: close ``backend`` afterwards."""
    try:
        t1 = time.perf_counter()
        raw = backend.generate(plan.requests, plan.sampling, adapter_dir=plan.source.adapter_dir,
                               progress=plan.settings.runtime.progress)
        generate_s = time.perf_counter() - t1
        backend_info = {"name": backend.name, "settings": dict(getattr(backend, "settings", {}))}
    finally:
        if own:
            backend.close()
    return raw, backend_info, generate_s


def effective_context_len(settings: EvalSettings, source: ModelSource) -> int:
    """``eval.max_model_len`` capped by the model's own context length (whichever is stated)."""
    limits = [n for n in (settings.max_model_len, context_length(source.model_dir)) if n]
    if not limits:
        raise EvaluatorError("the model's config states no context length; set eval.max_model_len")
    return min(limits)


def rows_plan(settings: EvalSettings, run: EvalRunSettings, model_cfg: dict[str, Any], source: ModelSource, *,
              t0: float, check_row: Callable[[Any], None], scorer_version: Callable[[Iterable[Any]], str],
              data: Optional[LoadedRows] = None) -> EvalPlan:
    """Phase 1 of a benchmark over ``eval.data``'s rows: read them (``check_row`` raises ``ValueError`` on a
    row its scorer cannot score: an input error now, not after generation), render every prompt with its
    demonstrations, check it fits the context, and hash (``scorer_version`` of the rows, see
    :mod:`ifdistill.evaluator.fingerprint`). ``data``: rows the benchmark made itself from ``eval.data``
    (their sha256 is then the data's identity in the hash); default ``eval.data``'s rows as read."""
    data = data if data is not None else load_eval_rows(settings.data)
    for ex in data.examples:
        try:
            check_row(ex)
        except ValueError as err:
            raise EvaluatorError(f"evaluation row {ex.key or ex.uid}: {err}") from None
    pool = load_rows(settings.fewshot.pool, need_completion=True) if settings.fewshot.k > 0 else None
    tokenizer, template = load_tokenizer(source.tokenizer_dir, settings.generation.chat_template)
    prompts = build_prompts(tokenizer, data.examples, generation=settings.generation, fewshot=settings.fewshot,
                            pool=pool.examples if pool else None)
    context_len = effective_context_len(settings, source)
    budgets = max_tokens_for(prompts, context_len, settings.generation.max_new_tokens)
    stops = stop_token_ids(tokenizer, source.model_dir, settings.generation.stop_token_ids)
    sampling = Sampling.from_settings(settings.generation, stops)
    requests = [Request(token_ids=p.token_ids, max_tokens=b, seed=sample_seed(settings.generation.seed, p.key, j))
                for p, b in zip(prompts, budgets) for j in range(settings.generation.samples)]
    fingerprint = fp.build_fingerprint(
        settings, data_sha256=data.rows_sha256, num_prompts=len(prompts), chat_template=template,
        stop_token_ids=stops, context_len=context_len, prompt_ids=[p.token_ids for p in prompts],
        pool_sha256=pool.rows_sha256 if pool else None, demo_selection=demo_selection(prompts),
        scorer_version=scorer_version(data.examples))
    return EvalPlan(settings=settings, run=run, model_cfg=model_cfg, source=source, tokenizer=tokenizer,
                    chat_template=template, data=data, pool=pool, prompts=prompts, requests=requests,
                    sampling=sampling, context_len=context_len, fingerprint=fingerprint,
                    eval_config_hash=fp.config_hash(fingerprint),
                    model_identity=model_identity(source, template), prepare_s=time.perf_counter() - t0)
