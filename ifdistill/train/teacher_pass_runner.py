"""Where the teacher pass runs: in process at fit start (sliced across DDP ranks), or as its own command.

``method.teacher_source=cache`` (``conf/method/distill.yaml``) makes a distillation run read its teacher
from the :class:`~ifdistill.train.teacher_cache.TeacherCache` under ``method.cache_dir``. At fit start
(:func:`ensure_teacher_cache`) every rank lists the teacher views of the training items, finds those the
cache lacks, computes its slice of them (``missing[rank::world]``), waits for the others and re-reads
the manifest; a run whose views are all cached computes nothing. The pass can also run before training,
anywhere, as its own command (:func:`teacher_pass_only`), one shard of the missing views per task::

    ifdistill-train experiment=... method=distill method.teacher_source=cache +teacher_pass.only=true
    ifdistill-train ... +teacher_pass.only=true +teacher_pass.shard=$SLURM_ARRAY_TASK_ID +teacher_pass.num_shards=8

Which schemes can share a cache: a teacher view must be a function of the example alone. Per-example
demonstrations are (the draw is keyed by the example and ``data.icl_seed``, from the pool of all new
examples: :mod:`ifdistill.data.build`), and so are 0-shot views (``k = 0``, replay examples). Shared
demonstrations are not (a batch shares one draw, so a view depends on the batch, the data order and
the replay ratio): :func:`cache_refusal` refuses them, as it refuses a teacher that moves
(``self_stopgrad``) and divergences other than the forward KL.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from ifdistill.hashing import weight_hashes
from ifdistill.models import resolve_model_path

if TYPE_CHECKING:  # torch is imported by the functions that need it: preflight reads cache_refusal alone
    from ifdistill.train.teacher_cache import CacheNamespace, TeacherCache

log = logging.getLogger(__name__)

TEACHER_SOURCES = ("online", "cache")


def cache_refusal(method: Mapping[str, Any]) -> Optional[str]:
    """Why the ``method`` section cannot read a teacher cache (``None``: it can, or it does not ask to)."""
    if method.get("teacher_source", "online") != "cache":
        return None
    if int(method.get("k", 0) or 0) > 0 and method.get("demos") == "shared":
        return ("method.teacher_source=cache needs method.demos=per_example: shared demonstrations make a "
                "teacher view depend on its batch, so no cached view would serve another run")
    if method.get("teacher", "frozen_initial") == "self_stopgrad":
        return "method.teacher_source=cache needs a frozen teacher (frozen_initial or separate), not self_stopgrad"
    if method.get("kl", "forward") != "forward" or method.get("topk"):
        return "method.teacher_source=cache computes the forward KL on the cached support: set kl=forward, topk=null"
    return None


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
    from ifdistill.train.teacher_cache import CacheNamespace

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


def _compute_part(module, items: Sequence[Mapping[str, Any]], part: int, parts: int, progress=None) -> dict[str, float]:
    """Compute the missing views whose key falls in ``part`` of ``parts`` (a partition by key, so tasks
    that start at different times, seeing different caches, still split the views without overlap)."""
    from ifdistill.train.teacher_pass import PassStats, item_views, run_teacher_pass

    cache: TeacherCache = module.teacher_cache
    views = {v.key: v for v in item_views(items)}
    missing = cache.missing(views)
    mine = [views[k] for k in missing if int(k[:12], 16) % parts == part]
    stats = PassStats()
    if mine:
        log.info("teacher pass: %d of %d teacher views missing from %s; part %d/%d computes %d",
                 len(missing), len(views), cache.dir, part, parts, len(mine))
        stats = run_teacher_pass(module.teacher_logits, mine, cache, device=module.device,
                                 chunk_size=module.logit_chunk_size or 1024, batch_size=module.cache_batch_size,
                                 progress=progress or progress_lines(f"teacher pass {part + 1}/{parts}"))
    return {"views": len(views), "cached_before": len(views) - len(missing), **stats.to_dict()}


def ensure_teacher_cache(module, items: Sequence[Mapping[str, Any]], *, rank: int = 0, world: int = 1,
                         barrier: Callable[[], None] = lambda: None, progress=None) -> dict[str, float]:
    """Fill ``module``'s cache with the teacher views of ``items`` (this rank computes its part), wait for
    the other ranks, and check that every view is there; returns the stats to log."""
    from ifdistill.train.teacher_pass import item_views

    cache: TeacherCache = module.teacher_cache
    if rank == 0:
        cache.open()
    barrier()
    cache.open()
    out = _compute_part(module, items, rank, world, progress)
    barrier()
    cache.refresh()
    left = cache.missing(v.key for v in item_views(items))
    if left:
        raise RuntimeError(f"teacher cache {cache.dir} still lacks {len(left)} views after the pass")
    module.teacher_pass_stats = out
    return out


def teacher_pass_only(node: Mapping[str, Any], dm, module, *, gpu: bool) -> dict[str, Any]:
    """``+teacher_pass.only=true`` (``node`` is the ``teacher_pass`` section): with the built data and
    teacher, compute part ``shard`` of ``num_shards`` of the missing views, and stop (no run directory,
    no training; :func:`ifdistill.train.run.train` builds ``dm`` and ``module`` as for a run)."""
    shard, num = int(node.get("shard", 0)), int(node.get("num_shards", 1))
    if not 0 <= shard < num:
        raise ValueError(f"teacher_pass.shard={shard} must be in [0, teacher_pass.num_shards={num})")
    if getattr(module, "teacher_source", "online") != "cache":
        raise ValueError("+teacher_pass.only=true needs method=distill with method.teacher_source=cache")
    if gpu:
        module.to("cuda")
    module.on_fit_start_teacher()
    module.teacher_cache.open()
    stats = _compute_part(module, dm.built.train.items, shard, num)
    log.info("teacher pass: %s", stats)
    return {"teacher_pass": stats, "cache_dir": str(module.teacher_cache.dir)}
