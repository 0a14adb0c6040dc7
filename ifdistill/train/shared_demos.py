"""Shared demonstrations (``method.demos=shared``): one set of k demonstrations per micro-batch, read once.

Why: with a set of demonstrations per example (``ifdistill.data.icl``'s rule, ``demos=per_example``)
the 4-shot teacher reads about five times the student's tokens, and its forward pass dominates the
step (about 3.3x an SFT step on CPU, see bench/bench_train.py). When all examples of a micro-batch
share the demonstrations, the teacher runs them once, repeats their key/value cache over the batch
and continues with each example (``SelectiveLM(prefix_ids=...)``): the logits are those of the full
teacher conversation, at a fraction of the cost. The price is a modelling choice -- the examples of a
micro-batch see the same demonstrations (different batches see different ones) -- which is why it is
an option and not the default.

Selection follows the data layer's rule (:class:`ifdistill.data.icl.DemoSelector`: canonical pool
order, seeded permutation, a start derived from a key): the key is the batch's sorted example ids, and
candidates that are an example of the batch (same id or identical prompt) are skipped. The pool is
the new training data, never held-out rows.

Split: the teacher conversation of example i renders as ``head + D + rest_i`` where the student's
is ``head + rest_i`` (``head`` = whatever precedes the insertion point, e.g. a system turn or a
template's default system prompt; often empty; ``D`` = the demonstration turns). When every example of
the batch has the same ``head`` and ``D`` the batch carries ``teacher_prefix_ids = head + D`` and
``teacher_head_len``; otherwise -- different system turns, a template that rewrites earlier turns, a
left-truncated example -- it falls back to one teacher view per example with these demonstrations
(the :class:`ifdistill.data.collate.IclCollator` layout), which the module handles as well.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy as np
import torch

from ifdistill.data.collate import IclCollator
from ifdistill.data.icl import DemoSelector, build_icl_pair, with_demos
from ifdistill.data.records import Example
from ifdistill.data.render import render
from ifdistill.train.datamodule import add_identity_teacher_view

TEACHER_VIEW_KEYS = ("teacher_input_ids", "teacher_attention_mask", "teacher_labels", "teacher_positions")


def split_teacher(student: list[int], teacher: list[int]) -> Optional[tuple[list[int], list[int]]]:
    """``(head, demos)`` with ``teacher == head + demos + student[len(head):]``, shortest head; else None."""
    delta = len(teacher) - len(student)
    if delta <= 0:
        return None
    for h in range(len(student) + 1):
        if h and teacher[h - 1] != student[h - 1]:
            return None  # the head must be common to both
        if teacher[h + delta:] == student[h:]:
            return student[:h], teacher[h:h + delta]
    return None


class SharedDemoCollator:
    """Student batch + one shared demonstration prefix (or per-example teacher views as a fallback)."""

    def __init__(self, tokenizer, pool: Sequence[Example], examples: Mapping[tuple[str, str], Example], *,
                 k: int, seed: int, pad_token_id: int, enable_thinking: Optional[bool] = None):
        if k < 1:
            raise ValueError("shared demonstrations need k >= 1")
        self.tok, self.k, self.enable_thinking = tokenizer, int(k), enable_thinking
        self.selector = DemoSelector(pool, seed=seed)
        self.examples = examples
        self.icl = IclCollator(pad_token_id)
        self.shared_batches = self.fallback_batches = 0

    def _render(self, messages) -> list[int]:
        return render(self.tok, messages, enable_thinking=self.enable_thinking, train_on="last_assistant").input_ids

    def choose(self, batch_examples: Sequence[Example]) -> list[Example]:
        """k demonstrations for a batch, none of them an example of the batch (by id or prompt)."""
        banned = {i for ex in batch_examples for i in (ex.uid, ex.key) if i is not None}
        prompts = {ex.prompt.strip() for ex in batch_examples}
        key = "|".join(sorted(ex.uid for ex in batch_examples))
        want = min(self.k + len(batch_examples), len(self.selector.pool))
        out = [d for d in self.selector.select(want, exclude_key=key, exclude_prompt=None)
               if d.uid not in banned and (d.key is None or d.key not in banned) and d.prompt.strip() not in prompts]
        if len(out) < self.k:
            raise ValueError(f"the demonstration pool ({len(self.selector.pool)}) is too small for k={self.k} "
                             f"besides a batch of {len(batch_examples)}")
        return out[: self.k]

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        exs = [self.examples[(it["source"], it["row_id"])] for it in items]
        demos = self.choose(exs)
        splits = []
        for it, ex in zip(items, exs):
            student = self._render(ex.messages)
            n = len(it["input_ids"])
            ok = student[:n] == np.asarray(it["input_ids"]).tolist()
            splits.append(split_teacher(student, self._render(with_demos(ex.messages, demos))) if ok else None)
        shared = all(s is not None for s in splits) and all(s == splits[0] for s in splits)
        if shared:
            self.shared_batches += 1
            views = [add_identity_teacher_view(dict(it)) for it in items]
        else:
            self.fallback_batches += 1
            views = [self._teacher_view(it, ex, demos) for it, ex in zip(items, exs)]
        batch = self.icl(views)
        batch["num_demos"] = torch.full((len(items),), self.k, dtype=torch.long)
        if shared:
            head, demo_ids = splits[0]
            for key in TEACHER_VIEW_KEYS:
                batch.pop(key, None)
            batch["teacher_prefix_ids"] = torch.tensor(head + demo_ids, dtype=torch.long)
            batch["teacher_head_len"] = torch.tensor(len(head), dtype=torch.long)
        return batch

    def _teacher_view(self, item: Mapping[str, Any], ex: Example, demos: Sequence[Example]) -> dict[str, Any]:
        """Per-example teacher view with the batch's demonstrations (aligned like ifdistill.data.build)."""
        pair = build_icl_pair(self.tok, ex, demos, enable_thinking=self.enable_thinking)
        s_end = pair.student.spans[-1][1]
        s_off = s_end - len(item["input_ids"])
        t_end = pair.teacher_positions[-1] + 1
        t_mask = np.zeros(t_end, dtype=np.int8)
        t_mask[pair.teacher_positions] = 1
        return {**item, "teacher_input_ids": np.asarray(pair.teacher.input_ids[:t_end], dtype=np.int64),
                "teacher_loss_mask": t_mask,
                "student_positions": np.asarray(pair.student_positions, dtype=np.int64) - s_off,
                "teacher_positions": np.asarray(pair.teacher_positions, dtype=np.int64)}

