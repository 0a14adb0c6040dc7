"""How far the cached teacher (top-k + tail bucket) is from the online one, at Qwen3's vocabulary.

For k = 16, 64, 256 (and any given with ``--k``) on ``tiny_qwen3`` (the real 151,936-token vocabulary):

- the mean teacher probability mass in its top-k at the supervised positions;
- the relative difference between the cached and the online distillation objective
  (``|L_cached - L_online| / L_online``, pure divergence: ``kd_ratio = 1``);
- the cosine between the cached and the online gradients (all student parameters, full fine-tuning).

The teacher must be peaked for the table to say anything: a random-init model spreads its mass almost
uniformly over 151,936 tokens, so every top-k would hold ~k/V of it. The script therefore first trains
tiny_qwen3 with SFT on the synthetic data (``--train-steps``, full fine-tuning, AdamW) and saves it; that
trained model is then both the frozen teacher (reading 2 per-example demonstrations) and the student's
starting point (reading none), as in ``method.teacher=frozen_initial``. The cached side runs the real
path: the teacher pass into a :class:`~ifdistill.methods.distill.teacher_cache.TeacherCache` (float16
log-probabilities, uint32 ids), then ``method.teacher_source=cache``.

    python bench/bench_teacher_cache.py [--train-steps 40] [--batches 4]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from pathlib import Path

import torch

from ifdistill.methods.distill.settings import DistillSettings
from ifdistill.train.method import TrainingInputs

MBS = 4


def data_cfg(model_dir: str, n: int, k: int | None):
    from ifdistill.data.build import DataConfig

    data = {"sources": [{"name": "syn", "synthetic": "train", "max_examples": n}], "heldout": 0, "max_length": 512}
    return DataConfig.resolve(data, icl=None if k is None else {"k": k, "demos": "per_example"},
                              model={"name_or_path": model_dir})


def train_teacher(out: Path, steps: int, n: int) -> tuple[str, float, float]:
    """SFT of tiny_qwen3 for ``steps`` steps; returns its folder and the mean entropy (nats) of its
    next-token distribution on the supervised tokens before and after."""
    from ifdistill.models import resolve_model_path
    from ifdistill.train.datamodule import TrainDataModule
    from ifdistill.methods.sft.module import SFTModule

    model = {"name_or_path": "builtin:tiny_qwen3"}
    dm = TrainDataModule(data_cfg(resolve_model_path(model["name_or_path"]), n, None), model, micro_batch_size=MBS)
    dm.setup("fit")
    torch.manual_seed(0)
    module = SFTModule(TrainingInputs(model, None, {"lr": 3e-3}, logit_chunk_size=256))
    opt = torch.optim.AdamW(module.parameters(), lr=3e-3)
    entropies = []
    module.train()
    for i, batch in zip(range(steps), iter(dm.train_dataloader())):
        loss, stats = module.objective(batch)
        (loss / stats["count"]).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        entropies.append(stats["entropy"].item() / stats["count"].item())
        if i % 10 == 0:
            print(f"  teacher SFT step {i:3d}: ce {stats['nll'].item() / stats['count'].item():.2f} "
                  f"entropy {entropies[-1]:.2f}", flush=True)
    module.model.save_pretrained(out)
    dm.tokenizer.save_pretrained(out)
    return str(out), entropies[0], statistics.mean(entropies[-5:])


def _grad_vector(module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in module.lm.parameters() if p.grad is not None])


def compare(model_dir: str, ks: list[int], n: int, batches: int) -> list[dict]:
    from ifdistill.train.datamodule import TrainDataModule
    from ifdistill.methods.distill.module import ICLDistillModule
    from ifdistill.methods.distill.teacher_pass import batch_views, run_teacher_pass

    model = {"name_or_path": model_dir}
    dm = TrainDataModule(data_cfg(model_dir, n, 2), model, micro_batch_size=MBS)
    dm.setup("fit")
    it = iter(dm.train_dataloader())
    data = [next(it) for _ in range(batches)]

    def objective(module) -> tuple[float, torch.Tensor, float]:
        module.zero_grad(set_to_none=True)
        total, mass, count = 0.0, 0.0, 0.0
        for b in data:
            loss, stats = module.objective(b)
            loss.backward()
            total += loss.item()
            mass += stats.get("teacher_mass", torch.tensor(0.0)).item()
            count += stats["count"].item()
        return total / count, _grad_vector(module), mass / count

    online = ICLDistillModule(TrainingInputs(model, None, logit_chunk_size=256), DistillSettings(kd_ratio=1.0))
    lo, go, _ = objective(online)
    rows = []
    for k in ks:
        cache = tempfile.mkdtemp(prefix=f"bench-cache-k{k}-")
        cached = ICLDistillModule(TrainingInputs(model, None, logit_chunk_size=256),
                                  DistillSettings(kd_ratio=1.0, teacher_source="cache", cache_dir=cache, cache_k=k))
        views = list({v.key: v for b in data for v in batch_views(b)}.values())
        t0 = time.perf_counter()
        stats = run_teacher_pass(cached.teacher_logits, views, cached.teacher_cache.open(), device=cached.device,
                                 chunk_size=256).to_dict()
        lc, gc, mass = objective(cached)
        rows.append({"k": k, "topk_mass": mass, "loss_online": lo, "loss_cached": lc,
                     "loss_rel_diff": abs(lc - lo) / abs(lo),
                     "grad_cosine": torch.nn.functional.cosine_similarity(gc, go, dim=0).item(),
                     "bytes_per_token": stats["bytes_per_token"], "pass_s": time.perf_counter() - t0})
        print(f"  k={k}: {rows[-1]}", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--k", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--train-steps", type=int, default=40)
    ap.add_argument("--examples", type=int, default=200)
    ap.add_argument("--batches", type=int, default=4, help="micro-batches of 4 the objectives are compared on")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    with tempfile.TemporaryDirectory(prefix="bench-teacher-") as tmp:
        print(f"training tiny_qwen3 for {args.train_steps} SFT steps (a peaked teacher)", flush=True)
        model_dir, h0, h1 = train_teacher(Path(tmp) / "teacher", args.train_steps, args.examples)
        print(f"teacher entropy on supervised tokens: {h0:.2f} nats before, {h1:.2f} after "
              f"(uniform over V: {math.log(151936):.2f})", flush=True)
        rows = compare(model_dir, args.k, args.examples, args.batches)
    print("\n| k | mean top-k mass | cached vs online loss (rel. diff) | gradient cosine | bytes/token |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['k']} | {r['topk_mass']:.4f} | {r['loss_rel_diff']:.2e} | {r['grad_cosine']:.5f} | "
              f"{r['bytes_per_token']:.0f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"entropy_before": h0, "entropy_after": h1, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
