"""Batches: padding, packing (padding-free), and the ICL teacher/student pair.

Every collator takes the dataset's items (dicts with ``input_ids``, ``loss_mask``, ``is_replay``; ICL
items also ``teacher_input_ids``/``teacher_loss_mask``) and returns tensors in the layout
Hugging Face causal LMs expect: ``labels`` equal ``input_ids`` where the loss mask is 1 and -100
elsewhere, *unshifted* (the model shifts). The first token of every sequence is always -100 (nothing
predicts it), so the number of label tokens equals the number of tokens the loss sees; that count,
per example, travels in ``num_supervised`` together with ``is_replay`` for the replay-share logging.

Packing (:class:`PackCollator`): examples are concatenated into rows (one row, or first-fit rows of
at most ``max_row_tokens``), with ``position_ids`` restarting at 0 for every example, ``seq_idx`` (the
example's index in the batch, -1 on padding) and ``cu_seqlens``/``max_seqlen`` over the flattened
rows. Packed examples must not attend to each other; how a model is told so depends on its
attention implementation (:func:`packed_model_inputs`):

- ``sdpa`` / ``eager`` (CPU): pass ``position_ids`` and *no* ``attention_mask``, with
  ``use_cache=False``. transformers (>= 4.5x, checked on 5.19) then derives a block-diagonal causal
  mask from the position restarts (``masking_utils.find_packed_sequence_indices``). With
  ``use_cache=True`` a cache object exists and that detection is skipped -- examples would attend
  across boundaries -- so the helper sets ``use_cache=False``. Alternatively an explicit 4D additive
  mask can be passed (``explicit_mask=True``); transformers uses a 4D mask as given.
- ``flash_attention_2/3`` and ``packed_sdpa`` (:mod:`ifdistill.train.packed_attention`): the rows
  flattened to one sequence with ``cu_seq_lens_q/k`` and ``max_length_q/k``, and a per-layer-type
  mapping of ``None`` as ``attention_mask`` (transformers builds no mask): the kernel attends within
  each example only, computing none of the blocks across examples.

Padding rows inside a packed batch get positions restarting at 0, so they form their own block and
never mix with real tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

IGNORE = -100
PACKED_SDPA = "packed_sdpa"  # registered with transformers by ifdistill.train.packed_attention
VARLEN_IMPLEMENTATIONS = ("flash_attention_2", "flash_attention_3", PACKED_SDPA)  # they read cu_seq_lens


def _ids(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


def _labels(ids: np.ndarray, mask: Any) -> np.ndarray:
    mask = np.asarray(mask).astype(bool)
    if mask.shape != ids.shape:
        raise ValueError(f"loss_mask has {mask.shape[0]} entries for {ids.shape[0]} tokens")
    out = np.where(mask, ids, IGNORE)
    if out.size:
        out[0] = IGNORE
    return out


def _meta(items: Sequence[Mapping[str, Any]], labels: list[np.ndarray], lab: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-example counts, and the ``(row, col)`` of every position that predicts a supervised token
    (:func:`ifdistill.train.losses.supervised_positions`, computed here on the host)."""
    rows, cols = (lab[:, 1:] != IGNORE).nonzero(as_tuple=True)
    return {
        "supervised_rows": rows, "supervised_cols": cols,
        "is_replay": torch.tensor([bool(it.get("is_replay", False)) for it in items]),
        "num_supervised": torch.tensor([int((lab != IGNORE).sum()) for lab in labels], dtype=torch.long),
        "example_index": torch.tensor([int(it.get("index", -1)) for it in items], dtype=torch.long),
    }


class PadCollator:
    """Right-padded batch with ``attention_mask``; ``pad_to_multiple_of`` rounds the length up."""

    def __init__(self, pad_token_id: int, *, pad_to_multiple_of: int | None = None, prefix: str = ""):
        self.pad_token_id, self.multiple, self.prefix = pad_token_id, pad_to_multiple_of, prefix

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        p = self.prefix
        ids = [_ids(it[p + "input_ids"]) for it in items]
        labels = [_labels(i, it[p + "loss_mask"]) for i, it in zip(ids, items)]
        length = max(len(i) for i in ids)
        if self.multiple:
            length = -(-length // self.multiple) * self.multiple
        n = len(items)
        input_ids = torch.full((n, length), self.pad_token_id, dtype=torch.long)
        lab = torch.full((n, length), IGNORE, dtype=torch.long)
        attn = torch.zeros((n, length), dtype=torch.long)
        for b, (i, l) in enumerate(zip(ids, labels)):
            input_ids[b, : len(i)] = torch.from_numpy(i)
            lab[b, : len(l)] = torch.from_numpy(l)
            attn[b, : len(i)] = 1
        out = {p + "input_ids": input_ids, p + "attention_mask": attn, p + "labels": lab}
        if not p:
            out.update(_meta(items, labels, lab))
        return out


def _first_fit(lengths: Sequence[int], cap: int | None) -> list[list[int]]:
    """Assign examples to rows in order (first fit); ``cap=None`` puts all of them in one row."""
    if cap is None:
        return [list(range(len(lengths)))]
    rows: list[list[int]] = []
    room: list[int] = []
    for i, n in enumerate(lengths):
        if n > cap:
            raise ValueError(f"example of {n} tokens does not fit a packed row of {cap}; "
                             "set data.max_length <= the row size")
        for r, free in enumerate(room):
            if n <= free:
                rows[r].append(i)
                room[r] -= n
                break
        else:
            rows.append([i])
            room.append(cap - n)
    return rows


class PackCollator:
    """Padding-free batches: examples concatenated with restarting ``position_ids``."""

    def __init__(self, pad_token_id: int, *, max_row_tokens: int | None = None):
        self.pad_token_id, self.max_row_tokens = pad_token_id, max_row_tokens

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        ids = [_ids(it["input_ids"]) for it in items]
        labels = [_labels(i, it["loss_mask"]) for i, it in zip(ids, items)]
        rows = _first_fit([len(i) for i in ids], self.max_row_tokens)
        width = max(sum(len(ids[i]) for i in row) for row in rows)
        n_rows = len(rows)
        input_ids = torch.full((n_rows, width), self.pad_token_id, dtype=torch.long)
        lab = torch.full((n_rows, width), IGNORE, dtype=torch.long)
        pos = torch.zeros((n_rows, width), dtype=torch.long)
        seq_idx = torch.full((n_rows, width), -1, dtype=torch.long)
        seqlens: list[int] = []
        for r, row in enumerate(rows):
            at = 0
            for i in row:
                n = len(ids[i])
                input_ids[r, at : at + n] = torch.from_numpy(ids[i])
                lab[r, at : at + n] = torch.from_numpy(labels[i])
                pos[r, at : at + n] = torch.arange(n)
                seq_idx[r, at : at + n] = i
                seqlens.append(n)
                at += n
            if at < width:  # padding: its own block, positions restarting at 0
                pos[r, at:] = torch.arange(width - at)
                seqlens.append(width - at)
        cu = torch.zeros(len(seqlens) + 1, dtype=torch.int32)
        cu[1:] = torch.cumsum(torch.tensor(seqlens, dtype=torch.int32), 0)
        out = {"input_ids": input_ids, "labels": lab, "position_ids": pos, "seq_idx": seq_idx,
               "cu_seqlens": cu, "max_seqlen": max(seqlens)}  # a host int: reading it needs no device sync
        out.update(_meta(items, labels, lab))
        return out


def block_causal_mask(seq_idx: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """4D additive mask ``(rows, 1, L, L)``: causal within an example, blocked across examples.

    Padding (``seq_idx == -1``) attends only to itself so no row of the softmax is empty.
    """
    n, length = seq_idx.shape
    seg = seq_idx.clone()
    seg[seg < 0] = -1 - torch.arange(length).expand(n, -1)[seg < 0]  # each pad token alone
    same = seg[:, :, None] == seg[:, None, :]
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    allowed = same & causal
    mask = torch.zeros(n, 1, length, length, dtype=dtype)
    return mask.masked_fill(~allowed[:, None], torch.finfo(dtype).min)


def packed_model_inputs(batch: Mapping[str, Any], attn_implementation: str, *,
                        explicit_mask: bool = False) -> dict[str, Any]:
    """Forward kwargs for a packed batch so that examples do not attend to each other (module docstring)."""
    if attn_implementation in VARLEN_IMPLEMENTATIONS:
        cu, ml = batch["cu_seqlens"], int(batch["max_seqlen"])
        return {"input_ids": batch["input_ids"].reshape(1, -1), "position_ids": batch["position_ids"].reshape(1, -1),
                "use_cache": False, "attention_mask": {"full_attention": None, "sliding_attention": None},
                "cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": ml, "max_length_k": ml}
    if attn_implementation not in ("sdpa", "eager"):
        raise ValueError(f"no packed-batch recipe for attn_implementation={attn_implementation!r}")
    out = {"input_ids": batch["input_ids"], "position_ids": batch["position_ids"], "use_cache": False}
    if explicit_mask:
        out["attention_mask"] = block_causal_mask(batch["seq_idx"])
    return out


class IclCollator:
    """Student and teacher views side by side, plus the completion positions that align them.

    ``student_positions[b, c]`` and ``teacher_positions[b, c]`` are the positions (in the respective
    ``input_ids``) of the c-th supervised token of example ``b``; the token ids there are equal
    (asserted when the item was built). ``completion_valid`` marks real entries. The logits that
    *predict* those tokens sit one position earlier.
    """

    def __init__(self, pad_token_id: int, *, pad_to_multiple_of: int | None = None):
        self.student = PadCollator(pad_token_id, pad_to_multiple_of=pad_to_multiple_of)
        self.teacher = PadCollator(pad_token_id, pad_to_multiple_of=pad_to_multiple_of, prefix="teacher_")

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        out = self.student(items)
        out.update(self.teacher(items))
        s_pos = [_ids(it["student_positions"]) for it in items]
        t_pos = [_ids(it["teacher_positions"]) for it in items]
        width = max(len(p) for p in s_pos)
        n = len(items)
        sp = torch.zeros((n, width), dtype=torch.long)
        tp = torch.zeros((n, width), dtype=torch.long)
        valid = torch.zeros((n, width), dtype=torch.bool)
        for b, (s, t) in enumerate(zip(s_pos, t_pos)):
            if len(s) != len(t):
                raise ValueError(f"example {b}: {len(s)} student vs {len(t)} teacher completion positions")
            sp[b, : len(s)], tp[b, : len(t)], valid[b, : len(s)] = torch.from_numpy(s), torch.from_numpy(t), True
        out.update({"student_positions": sp, "teacher_positions": tp, "completion_valid": valid,
                    "num_demos": torch.tensor([int(it.get("num_demos", 0)) for it in items])})
        return out
