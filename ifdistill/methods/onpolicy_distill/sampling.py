"""Where on-policy completions come from, and the batch they replace the gold completions in.

A batch arrives as off-policy distillation's (:class:`ifdistill.data.collate.IclCollator`: student view,
teacher view, aligned completion positions). For the rows chosen to train on the student's own sample,
:func:`prompts` cuts both views at their first completion token -- the student's prompt and the
teacher's (demonstrations, prompt) -- the sampler continues the student prompt, and :func:`with_samples`
builds the batch again with the sample as the completion of *both* views, through the same collator,
so everything downstream (positions, masks, the objective) is off-policy distillation's. Rows not
chosen keep their gold completion token for token; with no row chosen the batch is returned as is.

Samplers turn prompts into completions with the evaluator's stop rule
(:func:`ifdistill.evaluator.prompts.stop_token_ids`: the tokenizer's EOS, ``generation_config.json``'s
and configured ids): a completion ends with its first stop token (kept: the gold completion ends with
the turn's end token too) or at ``max_new_tokens`` (a budget hit, counted by the monitoring).
:class:`HFSampler` generates with the training model itself (eval mode, no grad), so its samples are
strictly on-policy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy as np
import torch

from ifdistill.data.collate import IGNORE, IclCollator
from ifdistill.methods.onpolicy_distill.settings import SamplingSettings


@dataclasses.dataclass(frozen=True)
class Sample:
    tokens: list[int]  # the completion, its stop token included when it has one
    ended: bool  # ended with a stop token (not at the budget)


def cut_at_stop(tokens: Sequence[int], stop_ids: Sequence[int]) -> Sample:
    stops = set(stop_ids)
    for i, t in enumerate(tokens):
        if t in stops:
            return Sample(list(tokens[:i + 1]), True)
    return Sample(list(tokens), False)


def prompts(batch: Mapping[str, torch.Tensor], rows: Sequence[int]) -> tuple[list[list[int]], list[list[int]]]:
    """Student and teacher prompts (everything before the first completion token) of ``rows``."""
    s_pos, t_pos = batch["student_positions"], batch["teacher_positions"]
    student = [batch["input_ids"][r, :int(s_pos[r, 0])].tolist() for r in rows]
    teacher = [batch["teacher_input_ids"][r, :int(t_pos[r, 0])].tolist() for r in rows]
    return student, teacher


def _gold_item(batch: Mapping[str, torch.Tensor], r: int) -> dict[str, Any]:
    valid = batch["completion_valid"][r]
    n_s, n_t = int(batch["attention_mask"][r].sum()), int(batch["teacher_attention_mask"][r].sum())
    ids = batch["input_ids"][r, :n_s].cpu().numpy()
    mask = (batch["labels"][r, :n_s] != IGNORE).cpu().numpy().astype(np.int8)
    t_ids = batch["teacher_input_ids"][r, :n_t].cpu().numpy()
    t_mask = np.zeros(n_t, dtype=np.int8)
    t_pos = batch["teacher_positions"][r][valid].cpu().numpy()
    t_mask[t_pos] = 1
    return {"input_ids": ids, "loss_mask": mask, "teacher_input_ids": t_ids, "teacher_loss_mask": t_mask,
            "student_positions": batch["student_positions"][r][valid].cpu().numpy(), "teacher_positions": t_pos,
            "num_demos": int(batch["num_demos"][r]), "is_replay": bool(batch["is_replay"][r])
            if "is_replay" in batch else False}


def _sampled_item(student: list[int], teacher: list[int], sample: Sample, gold: Mapping[str, Any]) -> dict[str, Any]:
    n = len(sample.tokens)
    ids = np.asarray(student + sample.tokens, dtype=np.int64)
    t_ids = np.asarray(teacher + sample.tokens, dtype=np.int64)
    mask, t_mask = np.zeros(len(ids), dtype=np.int8), np.zeros(len(t_ids), dtype=np.int8)
    mask[len(student):], t_mask[len(teacher):] = 1, 1
    return {**gold, "input_ids": ids, "loss_mask": mask, "teacher_input_ids": t_ids, "teacher_loss_mask": t_mask,
            "student_positions": np.arange(len(student), len(student) + n, dtype=np.int64),
            "teacher_positions": np.arange(len(teacher), len(teacher) + n, dtype=np.int64)}


def with_samples(batch: Mapping[str, torch.Tensor], samples: Mapping[int, Sample], pad_token_id: int) -> dict[str, Any]:
    """The batch with row ``r``'s completion replaced by ``samples[r]`` in both views (module docstring);
    ``is_sampled`` marks those rows."""
    n = batch["input_ids"].shape[0]
    if not samples:
        return {**batch, "is_sampled": torch.zeros(n, dtype=torch.bool, device=batch["input_ids"].device)}
    rows = sorted(samples)
    student, teacher = prompts(batch, rows)
    items = [_gold_item(batch, r) for r in range(n)]
    for r, s, t in zip(rows, student, teacher):
        items[r] = _sampled_item(s, t, samples[r], items[r])
    out = IclCollator(pad_token_id)(items)
    out["is_sampled"] = torch.tensor([r in samples for r in range(n)])
    device = batch["input_ids"].device
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in out.items()}


class HFSampler:
    """Samples with the training model's own ``generate`` (left-padded prompts, one call per micro-batch)."""

    def __init__(self, model: torch.nn.Module, stop_ids: Sequence[int], pad_token_id: int, settings: SamplingSettings):
        self.model, self.stop_ids, self.pad, self.settings = model, list(stop_ids), pad_token_id, settings

    def __call__(self, prompt_ids: Sequence[Sequence[int]], *, seed: Optional[int] = None) -> list[Sample]:
        from transformers import GenerationConfig

        if not prompt_ids:
            return []
        s = self.settings
        width = max(len(p) for p in prompt_ids)
        device = next(self.model.parameters()).device
        ids = torch.tensor([[self.pad] * (width - len(p)) + list(p) for p in prompt_ids], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt_ids], device=device)
        config = GenerationConfig(max_new_tokens=s.max_new_tokens, do_sample=not s.greedy,
                                  temperature=None if s.greedy else s.temperature, top_p=None if s.greedy else s.top_p,
                                  top_k=None if s.greedy else 0, eos_token_id=self.stop_ids, pad_token_id=self.pad,
                                  repetition_penalty=1.0)
        if seed is not None:
            torch.manual_seed(seed)
        was = self.model.training
        self.model.train(False)
        try:
            with torch.no_grad():
                out = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
        finally:
            self.model.train(was)
        return [cut_at_stop(row[width:].tolist(), self.stop_ids) for row in out]
