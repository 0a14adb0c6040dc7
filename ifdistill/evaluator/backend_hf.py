"""transformers backend: batched, left-padded ``generate`` on the same token-id prompts as vLLM.

For machines without vLLM, and as the cross-check of the vLLM path (greedy responses agree on
>= 95 % of prompts on the fine-tuned tiny model; see tests/integration/evaluator).

- Prompts are sorted by length (longest first: a too-large batch fails at once, and padding is
  small) and restored to input order afterwards. Left padding with an attention mask; transformers
  derives position ids from the mask, so a padded row sees the positions an unpadded one would.
- The model's own generation_config.json is replaced by an empty one before generating: sampling
  defaults or a repetition penalty shipped with a model must not leak into greedy decoding (vLLM is
  started with ``generation_config="vllm"`` for the same reason).
- A batch generates up to its largest per-prompt budget; :func:`~ifdistill.evaluator.generation.finalize`
  cuts each row to its own budget. Greedy decoding is causal, so this equals generating each row
  alone with its own budget.
- Sampling (``greedy: false``) draws each row's tokens with a generator of its own, seeded with its
  request's seed (:class:`SeededSampling`), as vLLM's per-request seeds do: a response depends on its seed
  and its prompt, not on the batch it shares (the k samples of a prompt, ``eval.generation.samples``, are k
  rows with k seeds). The draws are HF's temperature, top-k and top-p rules; the random streams are not
  vLLM's, so the two backends' samples differ.
"""

from __future__ import annotations

from typing import Optional, Sequence

from transformers import LogitsProcessor, StoppingCriteria

from ifdistill.evaluator.generation import Request, Sampling
from ifdistill.evaluator.model_source import ModelSource
from ifdistill.evaluator.settings import RuntimeSettings


def _device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


class TailStopStrings(StoppingCriteria):
    """Stops a row once the decoded tail of its generated ids holds a stop string.

    transformers' own ``stop_strings`` builds a table over the whole vocabulary on every ``generate``
    call (~5 s for Qwen3's 151,936 tokens); this decodes only the last ``longest stop + 2`` tokens per
    row and step. Stopping is only an early exit: :func:`~ifdistill.evaluator.generation.finalize` (and
    lm-eval's post-processing) cut every response at its first stop string whatever was generated
    after it, so a stop noticed late costs time, never a different response."""

    def __init__(self, tokenizer, stops: Sequence[str], prompt_width: int):
        self.tokenizer, self.stops, self.width = tokenizer, [s for s in stops if s], prompt_width
        self.look = max((len(tokenizer.encode(s, add_special_tokens=False)) for s in self.stops), default=0) + 2

    def __call__(self, input_ids, scores, **kwargs):
        import torch

        tails = self.tokenizer.batch_decode(input_ids[:, self.width:][:, -self.look:], skip_special_tokens=False)
        return torch.tensor([any(s in t for s in self.stops) for t in tails], device=input_ids.device)


class SeededSampling(LogitsProcessor):
    """Samples each row's next token with that row's own ``torch.Generator`` and leaves it the only choice, so
    the (greedy) search emits it: per-row seeds, independent of the batch. Temperature, then top-k, then top-p
    (the smallest set of most likely tokens holding ``top_p`` of the mass, at least one), as transformers'
    own warpers apply them."""

    def __init__(self, seeds: Sequence[int], sampling: Sampling, device: str):
        import torch

        self.generators = [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]
        self.temperature, self.top_p, self.top_k = sampling.temperature, sampling.top_p, sampling.top_k

    def __call__(self, input_ids, scores):
        import torch

        logits = scores.float() / self.temperature
        if self.top_k:
            kth = torch.topk(logits, min(self.top_k, logits.shape[-1]), dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if self.top_p < 1.0:
            ordered, index = torch.sort(logits, descending=False, dim=-1)
            tail = ordered.softmax(dim=-1).cumsum(dim=-1) <= 1 - self.top_p
            tail[:, -1] = False  # the most likely token stays
            logits = logits.masked_fill(tail.scatter(1, index, tail), float("-inf"))
        probs = logits.softmax(dim=-1)
        chosen = torch.cat([torch.multinomial(probs[i], 1, generator=g) for i, g in enumerate(self.generators)])
        out = torch.full_like(scores, float("-inf"))
        out[torch.arange(scores.shape[0]), chosen] = 0.0
        return out


class HFBackend:
    name = "hf"

    def __init__(self, model_dir: str, *, adapter_dir: Optional[str], tokenizer_dir: str, dtype: str,
                 runtime: RuntimeSettings):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        if runtime.num_threads:
            torch.set_num_threads(runtime.num_threads)
        self.model_dir, self.adapter_dir = model_dir, adapter_dir
        self.batch_size = max(1, runtime.hf_batch_size)
        self.device = _device(runtime.hf_device)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype))
        model.generation_config = GenerationConfig()
        if adapter_dir:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, adapter_dir)
        self.model = model.to(self.device).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)  # for stop strings only
        self.settings = {"dtype": dtype, "device": self.device, "batch_size": self.batch_size,
                         "num_threads": torch.get_num_threads()}

    def serves(self, source: ModelSource) -> bool:
        return source.model_dir == self.model_dir and source.adapter_dir == self.adapter_dir

    def generate(self, requests: Sequence[Request], sampling: Sampling, *, adapter_dir: Optional[str] = None,
                 progress: bool = True) -> list[list[int]]:
        import torch
        from tqdm.auto import tqdm
        from transformers import GenerationConfig

        if adapter_dir != self.adapter_dir:
            raise ValueError(f"this HF backend serves adapter {self.adapter_dir!r}, not {adapter_dir!r}")
        pad = self.tokenizer.pad_token_id
        pad = sampling.stop_token_ids[0] if pad is None else pad
        order = sorted(range(len(requests)), key=lambda i: (-len(requests[i].token_ids), i))
        results: list[list[int]] = [[] for _ in requests]
        bar = tqdm(total=len(requests), desc="generate (hf)", unit="prompt", disable=not progress)
        for start in range(0, len(order), self.batch_size):
            idx = order[start:start + self.batch_size]
            batch = [requests[i] for i in idx]
            width = max(len(r.token_ids) for r in batch)
            ids = torch.tensor([[pad] * (width - len(r.token_ids)) + list(r.token_ids) for r in batch])
            mask = torch.tensor([[0] * (width - len(r.token_ids)) + [1] * len(r.token_ids) for r in batch])
            # greedy search; sampling is each row's own draw (SeededSampling), which greedy search then emits
            config = GenerationConfig(max_new_tokens=max(r.max_tokens for r in batch), do_sample=False,
                                      temperature=None, top_p=None, top_k=None, repetition_penalty=1.0,
                                      eos_token_id=list(sampling.stop_token_ids), pad_token_id=pad)
            draws = None if sampling.greedy else [SeededSampling([r.seed for r in batch], sampling, self.device)]
            stopping = [TailStopStrings(self.tokenizer, sampling.stop, width)] if sampling.stop else None
            with torch.inference_mode():
                out = self.model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                          generation_config=config, stopping_criteria=stopping,
                                          logits_processor=draws)
            for row, i in enumerate(idx):
                results[i] = out[row, width:].tolist()
            bar.update(len(idx))
        bar.close()
        return results

    def loglikelihood(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], *, adapter_dir: Optional[str] = None,
                      progress: bool = True) -> list[tuple[float, bool]]:
        """``(sum of log p(continuation | context), whether every continuation token is the argmax)`` per
        ``(context ids, continuation ids)`` pair, from one forward pass per batch of distinct rows.

        The model reads ``context + continuation[:-1]``; pairs whose rows are equal (the choices of a
        multiple-choice question that differ only in their one-token answer) share one row. Rows are
        left-padded with explicit position ids, so the last positions of every row align and only the
        last ``max continuation length`` positions' logits are computed (``logits_to_keep``): the
        vocabulary-sized logits of the whole context are never materialised. Log-softmax in float32."""
        import torch
        from tqdm.auto import tqdm

        if adapter_dir != self.adapter_dir:
            raise ValueError(f"this HF backend serves adapter {self.adapter_dir!r}, not {adapter_dir!r}")
        rows: dict[tuple[int, ...], int] = {}
        for ctx, cont in pairs:
            if not cont:
                raise ValueError("an empty continuation has no log-likelihood")
            row = tuple(ctx) + tuple(cont[:-1])
            rows[row] = max(rows.get(row, 0), len(cont))
        unique = sorted(rows, key=lambda r: (-len(r), r))
        logprobs: dict[tuple[int, ...], torch.Tensor] = {}  # row -> [keep, vocab] log-probs of its last positions
        bar = tqdm(total=len(unique), desc="loglikelihood (hf)", unit="row", disable=not progress)
        for start in range(0, len(unique), self.batch_size):
            batch = unique[start:start + self.batch_size]
            width, keep = max(len(r) for r in batch), max(rows[r] for r in batch)
            ids = torch.tensor([[0] * (width - len(r)) + list(r) for r in batch])
            mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in batch])
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            with torch.inference_mode():
                logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                    position_ids=positions.to(self.device), logits_to_keep=keep).logits
                lp = torch.log_softmax(logits.float(), dim=-1).cpu()
            for i, r in enumerate(batch):
                logprobs[r] = lp[i]
            bar.update(len(batch))
        bar.close()
        out = []
        for ctx, cont in pairs:
            lp = logprobs[tuple(ctx) + tuple(cont[:-1])][-len(cont):]
            target = torch.tensor(list(cont))
            out.append((float(lp.gather(-1, target[:, None]).sum()), bool((lp.argmax(-1) == target).all())))
        return out

    def close(self) -> None:
        self.model = None
