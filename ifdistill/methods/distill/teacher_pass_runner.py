"""Where the teacher pass runs: in a training run (at train start, then on demand), or as its own command.

``method.teacher_source=cache`` (``conf/method/distill.yaml``) makes a distillation run read its teacher
from the :class:`~ifdistill.methods.distill.teacher_cache.TeacherCache` under ``method.cache_dir``. At train start
(:func:`run_first_pass`, after a resumed run's step is restored) a run covers the teacher views of the
examples it reads from that step to its last (:meth:`TrainDataModule.read_order`), not the whole data
set: a pilot of 20 steps pays for the examples of 20 steps, a resumed run for the steps it has left.
A step that reads past that (an epoch beyond the horizon) computes its missing views on demand
(:func:`extend_on_demand`). Every rank of the run, and every other job filling the same folder at the
same time, shares the views through claims (:mod:`ifdistill.methods.distill.teacher_pass_claims`): a view is
computed by one of them, the others wait for it and verify it. What the run found, computed and
waited for, and the pass's share of its wall time, are logged and recorded in ``run.json``
(:class:`RunPassReport`).

The whole training set's pass can run before training, anywhere, as its own command
(:func:`teacher_pass_only`), one part of the views per task (a SLURM array over the parts, submitted
before the sweep that depends on it: ``conf/experiment/ifeval_replay_sweep.yaml``)::

    ifdistill-train experiment=... method=distill method.teacher_source=cache +teacher_pass.only=true
    ifdistill-train ... +teacher_pass.only=true +teacher_pass.shard=$SLURM_ARRAY_TASK_ID +teacher_pass.num_shards=8

Which schemes can share a cache: a teacher view must be a function of the example alone. Per-example
demonstrations are (the draw is keyed by the example and ``data.icl_seed``, from the pool of all new
examples: :mod:`ifdistill.data.build`), and so are 0-shot views (``k = 0``, replay examples). Shared
demonstrations are not (a batch shares one draw, so a view depends on the batch, the data order and
the replay ratio): :meth:`~ifdistill.methods.distill.hooks.DistillHooks.config_problems` refuses them, as
:class:`~ifdistill.methods.distill.settings.DistillSettings` refuses a teacher that moves (``self_stopgrad``) and
divergences other than the forward KL.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from ifdistill.hashing import weight_hashes
from ifdistill.models import resolve_model_path

if TYPE_CHECKING:  # torch is imported by the functions that need it
    from ifdistill.methods.distill.teacher_cache import CacheNamespace, TeacherCache
    from ifdistill.methods.distill.teacher_pass import PassStats, TeacherViewRef

log = logging.getLogger(__name__)



def teacher_weights_dir(model: Mapping[str, Any]) -> Path:
    """The local folder of a teacher's weights (what its identity is hashed from)."""
    path = Path(resolve_model_path(str(model["name_or_path"])))
    if not path.is_dir():
        raise ValueError(f"method.teacher_source=cache hashes the teacher's weight files, but {path} is not a "
                         "local folder; download the model first")
    return path


def teacher_namespace(model: Mapping[str, Any], *, dtype: str, vocab_size: int, k: int,
                      temperature: float, quantize: Optional[str] = None) -> CacheNamespace:
    """The cache namespace of a teacher given by its ``model``-like section."""
    from ifdistill.methods.distill.teacher_cache import CacheNamespace

    hashes = weight_hashes(teacher_weights_dir(model))
    if not hashes:
        raise ValueError(f"no weight files in {teacher_weights_dir(model)} to identify the teacher by")
    return CacheNamespace(teacher=hashes, dtype=dtype, vocab_size=int(vocab_size), k=min(int(k), int(vocab_size)),
                          temperature=float(temperature), quantize=quantize or None)


def progress_lines(label: str, every: float = 0.1) -> Callable[[int, int], None]:
    """A progress callback for the pass: one log line per ``every`` of the views (logs, not a TTY bar:
    the pass runs in SLURM tasks and before training alike)."""
    state = {"next": every, "t0": time.perf_counter()}

    def report(done: int, total: int) -> None:
        if total and (done / total >= state["next"] or done == total):
            rate = done / max(time.perf_counter() - state["t0"], 1e-9)
            log.info("%s: %d/%d views (%.0f%%), %.1f views/s", label, done, total, 100 * done / total, rate)
            state["next"] = (int(done / total / every) + 1) * every

    return report


def fill_views(module, views: Sequence[TeacherViewRef], *, label: str = "teacher pass") -> PassStats:
    """Make ``views`` present in ``module``'s cache with its teacher, sharing the work with every job that
    fills the same cache folder at the same time (:func:`~ifdistill.methods.distill.teacher_pass.shared_pass`)."""
    from ifdistill.methods.distill.teacher_pass import run_teacher_pass, shared_pass
    from ifdistill.methods.distill.teacher_pass_claims import ClaimBoard

    cache: TeacherCache = module.teacher_cache

    def compute(part: Sequence[TeacherViewRef]) -> PassStats:
        return run_teacher_pass(module.teacher_logits, part, cache, device=module.device,
                                chunk_size=module.logit_chunk_size or 1024,
                                batch_size=module.settings.cache_batch_size, views_per_shard=len(part))

    with ClaimBoard(cache.dir, expiry_s=module.settings.cache_claim_expiry_s) as board:
        return shared_pass(compute, views, cache, board, views_per_shard=module.settings.cache_views_per_shard,
                           progress=progress_lines(label))


def ensure_teacher_cache(module, items: Sequence[Mapping[str, Any]], *, rank: int = 0,
                         barrier: Callable[[], None] = lambda: None) -> PassStats:
    """Fill ``module``'s cache with the teacher views of ``items``; every rank takes part (the ranks share
    the views through claims, as concurrent jobs do) and returns once all of them are there."""
    from ifdistill.methods.distill.teacher_pass import item_views

    cache: TeacherCache = module.teacher_cache
    if rank == 0:
        cache.open()
    barrier()
    cache.open()
    views = item_views(items)
    log.info("teacher pass: %d teacher views to cover in %s", len(views), cache.dir)
    return fill_views(module, views)


def teacher_pass_only(node: Mapping[str, Any], dm, module, *, gpu: bool) -> dict[str, Any]:
    """``+teacher_pass.only=true`` (``node`` is the ``teacher_pass`` section): with the built data and
    teacher, make part ``shard`` of ``num_shards`` of the whole training set's views present, and stop
    (no run directory, no training; :func:`ifdistill.train.run.train` builds ``dm`` and ``module`` as for
    a run). Parts split the views by key, so tasks that start at different times never overlap; a
    training job running meanwhile shares the views through claims."""
    from ifdistill.methods.distill.teacher_pass import item_views

    shard, num = int(node.get("shard", 0)), int(node.get("num_shards", 1))
    if not 0 <= shard < num:
        raise ValueError(f"teacher_pass.shard={shard} must be in [0, teacher_pass.num_shards={num})")
    if getattr(module, "teacher_cache", None) is None:  # a module reading no teacher cache
        raise ValueError("+teacher_pass.only=true needs method=distill with method.teacher_source=cache")
    if gpu:
        module.to("cuda")
    module.on_fit_start_teacher()
    module.teacher_cache.open()
    part = [v for v in item_views(dm.built.train.items) if int(v.key[:12], 16) % num == shard]
    stats = fill_views(module, part, label=f"teacher pass {shard + 1}/{num}").to_dict()
    log.info("teacher pass: %s", stats)
    return {"teacher_pass": stats, "cache_dir": str(module.teacher_cache.dir)}


class RunPassReport:
    """A training run's teacher pass: the first pass (what the run reads from its current step to its
    last), the views training read past it (computed on demand), and the pass's share of the run's time
    (from ``started``, the module's construction: model loading, data, the pass and the steps).
    ``on_demand`` counts views the first pass had not covered: they add to ``views``."""

    def __init__(self, started: Optional[float] = None):
        from ifdistill.methods.distill.teacher_pass import PassStats

        self.first, self.on_demand = PassStats(), PassStats()
        self.t0 = time.perf_counter() if started is None else started

    def to_dict(self) -> dict[str, float]:
        total = dataclasses.replace(self.first).add(self.on_demand)
        run_s = time.perf_counter() - self.t0
        return {**total.to_dict(), "on_demand_views": self.on_demand.views,
                "on_demand_computed_views": self.on_demand.computed, "run_seconds": run_s,
                "pass_share": total.seconds / run_s if run_s else float("nan")}


def _job_totals(trainer, module, stats: PassStats, *, same_views: bool) -> PassStats:
    """``stats`` of this rank made the job's: counts summed over the ranks. ``same_views``: every rank
    covered the same views (the first pass: the ranks share them through claims, as jobs do), so only
    what was computed is summed and the views waited for are those no rank of this job computed."""
    if trainer.world_size == 1:
        return stats
    import torch

    names = ("computed", "taken_over", "tokens", "bytes", "mass")
    names += () if same_views else ("views", "cached_before", "waited")
    mine = torch.tensor([float(getattr(stats, n)) for n in names], dtype=torch.float64, device=module.device)
    summed = trainer.strategy.reduce(mine, reduce_op="sum").tolist()
    out = dataclasses.replace(stats, **{n: type(getattr(stats, n))(v) for n, v in zip(names, summed)})
    if same_views:
        out.waited = max(out.views - out.cached_before - out.computed, 0)
    return out


def _record(trainer, report: RunPassReport) -> dict[str, float]:
    """The report into the run's ``run.json`` (this launch's entry, rank 0) and returned."""
    from ifdistill.runs.rundir import RunDir

    out = report.to_dict()
    if trainer.is_global_zero:
        RunDir(trainer.default_root_dir).record_launch(teacher_pass=out)
    return out


def run_first_pass(module, trainer) -> dict[str, float]:
    """At train start (after a checkpoint's step is restored): the views of the examples the run reads
    from ``trainer.global_step`` to its last step, made present; logged at that step and recorded."""
    dm = trainer.datamodule
    order = dm.read_order(trainer.global_step, trainer.estimated_stepping_batches)
    stats = ensure_teacher_cache(module, [dm.built.train[i] for i in order], rank=trainer.global_rank,
                                 barrier=trainer.strategy.barrier)
    module.teacher_pass.first = _job_totals(trainer, module, stats, same_views=True)
    out = _record(trainer, module.teacher_pass)
    for lg in trainer.loggers:
        lg.log_metrics({f"teacher_cache/{k}": float(v) for k, v in out.items()}, step=trainer.global_step)
    return out


def extend_on_demand(module, views: Sequence[TeacherViewRef]) -> None:
    """Training reads views its first pass did not cover (a step limit raised, an epoch past the
    horizon): make them present now, shared with other jobs as the first pass is."""
    cache: TeacherCache = module.teacher_cache
    missing = set(cache.refresh().missing(v.key for v in views))
    if missing:
        module.teacher_pass.on_demand.add(fill_views(module, [v for v in views if v.key in missing],
                                                     label="teacher pass (on demand)"))


def run_pass_end(module, trainer) -> dict[str, float]:
    """At train end: the whole run's counts (on-demand views summed over the ranks) recorded."""
    module.teacher_pass.on_demand = _job_totals(trainer, module, module.teacher_pass.on_demand, same_views=False)
    return _record(trainer, module.teacher_pass)
