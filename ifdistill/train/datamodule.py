"""The LightningDataModule: ifdistill's data (``ifdistill.data``) batched for exact, resumable training.

Training batches. The per-rank order is ``ifdistill.data``'s :class:`ResumableDistributedSampler` over
the mixture's epoch order (``Trainer(use_distributed_sampler=False)``: Lightning's sampler would force
its own shuffling). :class:`StepBatchSampler` cuts it into accumulation windows of
``accumulate x micro_batch_size`` examples and

- tags every example with its window's supervised-token total (``batch["step_tokens"]``), which the
  module needs to normalise the loss by the tokens of the whole optimizer step;
- drops the epoch's tail that does not fill a window, so every optimizer step has the same number of
  micro-batches and an epoch is a whole number of steps;
- takes its position from the trainer's ``global_step`` each time an epoch is iterated: epoch =
  steps // steps_per_epoch, window = steps % steps_per_epoch. The data a step sees is therefore a pure
  function of the step number, and a run resumed from a checkpoint continues exactly where the
  interrupted one was, whatever Lightning's own epoch bookkeeping does (its batch index continues
  from the checkpoint and the shortened epoch ends where an uninterrupted one would).

Loading on a GPU. ``packing: auto`` packs SFT training batches on a CUDA trainer: the micro-batch's
examples are the same, concatenated into rows instead of padded, and the attention kernel gets their
boundaries (:mod:`ifdistill.train.packed_attention`), so the per-example losses, the token-normalised
step loss and the gradients are those of the padded batch up to float summation order (asserted in
``tests/unit/train/test_packed_attention.py``); only the random draws of dropout, made per position, fall
on other positions. ``num_workers: null`` means 2 worker processes on a CUDA trainer (collation off
the training loop's thread) and none on CPU; batches go to pinned memory on CUDA, so the copy to the
GPU is asynchronous. Batches with teacher views (``data.icl``) are never packed: teacher and student
rows differ.

Validation batches (held-out slices of each source) are sharded evenly across ranks and padded with
*empty* examples (loss mask all zero): every rank runs the same number of forward passes -- ZeRO-3 and
FSDP gather parameters collectively and would hang otherwise -- while the padding adds no token to
any metric, so held-out CE/accuracy are the same on 1 or N ranks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from ifdistill.data.build import DataConfig
from ifdistill.data.render import template_text
from ifdistill.models import resolve_model_path
from ifdistill.train.method import MethodHooks

PAD_INDEX = -1
AUTO = "auto"
GPU_WORKERS = 2  # num_workers: null on CUDA; collation of a micro-batch takes milliseconds, two hide it


def supervised_tokens(item: Mapping[str, Any]) -> int:
    """Tokens the loss sees for one item (ICL items: the aligned completion positions)."""
    if "student_positions" in item:
        return int(len(item["student_positions"]))
    return int(np.asarray(item["loss_mask"]).sum())


class StepBatchSampler(Sampler[list]):
    """Micro-batches of ``(index, window_tokens)`` for one rank, positioned by optimizer steps done."""

    def __init__(self, sampler: Any, *, micro_batch_size: int, accumulate: int, world_size: int,
                 tokens_of: Callable[[int], int], steps_done: Callable[[], int] = lambda: 0):
        if micro_batch_size < 1 or accumulate < 1:
            raise ValueError("micro_batch_size and accumulate must be >= 1")
        self.sampler, self.mbs, self.acc, self.world = sampler, micro_batch_size, accumulate, world_size
        self.tokens_of, self.steps_done = tokens_of, steps_done
        self.window = micro_batch_size * accumulate

    def _seek(self, epoch: int, consumed_per_rank: int) -> None:
        self.sampler.load_state_dict({"epoch": epoch, "num_samples_consumed": consumed_per_rank * self.world,
                                      "num_replicas": self.world})

    def steps_per_epoch(self, epoch: int = 0) -> int:
        self._seek(epoch, 0)
        n = len(self.sampler) // self.window
        if n == 0:
            raise ValueError(f"an epoch has {len(self.sampler)} examples per rank, fewer than one optimizer step "
                             f"({self.mbs} x {self.acc}); lower the batch size or add data")
        return n

    def __len__(self) -> int:
        return self.steps_per_epoch() * self.acc

    def windows(self, start: int, stop: int) -> Iterator[list[int]]:
        """The indices this rank reads at each optimizer step in ``[start, stop)``, one window per step
        (what :meth:`__iter__` yields from step ``start``, across epochs)."""
        per_epoch = self.steps_per_epoch()
        step = start
        while step < stop:
            epoch, window = divmod(step, per_epoch)
            self._seek(epoch, window * self.window)
            indices = list(iter(self.sampler))
            for w in range(min(per_epoch - window, stop - step)):
                yield indices[w * self.window:(w + 1) * self.window]
            step = (epoch + 1) * per_epoch

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        per_epoch = self.steps_per_epoch()
        start = int(self.steps_done())
        for chunk in self.windows(start, (start // per_epoch + 1) * per_epoch):
            total = sum(self.tokens_of(i) for i in chunk)
            for m in range(self.acc):
                yield [(i, total) for i in chunk[m * self.mbs:(m + 1) * self.mbs]]

    def set_epoch(self, epoch: int) -> None:
        """Ignored: the position comes from ``steps_done`` (Lightning calls this every epoch)."""


class EvenShardBatchSampler(Sampler[list]):
    """Rank ``r`` takes items ``r, r + W, ...``, padded with :data:`PAD_INDEX` to the same count on every rank."""

    def __init__(self, n: int, *, batch_size: int, rank: int = 0, world_size: int = 1):
        self.n, self.bs, self.rank, self.world = n, batch_size, rank, world_size

    def _mine(self) -> list[int]:
        per_rank = -(-self.n // self.world)
        mine = list(range(self.rank, self.n, self.world))
        return mine + [PAD_INDEX] * (per_rank - len(mine))

    def __len__(self) -> int:
        return -(-len(self._mine()) // self.bs)

    def __iter__(self) -> Iterator[list[int]]:
        mine = self._mine()
        for i in range(0, len(mine), self.bs):
            yield mine[i:i + self.bs]


class _Tagged(Dataset):
    """``dataset[(i, window_tokens)]`` -> the item with ``_step_tokens``; ``dataset[-1]`` -> an empty example."""

    def __init__(self, dataset: Dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key):
        if isinstance(key, tuple):
            i, tokens = key
            return {**self.dataset[i], "_step_tokens": tokens}
        if key == PAD_INDEX:
            item = dict(self.dataset[0])
            item["loss_mask"] = np.zeros_like(np.asarray(item["loss_mask"]))
            return item
        return self.dataset[key]


class _WithStepTokens:
    def __init__(self, collate: Callable):
        self.collate = collate

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        batch = self.collate(items)
        if items and "_step_tokens" in items[0]:
            batch["step_tokens"] = torch.tensor(int(items[0]["_step_tokens"]), dtype=torch.long)
        return batch


class ResumableLoader(DataLoader):
    """A DataLoader Lightning treats as resumable: its position is the trainer's step (see the docstring)."""

    def state_dict(self) -> dict[str, Any]:
        return {"position": "derived from trainer.global_step"}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class TrainDataModule(pl.LightningDataModule):
    """Builds the mixture with :func:`ifdistill.data.build.build_train_dataset` and serves it.

    Args:
        data: the resolved data config (:meth:`ifdistill.data.build.DataConfig.resolve`): the ``data``
            section with the model's ``enable_thinking`` and the teacher views the method asks for
            (``data.icl``: ``None`` for SFT batches).
        model: the ``model`` section (where the tokenizer is, its chat template).
        method: the method's class (:func:`ifdistill.train.method.method_class`), whose hooks complete
            the built training items and make the training collator (:class:`MethodHooks`: SFT's, none).
        manifest_path: where rank 0 writes the data manifest.
    """

    def __init__(self, data: DataConfig, model: Mapping[str, Any], *, method: type[MethodHooks] = MethodHooks,
                 micro_batch_size: int = 4, val_batch_size: int = 8, packing: bool | str = False, max_row_tokens: Optional[int] = None,
                 num_workers: Optional[int] = 0, manifest_path: Optional[str] = None):
        super().__init__()
        if not isinstance(data, DataConfig):
            raise TypeError("TrainDataModule takes a resolved DataConfig (DataConfig.resolve(data, icl=, model=))")
        if packing not in (True, False, AUTO):
            raise ValueError(f"datamodule.packing must be true, false or auto, got {packing!r}")
        if data.icl is not None and packing is True:
            raise ValueError("datamodule.packing is not supported for distillation (teacher and student differ)")
        self.data_cfg = data
        self.model_cfg = dict(model)
        self.method = method
        self.micro_batch_size, self.val_batch_size = int(micro_batch_size), int(val_batch_size)
        self._packing, self.max_row_tokens = packing, max_row_tokens
        self._num_workers = None if num_workers is None else int(num_workers)
        self.manifest_path = manifest_path
        self.built = None
        self.tokenizer = None

    def _on_cuda(self) -> bool:
        t = self.trainer
        return t.strategy.root_device.type == "cuda" if t is not None else torch.cuda.is_available()

    @property
    def packing(self) -> bool:
        """Whether training batches are packed (``auto``: SFT on a CUDA trainer; module docstring)."""
        if self._packing == AUTO:
            return self.data_cfg.icl is None and self._on_cuda()
        return bool(self._packing)

    def loader_options(self) -> dict[str, Any]:
        """``num_workers`` and ``pin_memory`` of every loader (module docstring)."""
        cuda = self._on_cuda()
        workers = self._num_workers if self._num_workers is not None else (GPU_WORKERS if cuda else 0)
        return {"num_workers": workers, "pin_memory": cuda}

    @property
    def val_names(self) -> list[str]:
        """Held-out set names, in loader order: each new source, then each replay source."""
        if not self.data_cfg.heldout:
            return []
        return [s.name for s in [*self.data_cfg.sources, *self.data_cfg.replay]]

    def setup(self, stage: Optional[str] = None) -> None:
        if self.built is not None:
            return
        from transformers import AutoTokenizer

        from ifdistill.data.build import build_train_dataset

        self.tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(self.model_cfg["name_or_path"]),
                                                       revision=self.model_cfg.get("revision"))
        if self.model_cfg.get("chat_template"):  # text or a .jinja path, read as the evaluator reads it
            self.tokenizer.chat_template = template_text(self.model_cfg["chat_template"])
        rank0 = self.trainer is None or self.trainer.is_global_zero
        self.built = build_train_dataset(self.data_cfg, self.tokenizer,
                                         manifest_path=self.manifest_path if rank0 else None)
        self.method.prepare_items(self.data_cfg, self.built)
        missing = [n for n in self.val_names if n not in self.built.heldout]
        if missing:
            raise ValueError(f"held-out sets {missing} are empty; lower data.heldout or check the sources")

    def train_collator(self) -> Callable:
        """The collator of training micro-batches: the method's (:meth:`MethodHooks.train_collator`),
        given the data layer's for this config."""
        from ifdistill.data.build import collator_for

        default = collator_for(self.data_cfg, self.tokenizer, packing=self.packing, max_row_tokens=self.max_row_tokens)
        return self.method.train_collator(default, data=self.data_cfg, tokenizer=self.tokenizer, built=self.built)

    def _collate(self, train: bool):
        """Validation batches are the student's view alone, padded, whatever the method."""
        from ifdistill.data.build import collator_for

        if train:
            return _WithStepTokens(self.train_collator())
        return _WithStepTokens(collator_for(dataclasses.replace(self.data_cfg, icl=None), self.tokenizer))

    def _world(self) -> tuple[int, int]:
        t = self.trainer
        return (t.world_size, t.global_rank) if t is not None else (1, 0)

    def _step_batches(self, rank: int, world: int) -> StepBatchSampler:
        ds = self.built.train
        return StepBatchSampler(
            ds.sampler(num_replicas=world, rank=rank), micro_batch_size=self.micro_batch_size,
            accumulate=self.trainer.accumulate_grad_batches if self.trainer is not None else 1, world_size=world,
            tokens_of=lambda i: supervised_tokens(ds[i]),
            steps_done=lambda: self.trainer.global_step if self.trainer is not None else 0)

    def train_dataloader(self) -> DataLoader:
        world, rank = self._world()
        return ResumableLoader(_Tagged(self.built.train), batch_sampler=self._step_batches(rank, world),
                               collate_fn=self._collate(True), **self.loader_options())

    def read_order(self, start_step: int, stop_step: float) -> list[int]:
        """The training indices that optimizer steps ``[start_step, stop_step)`` read on all ranks, each
        once, in the order they are first read (what the teacher pass of a run covers first). An
        unbounded ``stop_step`` (``inf``: no step limit) is every index."""
        n = len(self.built.train)
        if stop_step == float("inf"):
            return list(range(n))
        world, _ = self._world()
        ranks = [self._step_batches(r, world).windows(int(start_step), int(stop_step)) for r in range(world)]
        seen: dict[int, None] = {}
        for step in zip(*ranks):
            seen.update(dict.fromkeys(i for window in step for i in window))
            if len(seen) == n:
                break
        return list(seen)

    def val_dataloader(self) -> list[DataLoader]:
        world, rank = self._world()
        out = []
        for name in self.val_names:
            ds = self.built.heldout[name]
            sampler = EvenShardBatchSampler(len(ds), batch_size=self.val_batch_size, rank=rank, world_size=world)
            out.append(DataLoader(_Tagged(ds), batch_sampler=sampler, collate_fn=self._collate(False),
                                  **self.loader_options()))
        return out
