"""A deterministic, resumable per-rank sampler (use with Lightning's ``use_distributed_sampler=False``).

Why not Lightning's: when Lightning injects a ``DistributedSampler`` it forces ``shuffle=True`` with
its own seeding, which would throw away ifdistill's epoch order (the mixing module's nested,
ratio-independent order) and cannot resume in the middle of an epoch.

Semantics:

- The *global* order of an epoch is ``order(epoch)`` -- by default a seeded permutation of
  ``range(n)``; training passes ``TrainDataset.epoch_order`` so the mixture's order is used.
- Rank ``r`` of ``W`` takes every ``W``-th item of the global order, starting at ``r``; the shards are
  disjoint and together cover the epoch. When ``n`` is not a multiple of ``W``, ``drop_last=False``
  (default) pads the global order by wrapping around to its start (the same as
  ``torch.utils.data.DistributedSampler``; every rank must run the same number of steps or DDP
  hangs), and ``drop_last=True`` drops the last ``n % W`` items instead.
- Resuming: ``state_dict()`` records the epoch and the number of samples consumed *globally*
  (all ranks together). After ``load_state_dict`` the next iteration continues the same global
  order at that position and shards the rest, so a run resumed on the same world size sees exactly
  the indices an uninterrupted run would have seen. The count is the number of indices this sampler
  has *yielded*; with DataLoader workers prefetching, pass the number actually trained on
  (``state_dict(num_samples_consumed=...)``) -- e.g. ``global_step * global_batch_size``.
- ``set_epoch(e)`` (Lightning calls it at every epoch start) keeps a loaded position only if ``e``
  is the loaded epoch. A finished pass is recorded as such (consumed = epoch length), and the next
  pass without a ``set_epoch`` call starts the following epoch, so a checkpoint taken at an epoch
  boundary never replays the epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from torch.utils.data import Sampler

from ifdistill.data.mixing import permutation

OrderFn = Callable[[int], Sequence[int]]


class ResumableDistributedSampler(Sampler[int]):
    """Shard ``order(epoch)`` across ranks deterministically, resumable mid-epoch."""

    def __init__(self, order: int | OrderFn, *, num_replicas: int = 1, rank: int = 0, seed: int = 0,
                 shuffle: bool = True, drop_last: bool = False):
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} out of range for {num_replicas} replicas")
        if isinstance(order, int):
            n = order
            order = (lambda e: permutation(n, seed, "sampler", e)) if shuffle else (lambda e: range(n))
        self._order_fn = order
        self.num_replicas, self.rank, self.seed = num_replicas, rank, seed
        self.shuffle, self.drop_last = shuffle, drop_last
        self.epoch = 0
        self._start = 0  # global position at which the next pass starts
        self._yielded = 0  # indices yielded by this rank in the current pass

    # -- the order of one pass ------------------------------------------------------------------
    def global_order(self, epoch: int | None = None) -> list[int]:
        return list(self._order_fn(self.epoch if epoch is None else epoch))

    def _padded(self) -> list[int]:
        """The epoch's global order, padded (or trimmed) to a multiple of the world size."""
        full = self.global_order()
        w = self.num_replicas
        if not full or len(full) % w == 0:
            return full
        if self.drop_last:
            return full[: len(full) - len(full) % w]
        pad = w - len(full) % w
        return full + (full * (pad // len(full) + 1))[:pad]

    def __iter__(self) -> Iterator[int]:
        order = self._padded()
        if order and self._start >= len(order):  # the previous pass finished: go on to the next epoch
            self.epoch, self._start = self.epoch + 1, 0
            order = self._padded()
        mine = order[self._start :][self.rank :: self.num_replicas]
        self._yielded = 0
        for idx in mine:
            self._yielded += 1
            yield idx
        self._start, self._yielded = len(order), 0  # completed: state_dict() says "epoch done"

    def __len__(self) -> int:
        order = self._padded()
        start = 0 if self._start >= len(order) else self._start
        return len(order[start:][self.rank :: self.num_replicas])

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self._start, self._yielded = 0, 0
        self.epoch = epoch

    # -- resume ---------------------------------------------------------------------------------
    def state_dict(self, num_samples_consumed: int | None = None) -> dict[str, Any]:
        """``num_samples_consumed`` is global (all ranks); default: what this sampler yielded."""
        if num_samples_consumed is None:
            num_samples_consumed = self._start + self._yielded * self.num_replicas
        return {"epoch": self.epoch, "num_samples_consumed": int(num_samples_consumed), "seed": self.seed,
                "num_replicas": self.num_replicas, "epoch_len": len(self.global_order())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("seed", self.seed) != self.seed:
            raise ValueError(f"sampler state was saved with seed {state['seed']}, this sampler has {self.seed}")
        n = len(self.global_order(state["epoch"]))
        if state.get("epoch_len", n) != n:
            raise ValueError(f"sampler state is for an epoch of {state['epoch_len']} samples, this one has {n}: "
                             "the data changed since the checkpoint")
        consumed = int(state["num_samples_consumed"])
        if consumed % self.num_replicas and state.get("num_replicas") == self.num_replicas:
            raise ValueError(f"num_samples_consumed={consumed} is not a multiple of the world size")
        self.epoch, self._start, self._yielded = int(state["epoch"]), consumed, 0
