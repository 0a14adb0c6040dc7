"""Which backend serves an evaluation: the one place that knows both implementations.

The backends import the request types of :mod:`ifdistill.evaluator.generation`; choosing between
them lives here, above both, so the request types never import a backend.
"""

from __future__ import annotations

from typing import Sequence

from ifdistill.evaluator.generation import Backend, Request
from ifdistill.evaluator.model_source import ModelSource
from ifdistill.evaluator.settings import EvalSettings
from ifdistill.startup_heap import settle


def make_backend(settings: EvalSettings, source: ModelSource, *, context_len: int, seed: int,
                 persistent: bool = False, requests: Sequence[Request] = ()) -> Backend:
    """Start the configured backend for ``source`` (the expensive step: model load, engine start).
    ``persistent``: a vLLM engine that serves several checkpoints (:mod:`ifdistill.evaluator.serve`).
    ``requests``: what it will generate first (sizes vLLM-CPU's KV cache when the runtime sets none); a
    plan whose ``requests`` are not generation requests (lm-eval's are digests of its tasks' requests, built
    by lm-eval later) sizes the cache for one full-context sequence."""
    if settings.backend == "vllm":
        from ifdistill.evaluator.backend_vllm import VLLMBackend

        return VLLMBackend(source.model_dir, tokenizer_dir=source.tokenizer_dir, dtype=settings.dtype,
                           max_model_len=context_len, seed=seed, runtime=settings.runtime,
                           lora_rank=source.lora_rank if source.adapter_dir else None, persistent=persistent,
                           sequence_tokens=[len(r.token_ids) + r.max_tokens for r in requests
                                            if isinstance(r, Request)], sampled=not settings.generation.greedy)
    from ifdistill.evaluator.backend_hf import HFBackend

    backend = HFBackend(source.model_dir, adapter_dir=source.adapter_dir, tokenizer_dir=source.tokenizer_dir,
                        dtype=settings.dtype, runtime=settings.runtime)
    settle()  # the model is loaded: freeze the start-up heap, resume the collector (ifdistill.startup_heap)
    return backend
