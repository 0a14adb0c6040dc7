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

Validation batches (held-out slices of each source) are sharded evenly across ranks and padded with
*empty* examples (loss mask all zero): every rank runs the same number of forward passes -- ZeRO-3 and
FSDP gather parameters collectively and would hang otherwise -- while the padding adds no token to
any metric, so held-out CE/accuracy are the same on 1 or N ranks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from ifdistill.models import resolve_model_path

PAD_INDEX = -1


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

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        per_epoch = self.steps_per_epoch()
        epoch, window = divmod(int(self.steps_done()), per_epoch)
        self._seek(epoch, window * self.window)
        indices = list(iter(self.sampler))
        for w in range(per_epoch - window):
            chunk = indices[w * self.window:(w + 1) * self.window]
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
        data: the ``data`` config section (``ifdistill.data.build.DataConfig`` fields).
        model: the ``model`` section (tokenizer location, ``enable_thinking``).
        icl_k: ``None`` for SFT batches; ``k >= 0`` for ICL distillation pairs whose teacher view holds
            ``k`` demonstrations (``k = 0``: the teacher view *is* the student view, built here because
            the data layer attaches teacher views only for ``k > 0``).
        demos: ``per_example`` (the data layer's k demonstrations per example) or ``shared`` (one set
            per micro-batch, run once by the teacher: :mod:`ifdistill.train.shared_demos`).
        manifest_path: where rank 0 writes the data manifest.
    """

    def __init__(self, data: Mapping[str, Any], model: Mapping[str, Any], *, micro_batch_size: int = 4,
                 val_batch_size: int = 8, packing: bool = False, max_row_tokens: Optional[int] = None,
                 num_workers: int = 0, icl_k: Optional[int] = None, demos: str = "per_example",
                 manifest_path: Optional[str] = None):
        super().__init__()
        if demos not in ("per_example", "shared"):
            raise ValueError(f"demos must be per_example or shared, got {demos!r}")
        self.icl_k = None if icl_k is None else int(icl_k)
        self.shared_demos = demos == "shared" and bool(self.icl_k)
        self.data_cfg = {**dict(data), "icl_k": 0 if self.shared_demos else (self.icl_k or 0)}
        if self.shared_demos:  # the collator adds the demonstrations; the answer alone is supervised
            self.data_cfg["train_on"] = "last_assistant"
        self.model_cfg = dict(model)
        self.micro_batch_size, self.val_batch_size = int(micro_batch_size), int(val_batch_size)
        self.packing, self.max_row_tokens, self.num_workers = bool(packing), max_row_tokens, int(num_workers)
        self.manifest_path = manifest_path
        self.built = None
        self.tokenizer = None

    @property
    def val_names(self) -> list[str]:
        """Held-out set names, in loader order: each new source, then each replay source."""
        if not int(self.data_cfg.get("heldout") or 0):
            return []
        return [s["name"] for s in [*(self.data_cfg.get("sources") or []), *(self.data_cfg.get("replay") or [])]]

    def setup(self, stage: Optional[str] = None) -> None:
        if self.built is not None:
            return
        from transformers import AutoTokenizer

        from ifdistill.data.build import build_train_dataset

        self.tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(self.model_cfg["name_or_path"]),
                                                       revision=self.model_cfg.get("revision"))
        if self.model_cfg.get("chat_template"):
            self.tokenizer.chat_template = self.model_cfg["chat_template"]
        rank0 = self.trainer is None or self.trainer.is_global_zero
        self.built = build_train_dataset(self.data_cfg, self.tokenizer,
                                         manifest_path=self.manifest_path if rank0 else None,
                                         enable_thinking=self.model_cfg.get("enable_thinking"))
        if self.icl_k == 0:
            for item in self.built.train.items:
                add_identity_teacher_view(item)
        missing = [n for n in self.val_names if n not in self.built.heldout]
        if missing:
            raise ValueError(f"held-out sets {missing} are empty; lower data.heldout or check the sources")

    def _collate(self, train: bool):
        from ifdistill.data.build import collator_for
        from ifdistill.data.collate import IclCollator

        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        if train and self.icl_k is not None:
            if self.packing:
                raise ValueError("datamodule.packing is not supported for distillation (teacher and student differ)")
            if self.shared_demos:
                return _WithStepTokens(self._shared_demo_collator(pad))
            return _WithStepTokens(IclCollator(pad))
        cfg = {**self.data_cfg, "icl_k": 0}
        return _WithStepTokens(collator_for(cfg, self.tokenizer, packing=self.packing and train,
                                            max_row_tokens=self.max_row_tokens))

    def _shared_demo_collator(self, pad: int):
        """The collator choosing one demonstration set per micro-batch from the new training data."""
        from ifdistill.data.build import DataConfig
        from ifdistill.data.sources import load_source
        from ifdistill.train.shared_demos import SharedDemoCollator

        cfg = DataConfig.from_mapping(self.data_cfg)
        examples = {}
        for spec in [*cfg.sources, *cfg.replay]:
            for ex in load_source(spec, tolerant=cfg.tolerant).examples:
                examples[(ex.source, ex.row_id)] = ex
        used = {(it["source"], it["row_id"]) for it in self.built.train.items if not it["is_replay"]}
        pool = [examples[key] for key in sorted(used)]
        seed = cfg.icl_seed if cfg.icl_seed is not None else cfg.seed
        return SharedDemoCollator(self.tokenizer, pool, examples, k=self.icl_k, seed=seed, pad_token_id=pad,
                                  enable_thinking=self.model_cfg.get("enable_thinking"),
                                  teacher_max_length=cfg.teacher_max_length)

    def _world(self) -> tuple[int, int]:
        t = self.trainer
        return (t.world_size, t.global_rank) if t is not None else (1, 0)

    def train_dataloader(self) -> DataLoader:
        world, rank = self._world()
        ds = self.built.train
        batches = StepBatchSampler(
            ds.sampler(num_replicas=world, rank=rank), micro_batch_size=self.micro_batch_size,
            accumulate=self.trainer.accumulate_grad_batches if self.trainer is not None else 1, world_size=world,
            tokens_of=lambda i: supervised_tokens(ds[i]),
            steps_done=lambda: self.trainer.global_step if self.trainer is not None else 0)
        return ResumableLoader(_Tagged(ds), batch_sampler=batches, collate_fn=self._collate(True),
                               num_workers=self.num_workers)

    def val_dataloader(self) -> list[DataLoader]:
        world, rank = self._world()
        out = []
        for name in self.val_names:
            ds = self.built.heldout[name]
            sampler = EvenShardBatchSampler(len(ds), batch_size=self.val_batch_size, rank=rank, world_size=world)
            out.append(DataLoader(_Tagged(ds), batch_sampler=sampler, collate_fn=self._collate(False),
                                  num_workers=self.num_workers))
        return out


def add_identity_teacher_view(item: dict[str, Any]) -> dict[str, Any]:
    """Give an SFT item the ICL fields of a 0-shot teacher: the same tokens, aligned position by position."""
    positions = np.nonzero(np.asarray(item["loss_mask"]))[0].astype(np.int64)
    item.update(teacher_input_ids=item["input_ids"], teacher_loss_mask=item["loss_mask"],
                student_positions=positions, teacher_positions=positions, num_demos=0)
    return item


def manifest_file(run_data_dir: str | Path) -> str:
    return str(Path(run_data_dir) / "manifest.json")
