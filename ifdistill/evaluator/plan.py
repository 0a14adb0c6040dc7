"""``PlanBase``: what every benchmark's plan holds, apart from the code that builds each plan.

IFEval-style rows (:class:`EvalPlan`, built by :func:`ifdistill.evaluator.run.prepare`) and lm-eval tasks
(:class:`ifdistill.evaluator.lmeval.run.LMEvalPlan`) extend it; the persistent server
(:mod:`ifdistill.evaluator.serve`) reads only these fields, so it serves every benchmark alike. The
judge's plan (:class:`ifdistill.evaluator.judge.run.JudgePlan`) extends :class:`EvalPlan`: its responses
come from the same prompts and generation (:func:`generate_responses`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import socket
import time
from typing import Any, Mapping, Optional

from ifdistill.evaluator.dataset import LoadedRows
from ifdistill.evaluator.generation import Request, Sampling
from ifdistill.evaluator.model_source import ModelSource
from ifdistill.evaluator.prompts import Prompt
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
    """Everything decided before generation (IFEval-style rows); ``eval_config_hash`` is final here."""

    data: LoadedRows
    pool: Optional[LoadedRows]
    prompts: list[Prompt]
    requests: list[Request]
    sampling: Sampling


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
