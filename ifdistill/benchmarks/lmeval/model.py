"""``EngineLM``: lm-eval's language-model interface on the evaluator's own backends (vLLM or HF).

lm-eval's tasks send three kinds of request; each becomes token ids here and goes to the same backend
object that generates IFEval's responses (:mod:`ifdistill.evaluator.backends`), in the persistent
server too:

- ``loglikelihood`` (multiple choice): lm-eval's own :class:`~lm_eval.api.model.TemplateLM` splits each
  ``(context, continuation)`` into ids (trailing context spaces move to the continuation; the whole
  string is encoded, then cut at the context's length); :meth:`EngineLM._loglikelihood_tokens` keeps
  the last ``max_length + 1`` ids and asks the backend for the continuation's summed log-prob and
  whether every token was the argmax (HF: a forward pass; vLLM: prompt log-probs).
- ``loglikelihood_rolling`` (perplexity): lm-eval's disjoint rolling windows of ``max_length``
  predicted tokens, each window scored as above, summed per document.
- ``generate_until``: the task's ``generation_kwargs`` (stop strings, ``max_gen_toks``, greedy or
  not) with the evaluator's stop token ids and per-request seeds; the raw ids are cut at the first
  stop token and the budget, decoded without special tokens and cut at the first stop string, as
  lm-eval's ``hf`` model does. With ``eval.generation.strip_thinking`` (on with ``enable_thinking``)
  lm-eval's filters see only the answer after ``</think>``, as IFEval's scorer does.

Tokenisation follows lm-eval's ``hf`` model (``tok_encode``: the tokenizer's own special tokens,
none added to a string that already starts with the prefix token; prefix token = BOS, else EOS), so
the two read identical ids. ``max_length`` is the evaluator's context length minus one: a vLLM prompt
holds the context *and* the scored continuation, so the longest scored sequence must fit the engine.

The backend is attached after the requests are rendered: :mod:`ifdistill.benchmarks.lmeval.run`
renders and hashes every request before any engine starts (the chat template needs only the tokenizer).
"""

from __future__ import annotations

import collections
import json
from typing import Any, Optional, Sequence

from lm_eval.api.model import TemplateLM
from lm_eval.models.utils import (_add_special_kwargs, handle_stop_sequences, has_bos_prefix, normalize_gen_kwargs,
                                  postprocess_generated_text)
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from ifdistill.evaluator.generation import Request, Sampling, request_seed, scored_text

DEFAULT_MAX_GEN_TOKS = 256  # lm-eval's default when a task's generation_kwargs name no budget


class EngineLM(TemplateLM):
    """One model for lm-eval's evaluator; its backend is attached by :meth:`attach`."""

    def __init__(self, tokenizer: Any, *, chat_template: str, enable_thinking: Optional[bool], max_length: int,
                 stop_token_ids: Sequence[int], seed: int, name: str, strip_thinking: bool = False) -> None:
        super().__init__()
        self.strip_thinking = strip_thinking
        self.tokenizer = tokenizer
        self._template = chat_template
        self.enable_thinking = enable_thinking
        self._max_length = max_length
        self.stop_token_ids = tuple(int(i) for i in stop_token_ids)
        self.seed = seed
        self._name = name
        self.backend: Any = None
        self.adapter_dir: Optional[str] = None
        self.progress = False
        self.finish_reasons: collections.Counter = collections.Counter()
        self.generated_tokens = 0
        self.scored_rows = 0

    def attach(self, backend: Any, *, adapter_dir: Optional[str], progress: bool) -> None:
        self.backend, self.adapter_dir, self.progress = backend, adapter_dir, progress

    def _backend(self) -> Any:
        if self.backend is None:
            raise RuntimeError("EngineLM has no backend attached (requests are only rendered in prepare)")
        return self.backend

    # -- tokenisation and the chat template, as lm-eval's hf model ---------------------------------------
    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def prefix_token_id(self) -> int:
        bos = self.tokenizer.bos_token_id
        return bos if bos is not None else self.tokenizer.eos_token_id

    @property
    def max_length(self) -> int:
        return self._max_length

    @property
    def tokenizer_name(self) -> str:
        return self._name.replace("/", "__")

    def tok_encode(self, string: str, add_special_tokens: Optional[bool] = None, left_truncate_len: Optional[int] = None,
                   **kwargs: Any) -> list[int]:
        special = _add_special_kwargs(add_special_tokens, None)
        if add_special_tokens is None and has_bos_prefix(string, self.tokenizer.decode(self.prefix_token_id)):
            special["add_special_tokens"] = False
        ids = self.tokenizer.encode(string, **special)
        return ids[-left_truncate_len:] if left_truncate_len else ids

    def tok_decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def chat_template(self, chat_template: bool | str = False) -> Optional[str]:
        return self._template if chat_template else None

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        extra = {} if self.enable_thinking is None else {"enable_thinking": self.enable_thinking}
        return self.tokenizer.apply_chat_template(chat_history, chat_template=self._template, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt,
                                                  continue_final_message=not add_generation_prompt, **extra)

    # -- the three request types ------------------------------------------------------------------------
    def _loglikelihood_tokens(self, requests: list, disable_tqdm: bool = False, **kwargs: Any) -> list[tuple[float, bool]]:
        pairs = []
        for _, ctx, cont in requests:
            whole = (list(ctx) + list(cont))[-(self.max_length + 1):]
            pairs.append((tuple(whole[:len(whole) - len(cont)]), tuple(whole[len(whole) - len(cont):])))
        self.scored_rows += len(pairs)
        return self._backend().loglikelihood(pairs, adapter_dir=self.adapter_dir, progress=self.progress)

    def loglikelihood_rolling(self, requests: list, disable_tqdm: bool = False) -> list[float]:
        windows, owner = [], []
        for i, req in enumerate(requests):
            (string,) = req.args
            for ctx, cont in map(make_disjoint_window, get_rolling_token_windows(
                    token_list=self.tok_encode(string), prefix_token=self.prefix_token_id,
                    max_seq_len=self.max_length, context_len=1)):
                windows.append(((string, ""), list(ctx), list(cont)))
                owner.append(i)
        totals = [0.0] * len(requests)
        for (ll, _), i in zip(self._loglikelihood_tokens(windows), owner, strict=True):
            totals[i] += ll
        return totals

    def generate_until(self, requests: list, disable_tqdm: bool = False) -> list[str]:
        groups: dict[str, list[int]] = collections.defaultdict(list)
        for i, req in enumerate(requests):
            groups[json.dumps(req.args[1], sort_keys=True, default=str)].append(i)
        out: list[str] = [""] * len(requests)
        eos = self.tokenizer.decode([self.eot_token_id], skip_special_tokens=False)
        for idx in groups.values():
            kwargs = normalize_gen_kwargs(dict(requests[idx[0]].args[1]), DEFAULT_MAX_GEN_TOKS)
            until = handle_stop_sequences(kwargs.pop("until", None), eos=eos)
            budget = kwargs.pop("max_gen_toks")
            greedy = not kwargs.get("do_sample") or not kwargs.get("temperature")
            sampling = Sampling(greedy=greedy, temperature=float(kwargs.get("temperature") or 1.0),
                                top_p=float(kwargs.get("top_p", 1.0)), top_k=int(kwargs.get("top_k") or 0),
                                stop=tuple(until), stop_token_ids=self.stop_token_ids)
            batch = [Request(token_ids=tuple(self.tok_encode(requests[i].args[0],
                                                             left_truncate_len=self.max_length - budget)),
                             max_tokens=budget, seed=request_seed(self.seed, key))
                     for i, key in zip(idx, _sample_keys([requests[i] for i in idx]))]
            raw = self._backend().generate(batch, sampling, adapter_dir=self.adapter_dir, progress=self.progress)
            for i, ids in zip(idx, raw, strict=True):
                out[i] = self._response(ids[:budget], until)
        return out

    def _response(self, ids: Sequence[int], until: list[str]) -> str:
        """The text lm-eval's filters see: up to the first stop token, decoded, cut at the first stop string."""
        stops = set(self.stop_token_ids)
        cut = next((n for n, t in enumerate(ids) if t in stops), None)
        body = list(ids if cut is None else ids[:cut])
        text = self.tok_decode(body)
        if self.strip_thinking:  # the evaluator's rule (generation.scored_text): the answer after </think>
            text = scored_text(text, True)[0]
        cut_text = postprocess_generated_text(text, until, None)
        self.finish_reasons["stop" if cut is not None or cut_text != text else "length"] += 1
        self.generated_tokens += len(body) + (cut is not None)
        return cut_text


def _sample_keys(requests: Sequence[Any]) -> list[str]:
    """A seed key per request: task, document, request index and which repeat it is (a task with
    ``repeats: k`` sends the same request k times; sampled, each repeat must draw its own answer)."""
    seen: collections.Counter = collections.Counter()
    keys = []
    for r in requests:
        base = f"{r.task_name}/{r.doc_id}/{r.idx}"
        keys.append(f"{base}/{seen[base]}")
        seen[base] += 1
    return keys
