"""Shared demonstrations (``method.demos=shared``): one set of k demonstrations per micro-batch, read once.

Why: with a set of demonstrations per example (``ifdistill.data.icl``'s rule, ``demos=per_example``)
the 4-shot teacher reads about five times the student's tokens, and its forward pass dominates the
step (about 3x an SFT step on CPU, see bench/bench_train.py; the issue's budget is 2x). When all
examples of a micro-batch share the demonstrations, the teacher runs them once, repeats their
key/value cache over the batch and continues with each example (``SelectiveLM(prefix_ids=...)``): the
logits are those of the full teacher conversation, at a fraction of the cost (about 1.8x an SFT step).

This is the default (``conf/method/distill.yaml``). It does not change what is optimised in
expectation: each example's demonstrations are still a random k-subset of the pool that excludes the
example itself (here also its batch-mates: negligible for a pool of thousands), drawn by the same
selector, so the expected gradient is that of per-example sets. What
changes is only the correlation inside a micro-batch (its examples share one draw, so one step's
gradient is a little noisier; different batches still see different sets). ``demos=per_example``
stays available for those who want independent draws at ~1.7x the step cost.

``data.teacher_max_length`` applies as in the data layer: while the longest teacher conversation of
the batch exceeds it, the first demonstration is dropped (``demos_removed_for_length`` counts them).

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
                 k: int, seed: int, pad_token_id: int, enable_thinking: Optional[bool] = None,
                 teacher_max_length: Optional[int] = None):
        if k < 1:
            raise ValueError("shared demonstrations need k >= 1")
        self.tok, self.k, self.enable_thinking = tokenizer, int(k), enable_thinking
        self.teacher_max_length = teacher_max_length
        self.demos_removed_for_length = 0
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
        students = [self._render(ex.messages) for ex in exs]
        demos = self.choose(exs)
        while True:  # data.teacher_max_length, as the data layer applies it: drop the first demonstration
            teachers = [self._render(with_demos(ex.messages, demos)) for ex in exs]
            cap = self.teacher_max_length
            if cap is None or not demos or max(len(t) for t in teachers) <= cap:
                break
            demos = demos[1:]
            self.demos_removed_for_length += 1
        splits = []
        for it, student, teacher in zip(items, students, teachers):
            n = len(it["input_ids"])
            ok = student[:n] == np.asarray(it["input_ids"]).tolist()
            splits.append(split_teacher(student, teacher) if ok else None)
        shared = all(s is not None for s in splits) and all(s == splits[0] for s in splits)
        if shared:
            self.shared_batches += 1
            views = [add_identity_teacher_view(dict(it)) for it in items]
        else:
            self.fallback_batches += 1
            views = [self._teacher_view(it, ex, demos) for it, ex in zip(items, exs)]
        batch = self.icl(views)
        batch["num_demos"] = torch.full((len(items),), len(demos), dtype=torch.long)
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

