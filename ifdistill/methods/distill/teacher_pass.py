"""The teacher pass: a frozen teacher's top-k log-probabilities and tail mass at every supervised position.

Input: teacher views (:class:`TeacherViewRef`: the exact token ids the teacher reads and the positions
of the supervised tokens, keyed by :func:`ifdistill.methods.distill.teacher_cache.view_key`). Output: shards of
the :class:`~ifdistill.methods.distill.teacher_cache.TeacherCache`.

The teacher runs as in training (:meth:`ICLDistillModule.teacher_logits`: ``no_grad``, eval mode, the
adapter disabled for ``frozen_initial`` with LoRA), with the LM head applied inside its forward to
``chunk_size`` positions at a time (:func:`topk_head`): only one chunk's ``(chunk, V)`` logits exist at
once, so memory stays flat in the number of positions, as in the chunked objective.

Purity: by default each view is its own forward pass (``batch_size=1``, no padding), so a view's cached
numbers depend on the view alone, not on which other views were missing when the pass ran; a sweep
that computes its views in any order or split gets bitwise the same cache. ``batch_size > 1`` pads
views together (faster on a GPU) and is then equal only to float rounding.

Sharing (:func:`shared_pass`): jobs that need views of one cache folder at the same time split them
through claims (:mod:`ifdistill.methods.distill.teacher_pass_claims`): each job computes the views no live job
claims, one shard per claimed batch, and waits for the views other jobs compute, then verifies them.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Optional

import numpy as np
import torch
import torch.nn.functional as F

from ifdistill.methods.distill.teacher_cache import TeacherCache, view_key
from ifdistill.methods.distill.teacher_pass_claims import ClaimBoard

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class TeacherViewRef:
    """One teacher view: the token ids it reads and the positions of its supervised tokens."""

    key: str
    ids: np.ndarray
    positions: np.ndarray

    @classmethod
    def of(cls, ids: Any, positions: Any) -> "TeacherViewRef":
        ids, positions = np.asarray(ids, dtype=np.int64), np.asarray(positions, dtype=np.int64)
        return cls(view_key(ids, positions), ids, positions)


def item_views(items: Iterable[Mapping[str, Any]]) -> list[TeacherViewRef]:
    """The teacher view of each training item (``teacher_input_ids``/``teacher_positions``), in item order."""
    return [TeacherViewRef.of(it["teacher_input_ids"], it["teacher_positions"]) for it in items]


def batch_views(batch: Mapping[str, torch.Tensor]) -> list[TeacherViewRef]:
    """The per-example teacher views of an :class:`~ifdistill.data.collate.IclCollator` batch (right-padded)."""
    ids, valid, pos = batch["teacher_input_ids"], batch["completion_valid"], batch["teacher_positions"]
    mask = batch.get("teacher_attention_mask")
    out = []
    for r in range(ids.shape[0]):
        row = ids[r] if mask is None else ids[r][mask[r].bool()]
        out.append(TeacherViewRef.of(row.cpu().numpy(), pos[r][valid[r]].cpu().numpy()))
    return out


def teacher_topk(logits: torch.Tensor, k: int, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(ids, log-probabilities, tail mass)`` of the ``k`` most probable tokens of ``(N, V)`` logits at
    ``temperature``; ids sorted by probability. ``tail = 1 - sum of the top-k probabilities`` (0 at k = V)."""
    logp = F.log_softmax(logits.float() / temperature, dim=-1)
    if k >= logp.shape[-1]:
        top = logp.sort(dim=-1, descending=True)
        return top.indices, top.values, torch.zeros(logp.shape[:-1], dtype=torch.float32, device=logp.device)
    top = logp.topk(k, dim=-1)
    tail = (-torch.expm1(torch.logsumexp(top.values, dim=-1))).clamp(min=0.0)
    return top.indices, top.values, tail


def topk_head(k: int, temperature: float, chunk_size: int) -> Callable[[torch.Tensor, torch.nn.Module], tuple]:
    """A ``head=`` function for :class:`~ifdistill.train.modeling.SelectiveLM`: the head's logits chunk by
    chunk, each reduced to its top-k at once."""

    def head(hidden: torch.Tensor, module: torch.nn.Module):
        parts = [teacher_topk(type(module).forward(module, hidden[s:s + chunk_size]), k, temperature)
                 for s in range(0, max(hidden.shape[0], 1), chunk_size)]
        return tuple(torch.cat([p[i] for p in parts]) for i in range(3))

    return head


def _collate(views: Sequence[TeacherViewRef], device: torch.device) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    width = max(len(v.ids) for v in views)
    ids = torch.zeros((len(views), width), dtype=torch.long)
    mask = torch.zeros((len(views), width), dtype=torch.long)
    rows, cols = [], []
    for b, v in enumerate(views):
        ids[b, :len(v.ids)] = torch.from_numpy(v.ids)
        mask[b, :len(v.ids)] = 1
        rows.append(torch.full((len(v.positions),), b, dtype=torch.long))
        cols.append(torch.from_numpy(v.positions) - 1)  # the logits that predict position p sit at p - 1
    batch = {"teacher_input_ids": ids.to(device), "teacher_attention_mask": mask.to(device)}
    return batch, torch.cat(rows).to(device), torch.cat(cols).to(device)


@dataclasses.dataclass
class PassStats:
    """What one pass did for one job: the views it covered, how each came to be there, the cost.

    ``views = cached_before + computed + waited``: found in the cache, computed by this job, computed by
    another job while this one waited (``taken_over``: of the computed, views whose claim had expired).
    """

    views: int = 0
    cached_before: int = 0
    computed: int = 0
    waited: int = 0
    taken_over: int = 0
    tokens: int = 0
    bytes: int = 0
    mass: float = 0.0
    seconds: float = 0.0  # the whole pass, waiting included
    compute_seconds: float = 0.0
    wait_seconds: float = 0.0

    def add(self, other: "PassStats") -> "PassStats":
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self

    def to_dict(self) -> dict[str, float]:
        return {"views": self.views, "cached_before": self.cached_before, "computed_views": self.computed,
                "waited_views": self.waited, "taken_over_views": self.taken_over, "computed_tokens": self.tokens,
                "bytes_written": self.bytes,
                "bytes_per_token": self.bytes / self.tokens if self.tokens else float("nan"),
                "topk_mass": self.mass / self.tokens if self.tokens else float("nan"),
                "tokens_per_s": self.tokens / self.compute_seconds if self.compute_seconds else float("nan"),
                "pass_seconds": self.seconds, "wait_seconds": self.wait_seconds}


def run_teacher_pass(teacher_logits: Callable[..., Any], views: Sequence[TeacherViewRef], cache: TeacherCache, *,
                     device: torch.device, chunk_size: int = 1024, batch_size: int = 1, views_per_shard: int = 256,
                     progress: Optional[Callable[[int, int], None]] = None) -> PassStats:
    """Compute ``views`` with ``teacher_logits(batch, rows, cols, head=...)`` and store them in ``cache``.

    ``views`` should be the missing ones (:meth:`TeacherCache.missing`); each is written in a shard of up
    to ``views_per_shard`` views, so an interrupted pass keeps what it finished.
    """
    ns = cache.namespace
    head = topk_head(ns.k, ns.temperature, chunk_size)
    stats = PassStats(views=len(views))
    start = time.perf_counter()
    pending: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]] = []
    for b in range(0, len(views), batch_size):
        group = views[b:b + batch_size]
        batch, rows, cols = _collate(group, device)
        ids, logp, tail = teacher_logits(batch, rows, cols, head=head)
        ids, logp, tail = ids.cpu().numpy(), logp.cpu().numpy(), tail.cpu().numpy()
        at = 0
        for v in group:
            n = len(v.positions)
            pending.append((v.key, ids[at:at + n], logp[at:at + n], tail[at:at + n]))
            stats.mass += float((1.0 - tail[at:at + n]).sum())
            stats.tokens += n
            at += n
        stats.computed += len(group)
        if len(pending) >= views_per_shard or b + batch_size >= len(views):
            before = cache.written_bytes
            cache.write_shard(pending)
            stats.bytes += cache.written_bytes - before
            pending = []
        if progress is not None:
            progress(stats.computed, len(views))
    stats.seconds = stats.compute_seconds = time.perf_counter() - start
    return stats


def shared_pass(compute: Callable[[Sequence[TeacherViewRef]], PassStats], views: Sequence[TeacherViewRef],
                cache: TeacherCache, board: ClaimBoard, *, views_per_shard: int = 64,
                progress: Optional[Callable[[int, int], None]] = None,
                sleep: Callable[[float], None] = time.sleep) -> PassStats:
    """Make every view of ``views`` present in ``cache``, sharing the work with jobs that run at once.

    In turn: claim up to ``views_per_shard`` of the missing views that are free or whose claim expired
    (``board``, inside its ``with``), drop those another job wrote meanwhile, ``compute`` the rest (one
    shard: :func:`run_teacher_pass`) and release them; with nothing left to claim, wait ``board.poll_s``
    and look again (saying what it waits for, at once and every ``board.report_s``). The views another
    job wrote are verified at the end (shard checksum, one row per
    supervised position). ``compute`` must write the views it is given.
    """
    want = {v.key: v for v in views}
    stats = PassStats(views=len(want))
    start = time.perf_counter()
    cache.refresh()
    todo = cache.missing(want)
    stats.cached_before = len(want) - len(todo)
    waited: list[str] = []
    report_at = None  # when this wait's next progress line is due (None: not waiting)
    while todo:
        current = board.scan()
        won = board.claim(board.claimable(todo, current)[:views_per_shard], current)
        cache.refresh()  # a view written between the look and the claim is not computed again
        done = {k for k in todo if k in cache}
        board.release(k for k in won if k in done)
        waited.extend(k for k in todo if k in done)
        mine = [k for k in won if k not in done]
        todo = [k for k in todo if k not in done and k not in mine]
        if mine:
            try:
                part = compute([want[k] for k in mine])
            finally:
                board.release(mine)
            stats.add(dataclasses.replace(part, views=0, seconds=0.0, taken_over=len(board.taken.intersection(mine))))
            report_at = None
        elif todo:
            t0 = time.perf_counter()
            if report_at is None or t0 >= report_at:  # at once, then every board.report_s: what, for whom, how long
                log.info("teacher pass: waiting for %d view(s) other jobs claim (%s); %.0f s waited so far",
                         len(todo), board.describe_wait(todo, current), stats.wait_seconds)
                report_at = t0 + board.report_s
            sleep(board.poll_s)
            stats.wait_seconds += time.perf_counter() - t0
        if progress is not None:
            progress(len(want) - len(todo), len(want))
    stats.waited = len(waited)
    for key in waited:
        cache.verify(key, len(want[key].positions))
    stats.seconds = time.perf_counter() - start
    return stats
