"""Shared demonstrations (``method.demos=shared``): one set of k demonstrations per micro-batch, read once.

Why: with a set of demonstrations per example (``demos=per_example``) the 4-shot teacher reads about
five times the student's tokens, and its forward pass dominates the step (about 3x an SFT step on
CPU, see bench/bench_train.py). When the examples of a micro-batch share the demonstrations, the
teacher runs them once, repeats their key/value cache over the batch and continues with each example
(``SelectiveLM(prefix_ids=...)``): the logits are those of the full teacher conversation, at a fraction
of the cost (about 1.7x an SFT step).

This is the default (``conf/method/distill.yaml``). It does not change what is optimised in
expectation: each example's demonstrations are still a random k-subset of the pool that excludes the
example itself (here also its batch-mates: negligible for a pool of thousands), drawn by the same
selector, so the expected gradient is that of per-example sets. What changes is only the correlation
inside a micro-batch (its examples share one draw, so one step's gradient is a little noisier;
different batches still see different sets).

This collator only decides *which* demonstrations a micro-batch shares (:meth:`SharedDemoCollator.choose`:
the data layer's :class:`ifdistill.data.icl.DemoSelector` keyed by the batch's sorted example ids,
skipping the batch's own examples). Every teacher view is then made by
:func:`ifdistill.data.icl.teacher_view` -- the replay rule, the thinking flag, ``teacher_max_length``
and the alignment are the per-example path's, by construction -- and the batch is laid out so the
teacher does the least work that reproduces those views exactly:

- a *prefix row* reads ``head + D + rest_i`` where the student reads ``head + rest_i`` (``head``: what
  precedes the insertion point, e.g. a system turn; ``D``: the demonstration turns);
- an *identity row* reads exactly the student's tokens (a replay example without demonstrations);
- when all prefix rows share one ``head + D``, the batch carries ``teacher_prefix_ids``,
  ``teacher_head_len`` and ``teacher_prefix_rows`` (which rows read the prefix); otherwise -- different
  system turns, a template that rewrites earlier turns, a left-cut example, demonstrations dropped for
  length in some rows only -- the batch carries the per-example views themselves
  (the :class:`ifdistill.data.collate.IclCollator` layout). Both layouts give the same logits.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy as np
import torch

from ifdistill.data.collate import IclCollator
from ifdistill.data.icl import DemoSelector, IclSettings, teacher_view
from ifdistill.data.records import Example

log = logging.getLogger(__name__)

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


def _is_identity(item: Mapping[str, Any], view: Mapping[str, Any]) -> bool:
    return (np.array_equal(view["teacher_input_ids"], item["input_ids"])
            and np.array_equal(view["teacher_positions"], view["student_positions"]))


class SharedDemoCollator:
    """Student batch + one shared demonstration prefix (or the per-example teacher views when none fits)."""

    def __init__(self, tokenizer, examples: Sequence[Example], pool: Sequence[Example], icl: IclSettings, *,
                 pad_token_id: int):
        """``examples[item["index"]]`` is an item's conversation; ``pool`` the demonstration candidates."""
        if icl.k < 1:
            raise ValueError("shared demonstrations need k >= 1")
        self.tok, self.icl, self.examples = tokenizer, icl, examples
        self.selector = DemoSelector(pool, seed=icl.seed)
        self.icl_collate = IclCollator(pad_token_id)
        self.demos_removed_for_length = 0
        self.shared_batches = self.fallback_batches = 0

    def choose(self, batch_examples: Sequence[Example]) -> list[Example]:
        """k demonstrations for a batch, none of them an example of the batch (by id or prompt)."""
        banned = {i for ex in batch_examples for i in (ex.uid, ex.key) if i is not None}
        prompts = {ex.prompt.strip() for ex in batch_examples}
        key = "|".join(sorted(ex.uid for ex in batch_examples))
        want = min(self.icl.k + len(batch_examples), len(self.selector.pool))
        out = [d for d in self.selector.select(want, exclude_key=key, exclude_prompt=None)
               if d.uid not in banned and (d.key is None or d.key not in banned) and d.prompt.strip() not in prompts]
        if len(out) < self.icl.k:
            raise ValueError(f"the demonstration pool ({len(self.selector.pool)}) is too small for k={self.icl.k} "
                             f"besides a batch of {len(batch_examples)}")
        return out[: self.icl.k]

    def views(self, items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Each item with its teacher view for the batch's demonstrations (the per-example layout)."""
        exs = [self.examples[int(it["index"])] for it in items]
        demos = self.choose(exs)
        out = []
        for it, ex in zip(items, exs):
            view = teacher_view(self.tok, ex, it, demos, self.icl)
            self.demos_removed_for_length += view.demos_dropped
            out.append({**it, **view.fields})
        return out

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        views = self.views(items)
        batch = self.icl_collate(views)
        prefix_rows = [not _is_identity(it, v) for it, v in zip(items, views)]
        splits = [split_teacher(np.asarray(v["input_ids"]).tolist(), np.asarray(v["teacher_input_ids"]).tolist())
                  for v, r in zip(views, prefix_rows) if r]
        if not splits:  # identity rows only (e.g. replay examples): the per-example layout is the student's
            return batch
        if splits[0] is None or any(s != splits[0] for s in splits):
            self.fallback_batches += 1
            if self.fallback_batches == 1:
                log.info("shared demonstrations: a batch without one common prefix runs per-example teacher views "
                         "(same logits, more teacher compute); counted in fallback_batches")
            return batch
        self.shared_batches += 1
        head, demo_ids = splits[0]
        for key in TEACHER_VIEW_KEYS:
            batch.pop(key, None)
        batch["teacher_prefix_ids"] = torch.tensor(head + demo_ids, dtype=torch.long)
        batch["teacher_head_len"] = torch.tensor(len(head), dtype=torch.long)
        batch["teacher_prefix_rows"] = torch.tensor(prefix_rows, dtype=torch.bool)
        return batch
