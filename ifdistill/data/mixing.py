"""Exact, nested replay mixing: how many examples come from the replay source(s), and in which order.

Definition. ``ratio`` is the fraction of *training examples* (per epoch) drawn from the replay
source(s): ``n_replay / (n_new + n_replay)``.

- ``total=None`` (default): every new example is used once and
  ``n_replay = round_half_up(n_new * ratio / (1 - ratio))``; the realised share differs from
  ``ratio`` only by rounding (less than half an example).
- ``total=N``: the epoch has exactly ``N`` examples, ``n_replay = round_half_up(N * ratio)`` and the
  first ``N - n_replay`` new examples of a seeded permutation are used.

Ratios are parsed as decimals (``Fraction(str(ratio))``), so 0.18 * 2000 is 360, not 359.99999.
Because a ratio is set in examples but the loss sees tokens, :mod:`ifdistill.data.manifest` also
reports the share in supervised tokens.

How other tools define a mixture (read from their code; check the version in use before quoting):

- **open-instruct** (``dataset_mixer`` / ``dataset_mixer_list``): the number next to each dataset is
  a *per-dataset sampling amount* -- a float is the fraction of *that dataset's own rows* to take, an
  integer an absolute row count (recent versions repeat a dataset when the count exceeds its size).
  The chosen rows are concatenated and shuffled. So ``smoltalk 0.05`` means 5% of SmolTalk, not 5%
  of the training mix; the replay share is
  ``f*R / (N + f*R)`` for a replay set of ``R`` rows and ``N`` new rows. To express that here, use
  ``ratio = f*R / (N + f*R)``.
- **TRL** has no replay ratio. ``SFTTrainer`` trains on the one dataset it is given; the ``trl sft``
  CLI's dataset mixture (``DatasetMixtureConfig``, TRL >= ~0.20) loads each listed dataset
  (optionally a split/slice and columns) and *concatenates* them, so each source's share is simply
  its row count (there is no weight field; a user subsamples with split slicing such as
  ``train[:5%]``, which again is a fraction of that dataset, not of the mix).
  ``datasets.interleave_datasets(probabilities=...)`` is sometimes used instead: that is a
  *sampling probability* per draw (the realised counts are random, not exact) and, with the default
  ``stopping_strategy="first_exhausted"``, the epoch ends when the smallest dataset runs out.

Properties this module guarantees (and tests): counts are exact; everything is a function of the
seed; the mixture is *nested* across ratios -- the replay examples of 5% are a prefix (hence a
subset) of those of 18%, which are a prefix of those of 50% -- and the new data comes in the same
order at every ratio. Nesting comes from three choices: each replay source is consumed in a fixed
seeded order; replay slots are assigned to sources by a sequential (Sainte-Lague) schedule, which is
house-monotone (adding a slot never takes one away from a source, unlike largest-remainder
apportionment); and the epoch order sorts items by random *keys attached to the items* (new item
``i`` always gets the same key, replay slot ``j`` always the same key) rather than shuffling
positions, so adding replay items interleaves them without reordering the new data.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Mapping, Sequence
from fractions import Fraction

import numpy as np


def _exact(ratio: float | str | Fraction) -> Fraction:
    r = ratio if isinstance(ratio, Fraction) else Fraction(str(ratio))
    if not 0 <= r < 1:
        raise ValueError(f"replay ratio must be in [0, 1), got {ratio}")
    return r


def _round_half_up(x: Fraction) -> int:
    return math.floor(x + Fraction(1, 2))


def replay_counts(n_new: int, ratio: float | str, *, total: int | None = None) -> tuple[int, int]:
    """``(new examples used, replay examples)`` for one epoch (see the module docstring)."""
    r = _exact(ratio)
    if total is None:
        return n_new, _round_half_up(n_new * r / (1 - r))
    n_replay = _round_half_up(total * r)
    if total - n_replay > n_new:
        raise ValueError(f"total={total} at ratio {ratio} needs {total - n_replay} new examples; only {n_new} exist")
    return total - n_replay, n_replay


def replay_schedule(weights: Mapping[str, float], n: int) -> list[str]:
    """Source name of each of the first ``n`` replay slots (Sainte-Lague order; a prefix for any n).

    Each source's count after ``n`` slots is within one example of ``n * w / sum(w)``.
    """
    if n and not weights:
        raise ValueError("replay examples requested but no replay source is configured")
    names = list(weights)
    counts = dict.fromkeys(names, 0)
    out = []
    for _ in range(n):
        best = max(names, key=lambda s: (weights[s] / (2 * counts[s] + 1), -names.index(s)))
        counts[best] += 1
        out.append(best)
    return out


def stable_seed(*parts: object) -> list[int]:
    """A numpy seed sequence from arbitrary parts (strings hashed with sha256, not Python's hash)."""
    return [int.from_bytes(hashlib.sha256(str(p).encode()).digest()[:8], "little") for p in parts]


def permutation(n: int, seed: int, *stream: object) -> list[int]:
    """A seeded permutation of ``range(n)`` for one named stream."""
    return np.random.default_rng(stable_seed(seed, *stream)).permutation(n).tolist()


def source_stream(n: int, seed: int, name: str, *, passes: int = 1) -> list[int]:
    """Order in which a source's examples are consumed: ``passes`` seeded permutations in a row.

    Growing the number of examples taken only extends this list, which is what makes replay nested.
    """
    out: list[int] = []
    for p in range(passes):
        out += permutation(n, seed, "source", name, p)
    return out


def _keys(n: int, seed: int, stream: str, epoch: int) -> np.ndarray:
    # Generator.random(n)[:m] == Generator.random(m): keys of existing items never change as n grows.
    return np.random.default_rng(stable_seed(seed, "order", stream, epoch)).random(n)


def epoch_order(n_new: int, n_replay: int, *, seed: int, epoch: int = 0, shuffle: bool = True,
                new_index: Sequence[int] | None = None) -> list[int]:
    """Indices into ``new items + replay items`` (replay at ``n_new + j``) in training order.

    ``new_index`` gives each new item's index among *all* new examples (when ``total`` keeps only a
    subset), so an item's key -- hence its relative order -- does not depend on which others are kept.
    With ``shuffle=False`` new items keep their order and replay items are spread evenly among them.
    """
    if shuffle:
        if new_index is None:
            k_new = _keys(n_new, seed, "new", epoch)
        else:
            idx = np.asarray(new_index, dtype=np.int64)
            k_new = _keys(int(idx.max()) + 1 if len(idx) else 0, seed, "new", epoch)[idx]
        k_rep = _keys(n_replay, seed, "replay", epoch)
    else:
        k_new = (np.arange(n_new) + 0.5) / max(n_new, 1)
        k_rep = (np.arange(n_replay) + 0.5) / max(n_replay, 1)
    keys = np.concatenate([k_new, k_rep])
    tiebreak = np.arange(n_new + n_replay)
    return np.lexsort((tiebreak, keys)).tolist()


@dataclasses.dataclass(frozen=True)
class MixPlan:
    """The counts of one mixture; ``schedule[j]`` is the replay source of replay slot ``j``."""

    ratio: float
    seed: int
    n_new: int
    n_replay: int
    schedule: tuple[str, ...]
    total: int | None = None

    @property
    def per_source(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.schedule:
            out[s] = out.get(s, 0) + 1
        return out

    def slot_positions(self) -> list[tuple[str, int]]:
        """For each replay slot, ``(source, k)``: it takes the source's k-th example in stream order."""
        seen: dict[str, int] = {}
        out = []
        for s in self.schedule:
            out.append((s, seen.get(s, 0)))
            seen[s] = seen.get(s, 0) + 1
        return out


def plan_mix(n_new: int, ratio: float | str, replay_weights: Mapping[str, float], *, seed: int,
             total: int | None = None) -> MixPlan:
    n_used, n_replay = replay_counts(n_new, ratio, total=total)
    return MixPlan(ratio=float(ratio), seed=seed, n_new=n_used, n_replay=n_replay,
                   schedule=tuple(replay_schedule(replay_weights, n_replay)), total=total)


def new_subset(n_available: int, n_used: int, seed: int) -> list[int]:
    """Which new examples are used when ``total`` caps them: a prefix of a seeded permutation."""
    if n_used >= n_available:
        return list(range(n_available))
    return sorted(permutation(n_available, seed, "new-subset")[:n_used])


def mix_indices(n_new: int, replay_sizes: Mapping[str, int], ratio: float | str, *, seed: int,
                weights: Mapping[str, float] | None = None, total: int | None = None,
                allow_repeats: bool = False, epoch: int = 0) -> list[tuple[str, int]]:
    """The whole mixture on indices: ``("new", i)`` / ``(source, row)`` in epoch order.

    A convenience for tests and tools; training (:mod:`ifdistill.data.build`) applies the same plan
    to rendered examples, skipping replay rows that are dropped for length.
    """
    weights = dict(weights) if weights is not None else dict.fromkeys(replay_sizes, 1.0)
    plan = plan_mix(n_new, ratio, weights, seed=seed, total=total)
    need = plan.per_source
    streams = {}
    for s, n in need.items():
        size = replay_sizes[s]
        if n > size and not allow_repeats:
            raise ValueError(f"replay source {s!r} has {size} examples but the mixture needs {n}; "
                             "set allow_repeats (examples are then repeated) or lower the ratio")
        streams[s] = source_stream(size, seed, s, passes=-(-n // size))
    rows = [(s, streams[s][k]) for s, k in plan.slot_positions()]
    kept = new_subset(n_new, plan.n_new, seed)
    items = [("new", i) for i in kept] + rows
    return [items[i] for i in epoch_order(len(kept), len(rows), seed=seed, epoch=epoch, new_index=kept)]
