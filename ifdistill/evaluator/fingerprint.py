"""``eval_config_hash``: equal exactly when two evaluations generate from the same inputs the same way
and score the same way.

It is the sha256 of a canonical JSON *fingerprint* (stored in results.json next to the hash, so two
results with different hashes can be diffed key by key). The fingerprint holds:

- ``data``: the sha256 of the normalised evaluation rows (:mod:`ifdistill.evaluator.dataset`) -- not
  the path or the source, so a moved file or the hub vs the shared copy of the same rows agree;
- ``template``: sha256 of the effective chat template, ``enable_thinking``, ``system_prompt``;
- ``generation``: every key of ``eval.generation`` (greedy, temperature, top_p, top_k,
  max_new_tokens, stop strings, seed, ...) with the resolved stop token ids; a key added after shipped
  configurations were hashed (``samples``: :data:`~ifdistill.evaluator.settings.HASHED_WHEN_SET`) only away
  from its default, so every hash of an evaluation that does not set it stays what it was; a sampled
  evaluation on the transformers backend adds how that backend draws (:data:`HF_SAMPLER`);
- ``fewshot``: k, the selection seed, the pool's row sha256 and the demos actually chosen per prompt;
- ``prompts``: the sha256 of every rendered prompt's token ids -- whatever else changes what the
  model reads (tokenizer, rendering code) changes the hash too;
- ``backend``, ``dtype``, the effective context length (it caps the per-prompt token budget),
  ``scorer_version`` (:func:`ifdistill.benchmarks.instruction_following.scoring.scorer_version_for` the rows' ids: IFEval's
  version, joined by IFBench's where the rows hold IFBench ids) and :data:`PROTOCOL_VERSION`.

Every field of the benchmark's own config sections (``eval.lmeval``, ``eval.judge``) enters under the
section's key, added by the core after the benchmark's prepare (:mod:`ifdistill.evaluator.identity`).
An LLM-judged evaluation (``benchmark: judge``) adds a ``judge`` section
(:func:`ifdistill.benchmarks.judge.run.with_judge`): the judge's weights digest and tokenizer, the active
template's text, its greedy decoding, score range, parser / both-orders rule and the reference responses.

Deliberately *not* in it: ``eval.runtime`` (memory, threads, devices, batch size, progress bar),
output paths, and the evaluated model's identity -- results.json records the model separately, so the same
eval config over the checkpoints of one run shares one hash and the runs are comparable.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Sequence

from ifdistill.evaluator.settings import HASHED_WHEN_SET, EvalSettings, GenerationSettings

# Bump when the evaluator's own rendering, cutting or decoding of responses changes.
PROTOCOL_VERSION = "1"
#: How the transformers backend samples (``greedy: false``): each request with a generator of its own, seeded
#: with its seed (:class:`ifdistill.evaluator.backend_hf.SeededSampling`). In the hash of its sampled
#: evaluations only; greedy ones and vLLM's are not drawn by it.
HF_SAMPLER = "per-request-generator-1"


def canonical_sha256(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()).hexdigest()


def prompt_ids_sha256(prompts: Sequence[Sequence[int]]) -> str:
    h = hashlib.sha256()
    for ids in prompts:
        h.update(json.dumps(list(ids), separators=(",", ":")).encode() + b"\n")
    return h.hexdigest()


def build_fingerprint(settings: EvalSettings, *, data_sha256: str, num_prompts: int, chat_template: str,
                      stop_token_ids: Sequence[int], context_len: int, prompt_ids: Sequence[Sequence[int]],
                      pool_sha256: str | None, demo_selection: Any, scorer_version: str) -> dict[str, Any]:
    """Everything that can change a generation or a score (see the module docstring)."""
    generation = dataclasses.asdict(settings.generation)
    generation.pop("chat_template")  # replaced by the effective template's hash below
    for f in dataclasses.fields(GenerationSettings):
        if f.metadata.get(HASHED_WHEN_SET) and generation[f.name] == f.default:
            del generation[f.name]
    if settings.backend == "hf" and not settings.generation.greedy:
        generation["hf_sampler"] = HF_SAMPLER
    fewshot: dict[str, Any] = {"k": settings.fewshot.k}
    if settings.fewshot.k > 0:
        fewshot.update(seed=settings.fewshot.seed, pool_sha256=pool_sha256,
                       selection_sha256=canonical_sha256(demo_selection))
    return {
        "protocol_version": PROTOCOL_VERSION,
        "scorer_version": scorer_version,
        "data": {"rows_sha256": data_sha256, "num_prompts": num_prompts},
        "template": {"chat_template_sha256": hashlib.sha256(chat_template.encode()).hexdigest(),
                     "enable_thinking": settings.generation.enable_thinking,
                     "system_prompt": settings.generation.system_prompt},
        "generation": {**generation, "stop_token_ids": sorted(int(i) for i in stop_token_ids)},
        "fewshot": fewshot,
        "prompts_sha256": prompt_ids_sha256(prompt_ids),
        "backend": settings.backend,
        "dtype": settings.dtype,
        "context_len": int(context_len),
    }


def config_hash(fingerprint: dict[str, Any]) -> str:
    """The 16-hex-digit ``eval_config_hash`` of a fingerprint."""
    return canonical_sha256(fingerprint)[:16]
