"""Training throughput: ifdistill SFT against TRL's SFTTrainer, and ICL distillation against SFT.

1. SFT tokens/s, ifdistill (Lightning + SFTModule + TrainDataModule) against TRL's ``SFTTrainer`` on
   the same tiny model, the same examples (the synthetic set rendered once by ``ifdistill.data`` and
   given to TRL pre-tokenised with its completion mask), the same batch (8 examples per step), the
   same completion-only loss, LoRA r=16 alpha=32, AdamW, float32, one process; with and without
   packing (rows of at most 512 tokens on both sides: on CPU, SDPA gets one dense block-diagonal mask
   per packed row, so attention cost grows with the square of the row length). TRL runs with ``gradient_checkpointing=False`` and ``bf16=False`` (its defaults turn both
   on), so both sides compute the same thing. Goal: ifdistill >= 1.3x TRL.
2. Distillation step time at k = 0, 2, 4 demonstrations (frozen-initial teacher = LoRA disabled)
   against the SFT step on the same student batches, with demonstrations per example (the data
   layer's rule, ``method.demos=per_example``) and shared per micro-batch (``method.demos=shared``, the
   default since per-example 4-shot stays near 3x: its teacher reads ~5x the student's tokens).
   Goal: 4-shot <= 2x SFT. With the teacher read from the cache (``method.teacher_source=cache``,
   ``distill_cached_*``: the teacher pass run before the timed steps, per-example and shared 4-shot
   views): goal <= 1.1x SFT; and the pass's teacher tokens/s (one view per forward, and 8 per forward)
   against the online teacher's on the same views.

Timing on a shared machine: other jobs make single timings swing by 4x, so the variants being compared
run interleaved step by step in one process (same batches, same moment), each ratio is taken inside
a repeat, and the median over repeats is reported. ``--full-loop`` additionally times whole training
loops (Lightning vs HF Trainer, one process each; noisier). Tokens are real (non-padding) tokens.

TRL is the ``bench`` extra (``make setup`` installs it); ``--trl-path`` adds a folder holding another copy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ifdistill.methods.distill.settings import DistillSettings
from ifdistill.train.method import TrainingInputs

ROOT = Path(__file__).resolve().parents[1]
MBS, LR, R, ALPHA = 8, 2e-4, 16, 32


CHUNK_ENV = "BENCH_LOGIT_CHUNK_SIZE"  # --logit-chunk-size, handed to the worker processes


def chunk_size():
    """``--logit-chunk-size`` if given, else the configured default (conf/train.yaml): the modules run as
    training runs them."""
    from omegaconf import OmegaConf

    if CHUNK_ENV in os.environ:
        value = os.environ[CHUNK_ENV]
        return None if value.lower() in ("none", "null", "0") else int(value)
    return OmegaConf.load(ROOT / "conf" / "train.yaml").get("logit_chunk_size")
ROW = 512  # packed row length (both sides): one dense attention mask per row, so rows stay short on CPU
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def data_cfg(n: int, k: int | None = None, demos: str = "shared"):
    """The resolved data config (``k=None``: SFT items; else ICL distillation with ``demos``)."""
    from ifdistill.data.build import DataConfig

    data = {"sources": [{"name": "syn", "synthetic": "train", "max_examples": n}], "heldout": 0, "max_length": 512}
    return DataConfig.resolve(data, icl=None if k is None else {"k": k, "demos": demos})


# -- workers (run in their own process) -------------------------------------------------------------
def _timer_result(times: list[float], tokens: list[int], warmup: int) -> dict:
    t, n = times[warmup:], tokens[warmup:]
    return {"steps": len(t), "tokens_per_s": sum(n) / sum(t), "step_s": statistics.median(t),
            "tokens_per_step": sum(n) / len(n)}


def worker_ifdistill(steps: int, warmup: int, n: int, packing: bool) -> dict:
    """ifdistill SFT through the real Lightning loop (Trainer + SFTModule + TrainDataModule)."""
    import lightning.pytorch as pl
    import torch

    from ifdistill.train.datamodule import TrainDataModule
    from ifdistill.methods.sft.module import SFTModule

    pl.seed_everything(0, verbose=False)
    model = {"name_or_path": "builtin:tiny"}
    module = SFTModule(TrainingInputs(model, {"method": "lora", "r": R, "alpha": ALPHA, "target_modules": TARGETS},
                                      {"lr": LR, "schedule": "constant"}, logit_chunk_size=chunk_size()))
    dm = TrainDataModule(data_cfg(n), model, micro_batch_size=MBS, packing=packing, max_row_tokens=ROW)
    times, tokens = [], []

    class Timer(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            self.t0 = time.perf_counter()
            mask = batch.get("attention_mask")
            self.n = int(mask.sum()) if mask is not None else int((batch["seq_idx"] >= 0).sum())

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            times.append(time.perf_counter() - self.t0)
            tokens.append(self.n)

    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=warmup + steps, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         use_distributed_sampler=False, num_sanity_val_steps=0, limit_val_batches=0,
                         gradient_clip_val=1.0, callbacks=[Timer()])
    trainer.fit(module, datamodule=dm)
    return {**_timer_result(times, tokens, warmup), "threads": torch.get_num_threads()}


def worker_sft_vs_trl(steps: int, warmup: int, n: int) -> dict:
    """ifdistill's and TRL's SFT training steps on the same 8 examples per step, interleaved.

    ifdistill: ``SFTModule.training_step`` (the production path: selective LM head, token-sum metrics)
    + AdamW. TRL: ``SFTTrainer.training_step`` (its fused LM head over completion tokens, entropy and
    accuracy metrics, accelerate's backward) + the trainer's own AdamW. Padded: the very same tensors
    go to both. Packed: ifdistill's rows of <= ROW tokens (position ids restart per example) against
    TRL's padding-free batch (one flattened row with position ids) of the same examples.
    ``ifdistill_packed_sdpa``: the packed rows with ``attn_implementation=packed_sdpa`` (the boundaries
    passed to the kernel: one causal SDPA call per example on CPU) instead of the dense mask of ``sdpa``.
    """
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM
    from trl import SFTConfig, SFTTrainer
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    from ifdistill.data.collate import PackCollator, PadCollator
    from ifdistill.models import resolve_model_path
    from ifdistill.train.datamodule import TrainDataModule
    from ifdistill.methods.sft.module import SFTModule

    model_cfg = {"name_or_path": "builtin:tiny"}
    dm = TrainDataModule(data_cfg(n), model_cfg, micro_batch_size=MBS)
    dm.setup("fit")
    ds, pad = dm.built.train, dm.tokenizer.pad_token_id
    order = list(ds.epoch_order(0))
    groups = [[ds[i] for i in order[j * MBS:(j + 1) * MBS]] for j in range(warmup + steps)]
    trl_collate = DataCollatorForLanguageModeling(pad_token_id=pad, padding_free=True)

    def trl_rows(items):
        return [{"input_ids": it["input_ids"].tolist(),
                 "labels": [int(t) if m else -100 for t, m in zip(it["input_ids"], it["loss_mask"])]} for it in items]

    padded = [PadCollator(pad)(g) for g in groups]
    batches = {
        "ifdistill_padded": padded,
        "trl_padded": [{k: b[k] for k in ("input_ids", "attention_mask", "labels")} for b in padded],
        "ifdistill_packed": [PackCollator(pad, max_row_tokens=ROW)(g) for g in groups],
        "ifdistill_packed_sdpa": [PackCollator(pad, max_row_tokens=ROW)(g) for g in groups],
        "trl_packed": [trl_collate(trl_rows(g)) for g in groups],
    }
    tokens = [int(b["attention_mask"].sum()) for b in padded]

    lora = {"method": "lora", "r": R, "alpha": ALPHA, "target_modules": TARGETS}
    torch.manual_seed(0)
    ours = SFTModule(TrainingInputs(model_cfg, lora, logit_chunk_size=chunk_size(), attn_implementation="sdpa"))
    ours_opt = torch.optim.AdamW([p for p in ours.parameters() if p.requires_grad], lr=LR)
    torch.manual_seed(0)
    varlen = SFTModule(TrainingInputs(model_cfg, lora, logit_chunk_size=chunk_size(),
                                      attn_implementation="packed_sdpa"))
    varlen_opt = torch.optim.AdamW([p for p in varlen.parameters() if p.requires_grad], lr=LR)
    path = resolve_model_path("builtin:tiny")
    args = SFTConfig(output_dir=os.environ.get("BENCH_TMP", "/tmp/bench-trl"), per_device_train_batch_size=MBS,
                     learning_rate=LR, lr_scheduler_type="constant", logging_steps=10**6, save_strategy="no",
                     report_to=[], bf16=False, fp16=False, gradient_checkpointing=False, packing=False,
                     completion_only_loss=True, use_cpu=True, seed=0, dataset_num_proc=None)
    trainer = SFTTrainer(model=AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa"),
                         args=args, train_dataset=Dataset.from_list(trl_rows(groups[0])), processing_class=dm.tokenizer,
                         peft_config=LoraConfig(r=R, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=TARGETS,
                                                task_type="CAUSAL_LM"))
    trainer.create_optimizer()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's own loop, which is not running

    def step_ours(b, i):
        ours.training_step(b, i).backward()
        ours_opt.step()
        ours_opt.zero_grad(set_to_none=True)

    def step_varlen(b, i):
        varlen.training_step(b, i).backward()
        varlen_opt.step()
        varlen_opt.zero_grad(set_to_none=True)

    def step_trl(b, i):
        trainer.training_step(trainer.model, dict(b))
        trainer.optimizer.step()
        trainer.optimizer.zero_grad(set_to_none=True)

    runners = {"ifdistill_padded": step_ours, "trl_padded": step_trl, "ifdistill_packed": step_ours,
               "trl_packed": step_trl, "ifdistill_packed_sdpa": step_varlen}
    ours.train()
    varlen.train()
    times: dict[str, list[float]] = {name: [] for name in runners}
    for i in range(warmup + steps):
        for name, run in runners.items():
            t0 = time.perf_counter()
            run(batches[name][i], i)
            times[name].append(time.perf_counter() - t0)
    tok = sum(tokens[warmup:]) / steps
    out = {name: {"step_s": statistics.median(t[warmup:]), "min_step_s": min(t[warmup:]),
                  "tokens_per_s": tok / statistics.median(t[warmup:])} for name, t in times.items()}
    return {"sft": out, "tokens_per_step": tok, "threads": torch.get_num_threads()}


def worker_distill(steps: int, warmup: int, n: int) -> dict:
    """SFT and distillation steps on the same student batches, interleaved in one process.

    One step = the module's objective, backward, AdamW step (what Lightning's training_step runs; the
    loop's own few milliseconds are the same for every variant and left out). Interleaving the
    variants step by step exposes them to the same background load; the median is reported.
    """
    import torch

    from ifdistill.train.datamodule import TrainDataModule
    from ifdistill.methods.distill.module import ICLDistillModule
    from ifdistill.methods.sft.module import SFTModule

    model, peft = {"name_or_path": "builtin:tiny"}, {"method": "lora", "r": R, "alpha": ALPHA, "target_modules": TARGETS}
    variants = {"sft": (None, "per_example"), "distill_k0": (0, "per_example"), "distill_k2": (2, "per_example"),
                "distill_k4": (4, "per_example"), "distill_shared_k2": (2, "shared"),
                "distill_shared_k4": (4, "shared"), "distill_cached_k4": (4, "per_example"),
                "distill_cached_shared_k4": (4, "shared")}
    batches, modules, optims = {}, {}, {}
    passes: dict[str, dict] = {}
    for name, (k, demos) in variants.items():
        dm = TrainDataModule(data_cfg(n, k, demos), model, micro_batch_size=MBS,
                             method=SFTModule if k is None else ICLDistillModule)
        dm.setup("fit")
        cached = "cached" in name
        batches[name] = cached_batches(dm, warmup + steps) if cached else _take(dm.train_dataloader(), warmup + steps)
        torch.manual_seed(0)
        inputs = TrainingInputs(model, peft, logit_chunk_size=chunk_size())
        cache = dict(teacher_source="cache", cache_dir=cache_root()) if cached else {}
        modules[name] = (SFTModule(inputs) if k is None
                         else ICLDistillModule(inputs, DistillSettings(kd_ratio=0.5, teacher="frozen_initial", **cache)))
        if cached:
            passes[name] = fill_cache(modules[name], batches[name])
        optims[name] = torch.optim.AdamW([p for p in modules[name].parameters() if p.requires_grad], lr=LR)
    times: dict[str, list[float]] = {name: [] for name in variants}
    teacher_tokens: dict[str, int] = {name: 0 for name in variants}
    for i in range(warmup + steps):
        for name in variants:
            b, m, opt = batches[name][i], modules[name], optims[name]
            t0 = time.perf_counter()
            loss, _ = m.objective(b)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            times[name].append(time.perf_counter() - t0)
            if i >= warmup:
                if "teacher_prefix_ids" in b:
                    teacher_tokens[name] += int(b["teacher_prefix_ids"].numel() + b["attention_mask"].sum())
                elif "teacher_attention_mask" in b:
                    teacher_tokens[name] += int(b["teacher_attention_mask"].sum())
    out = {name: {"step_s": statistics.median(t[warmup:]), "min_step_s": min(t[warmup:]),
                  "teacher_tokens_per_step": teacher_tokens[name] / steps} for name, t in times.items()}
    for name, stats in passes.items():
        out[name].update(stats)
    return {"distill": out, "threads": torch.get_num_threads()}


def _take(loader, count: int) -> list:
    it = iter(loader)
    return [next(it) for _ in range(count)]


def cache_root() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="bench-teacher-cache-", dir=os.environ.get("BENCH_TMP"))


def cached_batches(dm, count: int) -> list:
    """The student batches of ``dm`` in the per-example layout the cache is read by: as the loader
    makes them, or for shared demonstrations each row's view with its batch's shared draw."""
    from ifdistill.data.collate import IclCollator

    loader = dm.train_dataloader()
    if dm.data_cfg.icl.demos != "shared":
        return _take(loader, count)
    collate = dm.train_collator()
    out = []
    for idx in loader.batch_sampler:
        items = [loader.dataset[i] for i in idx]
        out.append(IclCollator(collate.icl_collate.student.pad_token_id)(collate.views(items)))
        if len(out) == count:
            return out
    return out


def fill_cache(module, batches: list) -> dict:
    """Run the teacher pass over the batches' views (one view per forward, and MBS per forward, each into
    its own cache) and time the online teacher on the same batches: teacher tokens/s of each."""
    import torch

    from ifdistill.methods.distill.teacher_cache import TeacherCache
    from ifdistill.methods.distill.teacher_pass import batch_views, run_teacher_pass

    views = list({v.key: v for b in batches for v in batch_views(b)}.values())
    tokens = sum(len(v.ids) for v in views)
    out = {}
    for size in (MBS, 1):  # the cache filled last (one view per forward) is the one training reads
        module.teacher_cache = TeacherCache(cache_root(), module.teacher_cache.namespace).open()
        t0 = time.perf_counter()
        run_teacher_pass(module.teacher_logits, views, module.teacher_cache, device=module.device,
                         chunk_size=chunk_size() or 1024, batch_size=size)
        out[f"pass_bs{size}_teacher_tokens_per_s"] = tokens / (time.perf_counter() - t0)
    t0, online_tokens = time.perf_counter(), 0
    for b in batches:
        rows, _, t_cols, _ = module.completion_index(b)
        with torch.no_grad():
            module.teacher_logits(b, rows, t_cols)
        online_tokens += int(b["teacher_attention_mask"].sum())
    out["online_teacher_tokens_per_s"] = online_tokens / (time.perf_counter() - t0)
    out["cache_bytes_per_token"] = module.teacher_cache.written_bytes / module.teacher_cache.written_tokens
    return out


def worker_trl(steps: int, warmup: int, n: int, packing: bool) -> dict:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from ifdistill.data.build import build_train_dataset
    from ifdistill.models import resolve_model_path

    path = resolve_model_path("builtin:tiny")
    tok = AutoTokenizer.from_pretrained(path)
    built = build_train_dataset(data_cfg(n), tok)
    rows = [{"input_ids": it["input_ids"].tolist(), "completion_mask": it["loss_mask"].astype(int).tolist()}
            for it in built.train.items]
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa")
    # Packed: rows of ROW tokens, 4 rows per step (about the tokens of 8 examples, ~1700-2000).
    args = SFTConfig(output_dir=os.environ.get("BENCH_TMP", "/tmp/bench-trl"),
                     per_device_train_batch_size=4 if packing else MBS,
                     max_steps=warmup + steps, learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0,
                     logging_steps=10**6, save_strategy="no", report_to=[], bf16=False, fp16=False,
                     gradient_checkpointing=False, packing=packing, max_length=ROW if packing else 512,
                     completion_only_loss=True,
                     dataloader_num_workers=0, use_cpu=True, seed=0, max_grad_norm=1.0, dataset_num_proc=None)
    peft = LoraConfig(r=R, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=TARGETS, task_type="CAUSAL_LM")
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tok,
                         peft_config=peft)
    times, tokens = [], []

    class Timer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            self.t0, self.n0 = time.perf_counter(), trainer._total_train_tokens

        def on_step_end(self, a, state, control, **kw):
            times.append(time.perf_counter() - self.t0)
            tokens.append(trainer._total_train_tokens - self.n0)

    trainer.add_callback(Timer())
    trainer.train()
    return {**_timer_result(times, tokens, warmup), "threads": torch.get_num_threads()}


# -- driver -----------------------------------------------------------------------------------------
def run_worker(spec: dict, trl_path: str | None, timeout: float) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in [str(ROOT), trl_path or ""] if p),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false", CUDA_VISIBLE_DEVICES="")
    out = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"worker {spec} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=20, help="timed optimizer steps per measurement")
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--examples", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--trl-path", default=os.environ.get("TRL_PATH", "/tmp/trl-site"),
                    help="a folder holding trl (pip install --target DIR --no-deps trl)")
    ap.add_argument("--only", choices=["sft", "distill"], default=None)
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--full-loop", action="store_true",
                    help="also time whole training loops (Lightning vs HF Trainer) in separate processes")
    ap.add_argument("--logit-chunk-size", default=None,
                    help="run the modules with this logit_chunk_size (none: unchunked) instead of conf/train.yaml's")
    args = ap.parse_args()
    if args.logit_chunk_size is not None:
        os.environ[CHUNK_ENV] = args.logit_chunk_size

    if args.worker:
        spec = json.loads(args.worker)
        kind = spec.pop("kind")
        worker = {"trl": worker_trl, "ifdistill": worker_ifdistill, "distill": worker_distill,
                  "sft_vs_trl": worker_sft_vs_trl}[kind]
        result = worker(**spec)
        print("RESULT " + json.dumps(result), flush=True)
        return

    common = {"steps": args.steps, "warmup": args.warmup, "n": args.examples}
    specs: dict[str, dict] = {}
    if args.only in (None, "sft"):
        specs["sft_vs_trl"] = {"kind": "sft_vs_trl", **common}
        if args.full_loop:  # whole training loops (Lightning vs HF Trainer), one process each
            for packing in (False, True):
                tag = "packed" if packing else "padded"
                specs[f"loop_ifdistill_{tag}"] = {"kind": "ifdistill", "packing": packing, **common}
                specs[f"loop_trl_{tag}"] = {"kind": "trl", "packing": packing, **common}
    if args.only in (None, "distill"):
        specs["distill"] = {"kind": "distill", **common}

    trl_ok = subprocess.run([sys.executable, "-c", "import trl"], env=dict(os.environ, PYTHONPATH=args.trl_path),
                            capture_output=True).returncode == 0
    if not trl_ok:
        print(f"TRL is not importable from {args.trl_path}: the TRL comparison is skipped "
              "(pip install 'ifdistill[bench]')")
        specs = {k: v for k, v in specs.items() if v["kind"] not in ("trl", "sft_vs_trl")}

    results: dict[str, list[dict]] = {name: [] for name in specs}
    for rep in range(args.repeats):
        for name, spec in specs.items():
            t0 = time.time()
            r = run_worker(dict(spec), args.trl_path if trl_ok else None, timeout=1800)
            results[name].append(r)
            if args.json:  # what has been measured survives an interrupted bench
                Path(args.json).write_text(json.dumps({"runs": results, "complete": False}, indent=2))
            if name in ("distill", "sft_vs_trl"):
                part = r["distill" if name == "distill" else "sft"]
                line = "  ".join(f"{v}: {d['step_s']:.3f} s" for v, d in part.items())
                print(f"[{rep + 1}/{args.repeats}] {name}  {line} ({time.time() - t0:.0f} s wall)", flush=True)
            else:
                print(f"[{rep + 1}/{args.repeats}] {name:22s} {r['tokens_per_s']:8.0f} tok/s  median step "
                      f"{r['step_s']:.3f} s ({r['tokens_per_step']:.0f} tok/step, {time.time() - t0:.0f} s wall)",
                      flush=True)

    summary: dict[str, dict] = {}
    per_repeat: dict[str, list[float]] = {}  # ratios inside each interleaved repeat, then their median
    for name, rs in results.items():
        if name in ("distill", "sft_vs_trl"):
            part = "distill" if name == "distill" else "sft"
            for variant in rs[0][part]:
                summary[variant] = {key: statistics.median(r[part][variant][key] for r in rs)
                                    for key in rs[0][part][variant]}
            if name == "sft_vs_trl":
                for tag in ("padded", "packed"):
                    per_repeat[f"sft_{tag}_vs_trl (tokens/s)"] = [
                        r["sft"][f"trl_{tag}"]["step_s"] / r["sft"][f"ifdistill_{tag}"]["step_s"] for r in rs]
                per_repeat["sft_packed_sdpa_vs_trl_packed (tokens/s)"] = [
                    r["sft"]["trl_packed"]["step_s"] / r["sft"]["ifdistill_packed_sdpa"]["step_s"] for r in rs]
            else:
                for variant in rs[0]["distill"]:
                    if variant != "sft":
                        per_repeat[f"{variant}_step_vs_sft"] = [
                            r["distill"][variant]["step_s"] / r["distill"]["sft"]["step_s"] for r in rs]
                    for size in (1, MBS):
                        if f"pass_bs{size}_teacher_tokens_per_s" in rs[0]["distill"][variant]:
                            per_repeat[f"{variant}_pass_bs{size}_vs_online_teacher (tokens/s)"] = [
                                r["distill"][variant][f"pass_bs{size}_teacher_tokens_per_s"]
                                / r["distill"][variant]["online_teacher_tokens_per_s"] for r in rs]
        else:
            summary[name] = {"tokens_per_s": statistics.median(r["tokens_per_s"] for r in rs),
                             "step_s": statistics.median(r["step_s"] for r in rs)}
    print("\n== medians over repeats")
    for name, m in summary.items():
        print(f"{name:24s} " + "  ".join(f"{k} {v:.3f}" if v < 100 else f"{k} {v:.0f}" for k, v in m.items()))
    ratios = {name: statistics.median(v) for name, v in per_repeat.items()}
    for tag in ("padded", "packed"):
        a, b = summary.get(f"loop_ifdistill_{tag}"), summary.get(f"loop_trl_{tag}")
        if a and b:
            ratios[f"loop_sft_{tag}_vs_trl (tokens/s)"] = a["tokens_per_s"] / b["tokens_per_s"]
    print("\n== ratios (goals: SFT vs TRL >= 1.3; 4-shot distill step vs SFT <= 2.0; cached distill step vs SFT "
          f"<= 1.1); logit_chunk_size {chunk_size()}")
    for name, value in ratios.items():
        print(f"{name:34s} {value:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": results, "summary": summary, "ratios": ratios}, indent=2))


if __name__ == "__main__":
    main()
