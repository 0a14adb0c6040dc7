"""End to end: a small replay sweep of ICL distillation with the cached teacher against the online teacher.

A 2 x 2 sweep (``data.ratio`` 0.25 / 0.5 x ``seed`` 1 / 2) of 4-shot per-example distillation on the tiny
model (synthetic data + synthetic chat replay, LoRA), each run through :func:`ifdistill.train.run.train`
as ``ifdistill-train`` runs it, twice over: ``method.teacher_source=online`` and ``=cache`` with one cache
folder for the sweep, so each cached run's wall time includes its teacher pass (the first run computes
the views it reads, the later ones only those no earlier run computed). Reported per variant: the
sweep's wall time (model and data building included), the time in the pass, the teacher views computed
and found, and the cached / online ratio.

The machine is shared: the variants alternate run by run (online, cached, online, ...) so that a change
of load hits both; one run of the bench is one sample.

    python bench/bench_teacher_cache_sweep.py [--steps 30] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SWEEP = [(ratio, seed) for ratio in (0.25, 0.5) for seed in (1, 2)]


def config(out: Path, source: str, ratio: float, seed: int, steps: int):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import ifdistill.conf  # noqa: F401  (the resolvers and section schemas the YAML under conf/ uses)

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose("train", overrides=[
            "model=tiny", "data=synthetic_replay", "method=distill", "method.k=4", "method.demos=per_example",
            f"method.teacher_source={source}", f"method.cache_dir={out}/cache", "peft=lora", "trainer=cpu",
            "logger=none", "+data.sources.0.max_examples=160", "+data.replay.0.max_examples=160", "data.heldout=0",
            "data.total=192", f"data.ratio={ratio}", f"seed={seed}", "data.max_length=512",
            "datamodule.micro_batch_size=4", f"trainer.max_steps={steps}", "trainer.log_every_n_steps=10",
            "run.eval_every_n_steps=100000", f"run.checkpoint_every_n_steps={steps}", "run.validate_at_start=false",
            f"paths.output_root={out}/{source}", f"paths.output_dir={out}/hydra"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--out", default=None, help="working folder (default: a new temp folder)")
    args = ap.parse_args()
    import torch

    from ifdistill.train.config_edge import train_config

    from ifdistill.train.run import train

    torch.set_num_threads(1)  # a 2-core machine shared with other jobs: one thread contends least
    out = Path(args.out or tempfile.mkdtemp(prefix="bench-cache-sweep-"))
    rows = {"online": [], "cache": []}
    for ratio, seed in SWEEP:
        for source in ("online", "cache"):
            t0 = time.perf_counter()
            result = train(train_config(config(out, source, ratio, seed, args.steps)))
            rows[source].append({"ratio": ratio, "seed": seed, "wall_s": time.perf_counter() - t0,
                                 "teacher_pass": result.get("teacher_pass")})
    online, cached = (sum(r["wall_s"] for r in rows[s]) for s in ("online", "cache"))
    passes = [r["teacher_pass"] for r in rows["cache"]]
    summary = {"steps_per_run": args.steps, "online_sweep_s": online, "cached_sweep_s": cached,
               "cached_over_online": cached / online, "pass_s": sum(p["pass_seconds"] for p in passes),
               "views_computed": sum(p["computed_views"] for p in passes),
               "views_found": sum(p["cached_before"] for p in passes),
               "views_read": sum(p["views"] for p in passes)}
    print(json.dumps({"runs": rows, "summary": summary}, indent=1))
    print(f"\n| 2 x 2 sweep, {args.steps} steps per run | wall time (s) | in the teacher pass (s) | views computed / "
          "found in the cache |\n|---|---|---|---|")
    print(f"| online teacher | {online:.0f} | - | - |")
    print(f"| cached teacher (pass included) | {cached:.0f} ({cached / online:.2f}x) | {summary['pass_s']:.0f} | "
          f"{summary['views_computed']} / {summary['views_found']} |")
    for r in rows["cache"]:
        p = r["teacher_pass"]
        print(f"|   ratio {r['ratio']}, seed {r['seed']} | {r['wall_s']:.0f} | {p['pass_seconds']:.1f} "
              f"({100 * p['pass_share']:.0f}% of the run) | {p['computed_views']} / {p['cached_before']} |")


if __name__ == "__main__":
    main()
