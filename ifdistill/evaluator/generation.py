"""What both backends share: the request, the sampling settings, and how raw ids become a response.

A backend only turns prompt ids into generated ids (:class:`Backend`). Everything that decides the
*response text* happens here, once, for both: cutting at the first stop token, at the per-prompt
token budget and at the first stop string, then decoding with the same tokenizer. So the two
backends can differ only where the models' greedy token choices differ, never in post-processing
(vLLM's own detokenised text is not used).
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Optional, Protocol, Sequence

from ifdistill.evaluator.model_source import ModelSource
from ifdistill.evaluator.settings import GenerationSettings


@dataclasses.dataclass(frozen=True)
class Sampling:
    """Decoding settings common to every prompt of a run."""

    greedy: bool
    temperature: float
    top_p: float
    top_k: int
    stop: tuple[str, ...]
    stop_token_ids: tuple[int, ...]

    @classmethod
    def from_settings(cls, g: GenerationSettings, stop_ids: Sequence[int]) -> "Sampling":
        return cls(greedy=g.greedy, temperature=g.temperature, top_p=g.top_p, top_k=g.top_k,
                   stop=tuple(g.stop), stop_token_ids=tuple(stop_ids))


@dataclasses.dataclass(frozen=True)
class Request:
    """One prompt: its ids, its token budget and its sampling seed (used only when not greedy)."""

    token_ids: tuple[int, ...]
    max_tokens: int
    seed: int


@dataclasses.dataclass(frozen=True)
class Completion:
    token_ids: tuple[int, ...]  # generated ids up to and including the stop token / stop string
    text: str
    finish_reason: str  # "stop" (EOS, stop token or stop string) | "length"


class Backend(Protocol):
    """Generates raw ids and scores continuations; ``model_dir`` / ``adapter_dir`` say what it serves."""

    name: str
    model_dir: str

    def serves(self, source: ModelSource) -> bool: ...

    def generate(self, requests: Sequence[Request], sampling: Sampling, *, adapter_dir: Optional[str],
                 progress: bool) -> list[list[int]]: ...

    def loglikelihood(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], *, adapter_dir: Optional[str],
                      progress: bool) -> list[tuple[float, bool]]:
        """``(log p(continuation | context), greedy)`` per pair of token ids (lm-eval tasks)."""
        ...

    def close(self) -> None: ...


def request_seed(seed: int, key: str) -> int:
    """Per-prompt sampling seed: independent of batch composition and of the other prompts."""
    return int.from_bytes(hashlib.sha256(f"{seed}\0{key}".encode()).digest()[:4], "little") & 0x7FFFFFFF


def sample_seed(seed: int, key: str, index: int) -> int:
    """Sampling seed of response ``index`` of prompt ``key`` (``eval.generation.samples``): the first one's is
    :func:`request_seed`'s, a single sampled evaluation's, so sample 0 of k is that evaluation's response; every
    further one has its own, independent of k and of the other prompts."""
    return request_seed(seed, key if index == 0 else f"{key}\0sample {index}")


def _decode(tokenizer, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=True, clean_up_tokenization_spaces=False)


def finalize(raw: Sequence[int], request: Request, sampling: Sampling, tokenizer) -> Completion:
    """Cut raw generated ids to the response and decode it (identically for every backend)."""
    ids = list(raw)
    stops = set(sampling.stop_token_ids)
    cut = next((i for i, t in enumerate(ids) if t in stops), None)
    if cut is not None and cut < request.max_tokens:
        ids, finish, body = ids[: cut + 1], "stop", ids[:cut]
    else:
        ids = ids[: request.max_tokens]
        finish, body = "length", ids
    text = _decode(tokenizer, body)
    if sampling.stop and any(s in text for s in sampling.stop):
        # The shortest prefix whose text holds a stop string: where vLLM and HF stop generating.
        for n in range(1, len(body) + 1):
            prefix = _decode(tokenizer, body[:n])
            hits = [prefix.find(s) for s in sampling.stop if s in prefix]
            if hits:
                ids, text, finish = body[:n], prefix[: min(hits)], "stop"
                break
    return Completion(token_ids=tuple(ids), text=text, finish_reason=finish)


THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def scored_text(text: str, strip_thinking: bool) -> tuple[str, str]:
    """``(text IFEval scores, think state)`` of a decoded response.

    Without ``strip_thinking`` the whole response is scored (state ``"off"``). With it: the text
    after the last ``</think>`` with its leading newlines removed, as Qwen3's template strips them
    (``"closed"``); a response that opens ``<think>`` and never closes it has no answer and scores
    as ``""`` (``"unterminated"``); a response without a think block is scored whole (``"none"``).
    ``<think>``/``</think>`` are Qwen3 added tokens that are not special, so the decoded text keeps them.
    """
    if not strip_thinking:
        return text, "off"
    if THINK_CLOSE in text:
        return text.rsplit(THINK_CLOSE, 1)[1].lstrip("\n"), "closed"
    if THINK_OPEN in text:
        return "", "unterminated"
    return text, "none"
