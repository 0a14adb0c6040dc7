"""Sources -> mixing -> rendering: the training dataset, in one function that training wraps.

:func:`build_train_dataset` is what the training LightningDataModule calls: it loads the new-data
sources and the replay sources, holds out evaluation slices, renders every new example (so length
drops are known before the mixture is counted), pulls replay examples lazily in each source's seeded
stream order until the exact count is reached (a dropped replay row is replaced by the next one in
the stream, so the replay share stays exact *after* length filtering, and the nesting across ratios
still holds), attaches ICL teacher views (``per_example`` demonstrations, :func:`ifdistill.data.icl.teacher_view`), and
fills the manifest.

Configuration is read once: :meth:`DataConfig.resolve` turns the ``data``, ``method`` and ``model``
sections into one typed object (the effective ``enable_thinking``, the ICL settings of a distillation
method) that the datamodule, the collators and this builder receive.

Several new-data sources are concatenated (each contributes all its rows); several replay sources
share the replay slots by their weights.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from ifdistill.config import Range, is_int, is_num
from ifdistill.data import mixing
from ifdistill.data.icl import DemoSelector, IclSettings, teacher_view
from ifdistill.data.manifest import DataManifest, tokenizer_identity
from ifdistill.data.records import DataError, Example
from ifdistill.data.render import Rendered, RenderError, render
from ifdistill.data.sampler import ResumableDistributedSampler
from ifdistill.data.sources import LoadedSource, SourceSpec, load_source
from ifdistill.data.truncation import LengthStats, apply_length_policy


@dataclasses.dataclass
class DataConfig:
    """The ``data`` config group (see ``conf/data/*.yaml``)."""

    sources: list[SourceSpec]
    replay: list[SourceSpec] = dataclasses.field(default_factory=list)
    ratio: float = 0.0
    total: int | None = None
    allow_replay_repeats: bool = False
    seed: int = 1234
    # The training order's seed (null: `seed`). Kept apart so that seed replicates of a run can shuffle
    # differently while their data -- the mixture, the held-out sets, the demonstrations -- stays the same.
    order_seed: int | None = None
    shuffle: bool = True
    max_length: int | None = 2048
    truncation: str = "drop"
    tolerant: bool = False
    train_on: str = "assistant"
    enable_thinking: bool | None = None
    heldout: int = 0  # examples held out from each source (new and replay) for held-out metrics
    icl_seed: int | None = None  # demonstration choice (null: `seed`); k and the scheme come from `method`
    icl_on_replay: bool = False
    teacher_max_length: int | None = None
    # Not a YAML key: the ICL settings of a distillation method, set by :meth:`resolve` (None: SFT batches).
    icl: IclSettings | None = None

    #: The values' ranges, which preflight applies to the ``data`` section (:func:`ifdistill.config.range_problems`).
    ranges: ClassVar[tuple[Range, ...]] = (
        ("ratio", lambda v: is_num(v) and 0 <= v < 1, "a number in [0, 1)"),
        ("total", lambda v: v is None or (is_int(v) and v >= 1), "null or an integer >= 1"),
        ("heldout", lambda v: is_int(v) and v >= 0, "an integer >= 0"),
        ("max_length", lambda v: v is None or (is_int(v) and v >= 1), "null or an integer >= 1"),
    )

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> DataConfig:
        """The ``data`` section alone (no method or model): SFT items, ``enable_thinking`` as written."""
        m = dict(m)
        fields = {f.name for f in dataclasses.fields(cls)} - {"icl"}
        unknown = set(m) - fields - {"name"}
        if unknown:
            raise ValueError(f"data config: unknown keys {sorted(unknown)}; known: {sorted(fields)}")
        m.pop("name", None)
        for key in ("sources", "replay"):
            m[key] = [s if isinstance(s, SourceSpec) else SourceSpec.from_mapping(dict(s)) for s in m.get(key) or []]
        return cls(**m)

    @classmethod
    def resolve(cls, data: Mapping[str, Any], *, icl: Mapping[str, Any] | None = None,
                model: Mapping[str, Any] | None = None) -> DataConfig:
        """The data section as training uses it: ``model.enable_thinking`` is the thinking flag (the one the
        evaluator renders prompts with; a ``data.enable_thinking`` that disagrees is refused), and ``icl``
        (what the method asks the data layer to attach: ``k``, ``demos``, ``extra_demos``, see
        :class:`IclSettings`; ``None``: plain SFT items) brings the teacher views, whose examples are
        supervised on the final answer only (``train_on=last_assistant``: that is what teacher and student
        are compared on)."""
        cfg = data if isinstance(data, DataConfig) else cls.from_mapping(data)
        thinking = (model or {}).get("enable_thinking")
        if model is not None and bool(cfg.enable_thinking) != bool(thinking):  # null renders as false
            raise ValueError(f"data.enable_thinking={cfg.enable_thinking} but model.enable_thinking={thinking}: "
                             "the evaluator renders prompts with the model's value, so training would learn "
                             "answers after a prompt it never sees at evaluation; set model.enable_thinking")
        if thinking is not None:
            cfg = dataclasses.replace(cfg, enable_thinking=thinking)
        if icl is not None:
            settings = IclSettings(k=int(icl["k"]), demos=str(icl["demos"]), extra_demos=icl.get("extra_demos"),
                                   seed=cfg.icl_seed if cfg.icl_seed is not None else cfg.seed,
                                   on_replay=cfg.icl_on_replay, teacher_max_length=cfg.teacher_max_length,
                                   enable_thinking=cfg.enable_thinking)
            cfg = dataclasses.replace(cfg, icl=settings, train_on="last_assistant")
        return cfg

    @property
    def per_example_demos(self) -> bool:
        """Teacher views with demonstrations are attached to the items here (not by a batch collator)."""
        return self.icl is not None and (self.icl.k > 0 or self.icl.extra_demos is not None) and self.icl.demos == "per_example"

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out.pop("icl")
        return out


class TrainDataset(torch.utils.data.Dataset):
    """Rendered examples: ``n_new`` new ones first, then ``n_replay`` replay ones (slot order).

    Items are dicts of numpy arrays and metadata; :meth:`epoch_order` is the mixture's order for an
    epoch and :meth:`sampler` the per-rank sampler over it.
    """

    def __init__(self, items: list[dict[str, Any]], n_new: int, *, seed: int, shuffle: bool = True,
                 new_index: list[int] | None = None):
        self.items, self.n_new, self.seed, self.shuffle = items, n_new, seed, shuffle
        self.n_replay = len(items) - n_new
        self.new_index = new_index  # each new item's index among all new examples (see mixing.epoch_order)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.items[i]

    def epoch_order(self, epoch: int) -> list[int]:
        return mixing.epoch_order(self.n_new, self.n_replay, seed=self.seed, epoch=epoch, shuffle=self.shuffle,
                                  new_index=self.new_index)

    def sampler(self, *, num_replicas: int = 1, rank: int = 0, drop_last: bool = False) -> ResumableDistributedSampler:
        return ResumableDistributedSampler(self.epoch_order, num_replicas=num_replicas, rank=rank, seed=self.seed,
                                           shuffle=self.shuffle, drop_last=drop_last)


@dataclasses.dataclass
class TrainData:
    """The built mixture; ``examples[i]`` is the conversation of ``train[i]`` and ``demo_pool`` the new
    training examples that demonstrations are drawn from (never held-out rows)."""

    train: TrainDataset
    heldout: dict[str, TrainDataset]
    manifest: DataManifest
    plan: mixing.MixPlan
    examples: list[Example] = dataclasses.field(default_factory=list)
    demo_pool: list[Example] = dataclasses.field(default_factory=list)


def _item(r: Rendered, ex: Example, *, replay: bool) -> dict[str, Any]:
    return {"input_ids": np.asarray(r.input_ids, dtype=np.int64), "loss_mask": np.asarray(r.loss_mask, dtype=np.int8),
            "is_replay": replay, "source": ex.source, "row_id": ex.row_id}


class _Renderer:
    """Renders examples of one source with the length policy, counting every outcome."""

    def __init__(self, tokenizer, cfg: DataConfig, entry: dict[str, Any], *, replay: bool):
        self.tok, self.cfg, self.replay = tokenizer, cfg, replay
        self.length = LengthStats()
        self.failures: dict[str, int] = {}
        self.failure_examples: list[str] = []
        entry["length"], entry["render_failed"], entry["render_failure_examples"] = \
            self.length, self.failures, self.failure_examples

    def __call__(self, ex: Example) -> dict[str, Any] | None:
        try:
            r = render(self.tok, ex.messages, enable_thinking=self.cfg.enable_thinking, train_on=self.cfg.train_on)
        except RenderError as e:
            err = DataError("render_failed", str(e), location=f"{ex.source}:{ex.row_id}", field="messages")
            if not self.cfg.tolerant:
                raise err from None
            self.failures["render_failed"] = self.failures.get("render_failed", 0) + 1
            if len(self.failure_examples) < 5:
                self.failure_examples.append(str(err))
            return None
        r = apply_length_policy(r, self.cfg.max_length, self.cfg.truncation, self.length)
        return None if r is None else _item(r, ex, replay=self.replay)


def _split_heldout(src: LoadedSource, n: int, seed: int) -> tuple[list[Example], list[Example]]:
    if n <= 0:
        return src.examples, []
    if n >= len(src.examples):
        raise ValueError(f"source {src.spec.name!r}: heldout={n} leaves no training examples ({len(src.examples)})")
    perm = mixing.permutation(len(src.examples), seed, "heldout", src.spec.name)
    held = set(perm[:n])
    train = [ex for i, ex in enumerate(src.examples) if i not in held]
    return train, [src.examples[i] for i in sorted(held)]


def _attach_icl(tok, icl: IclSettings, items: list[dict[str, Any]], examples: list[Example],
                selector: DemoSelector, stats: dict[str, int]) -> None:
    """Per-example demonstrations: each item gets its own k-subset of the pool and its teacher view."""
    for it, ex in zip(items, examples):
        demos = selector.select(icl.k, exclude_key=ex.uid, exclude_prompt=ex.prompt)
        demos += list(icl.extra_demos(ex)) if icl.extra_demos is not None else []
        view = teacher_view(tok, ex, it, demos, icl)
        it.update(view.fields)
        stats["demos_removed_for_length"] = stats.get("demos_removed_for_length", 0) + view.demos_dropped
        stats["teacher_tokens"] = stats.get("teacher_tokens", 0) + view.teacher_tokens


def _take_replay(tok, cfg: DataConfig, src: LoadedSource, pool: list[Example], count: int,
                 entry: dict[str, Any]) -> tuple[list[dict[str, Any]], list[Example]]:
    """The first ``count`` replay items of a source that survive rendering, in stream order."""
    renderer = _Renderer(tok, cfg, entry, replay=True)
    items, used = [], []
    passes = 0
    while len(items) < count:
        if passes and not cfg.allow_replay_repeats:
            raise ValueError(f"replay source {src.spec.name!r} has {len(items)} usable examples "
                             f"({len(pool)} loaded) but the mixture needs {count}; lower data.ratio, add "
                             "replay data, or set data.allow_replay_repeats=true")
        if not pool:
            raise ValueError(f"replay source {src.spec.name!r} is empty")
        before = len(items)
        for i in mixing.permutation(len(pool), cfg.seed, "source", src.spec.name, passes):
            it = renderer(pool[i])
            if it is not None:
                items.append(it)
                used.append(pool[i])
                if len(items) == count:
                    break
        passes += 1
        if len(items) == before:
            raise ValueError(f"replay source {src.spec.name!r}: no example survives rendering and max_length")
    entry["passes"] = passes
    return items, used


def build_train_dataset(config: DataConfig | Mapping[str, Any], tokenizer, *,
                        manifest_path: str | Path | None = None) -> TrainData:
    """Build the training mixture (and held-out slices) and write the manifest if a path is given.

    A plain mapping is read as the ``data`` section alone (:meth:`DataConfig.from_mapping`); training
    passes the resolved config (:meth:`DataConfig.resolve`).
    """
    cfg = config if isinstance(config, DataConfig) else DataConfig.from_mapping(config)
    if not cfg.sources:
        raise ValueError("data config has no sources")
    if cfg.ratio and not cfg.replay:
        raise ValueError(f"data.ratio={cfg.ratio} but no replay source is configured")
    names = [s.name for s in [*cfg.sources, *cfg.replay]]
    if len(set(names)) != len(names):
        raise ValueError(f"source names must be unique, got {names}")
    manifest = DataManifest(cfg.to_dict())
    manifest.set("tokenizer", tokenizer_identity(tokenizer))
    heldout: dict[str, list[dict[str, Any]]] = {}

    new_items: list[dict[str, Any]] = []
    new_examples: list[Example] = []
    for spec in cfg.sources:
        src = load_source(spec, tolerant=cfg.tolerant)
        entry = manifest.source(spec.name, "new")
        entry.update(src.stats.to_dict())
        train, held = _split_heldout(src, cfg.heldout, cfg.seed)
        renderer = _Renderer(tokenizer, cfg, entry, replay=False)
        for ex in train:
            it = renderer(ex)
            if it is not None:
                new_items.append(it)
                new_examples.append(ex)
        heldout[spec.name] = [it for it in map(_Renderer(tokenizer, cfg, {}, replay=False), held) if it]
        entry["heldout"] = len(heldout[spec.name])
    if not new_items:
        raise ValueError("no training example survived loading, rendering and max_length")

    # the demonstration pool: every new training example, before data.total's subset (which depends on
    # data.ratio), so an example's demonstrations -- its teacher view -- are the same in every run of a sweep
    demo_pool = list(new_examples)
    keep = mixing.new_subset(len(new_items), mixing.replay_counts(len(new_items), cfg.ratio, total=cfg.total)[0],
                             cfg.seed)
    new_items, new_examples = [new_items[i] for i in keep], [new_examples[i] for i in keep]
    weights = {s.name: s.weight for s in cfg.replay}
    plan = mixing.plan_mix(len(new_items), cfg.ratio, weights, seed=cfg.seed, total=cfg.total)
    replay_items: list[dict[str, Any]] = []
    replay_examples: list[Example] = []
    need = plan.per_source
    taken: dict[str, tuple[list, list]] = {}
    for spec in cfg.replay:
        src = load_source(spec, tolerant=cfg.tolerant)
        entry = manifest.source(spec.name, "replay")
        entry.update(src.stats.to_dict())
        entry["weight"] = spec.weight
        pool, held = _split_heldout(src, cfg.heldout, cfg.seed)
        heldout[spec.name] = [it for it in map(_Renderer(tokenizer, cfg, {}, replay=True), held) if it]
        entry["heldout"] = len(heldout[spec.name])
        taken[spec.name] = _take_replay(tokenizer, cfg, src, pool, need.get(spec.name, 0), entry)
    for s, k in plan.slot_positions():
        replay_items.append(taken[s][0][k])
        replay_examples.append(taken[s][1][k])

    items = new_items + replay_items
    for i, it in enumerate(items):
        it["index"] = i
    examples = new_examples + replay_examples
    if cfg.per_example_demos:
        stats: dict[str, int] = {}
        # demos come from the new training data; never the example itself
        _attach_icl(tokenizer, cfg.icl, items, examples, DemoSelector(demo_pool, seed=cfg.icl.seed), stats)
        own = {"extra_demos": cfg.icl.extra_demos.__name__} if cfg.icl.extra_demos is not None else {}
        manifest.set("icl", {"k": cfg.icl.k, "demos": "per_example", "pool": "new training data", **own, **stats})
    elif cfg.icl is not None:
        manifest.set("icl", {"k": cfg.icl.k, "demos": cfg.icl.demos, "pool": "new training data"})
    manifest.data["mix"].update({"ratio": cfg.ratio, "total": cfg.total, "seed": cfg.seed,
                                 "order_seed": cfg.order_seed, "n_new": plan.n_new,
                                 "n_replay": plan.n_replay, "replay_per_source": plan.per_source})
    manifest.record_usage(items)
    for entry in manifest.data["sources"].values():
        if isinstance(entry.get("length"), LengthStats):
            entry["length"] = entry["length"].to_dict()
    if manifest_path is not None:
        manifest.write(manifest_path)
    order_seed = cfg.order_seed if cfg.order_seed is not None else cfg.seed
    train = TrainDataset(items, len(new_items), seed=order_seed, shuffle=cfg.shuffle, new_index=keep)
    held_ds = {k: TrainDataset(v, len(v), seed=cfg.seed, shuffle=False) for k, v in heldout.items() if v}
    return TrainData(train=train, heldout=held_ds, manifest=manifest, plan=plan, examples=examples,
                     demo_pool=demo_pool)


def collator_for(cfg: DataConfig, tokenizer, *, packing: bool = False, max_row_tokens: int | None = None):
    """The collator for items built without a batch-level teacher: per-example ICL pairs, packed or padded."""
    from ifdistill.data.collate import IclCollator, PackCollator, PadCollator

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if cfg.icl is not None:
        if packing:
            raise ValueError("packing is not supported for ICL distillation batches (teacher and student differ)")
        return IclCollator(pad)
    return PackCollator(pad, max_row_tokens=max_row_tokens) if packing else PadCollator(pad)


__all__: Sequence[str] = ("DataConfig", "TrainData", "TrainDataset", "build_train_dataset", "collator_for")
