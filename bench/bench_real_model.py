"""The real model (SmolLM2-135M-Instruct, ``model=smollm2_135m``): ifdistill's evaluator against vLLM's own
``LLM.generate``, and ifdistill's SFT training step against a bare HF + PEFT loop, each in the same run.

    .venv/bin/python bench/bench_real_model.py [--prompts 48] [--max-new-tokens 128] [--steps 6] [--only gen|train]

1. Generation: ``evaluate()`` (the production path: prepare, the vLLM backend, generate, score) on the
   first ``--prompts`` IFEval prompts, greedy; its tokens/s is results.json's ``counts.generated_tokens``
   over ``timings.generate_s`` (the backend's ``generate`` call). Then, in the same process, vLLM's ``LLM``
   built with the very engine settings results.json records (``backend.settings``: dtype, context, KV
   cache, prefix caching, eager mode) generates for the same token-id prompts with the same sampling
   parameters (greedy, the same per-prompt token budgets), its ``generate`` call timed alike. Ratio
   ifdistill / vLLM; goal >= 0.9. The two runs' responses are compared (the same engine settings and
   prompts: they should be identical).
2. Training: ``SFTModule.training_step`` (ifdistill's production step: LoRA r=16 alpha=32 on every
   linear layer, float32, completion-only loss) + AdamW against a bare loop of the same model wrapped by
   PEFT (``model(input_ids, attention_mask, labels).loss``) + AdamW, on the very same padded batches of
   the synthetic data (4 examples per step), interleaved step by step so both see the same machine load;
   the median step over ``--steps`` after 2 warm-up steps. Ratio ifdistill / bare; goal >= 1.0.

The machine may be shared: compare the rows of one run, not runs. Measured on the 2-core machine, nearly
idle (load average 1.2-1.7), defaults but ``--prompts 40 --max-new-tokens 192``: generation 0.89x and 0.96x
in two runs (ifdistill 192 and 230 tokens/s, vLLM 215 and 239; 40/40 responses identical, the same 5,496
generated tokens); training 1.14x in two runs (ifdistill 258 tokens/s, HF + PEFT 226; 530 tokens a step,
2 threads).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ifdistill.train.method import TrainingInputs

MBS, LR, R, ALPHA = 4, 2e-4, 16, 32
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
MODEL = "builtin:smollm2_135m"


def bench_generation(prompts: int, max_new_tokens: int, workdir: Path) -> dict:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from ifdistill.evaluator.cli import load_config
    from ifdistill.evaluator.output import read_results
    from ifdistill.evaluator.run import evaluate, prepare

    overrides = ["model=smollm2_135m", "eval=ifeval_local", f"eval.data.max_examples={prompts}",
                 f"eval.generation.max_new_tokens={max_new_tokens}", "eval.runtime.progress=false"]
    out = workdir / "ours"
    evaluate(load_config(overrides, output_dir=str(out)))
    results, samples = read_results(out)
    plan = prepare(load_config(overrides, output_dir=str(workdir / "plan")))
    ours_s = results["timings"]["generate_s"]
    ours_tokens = results["counts"]["generated_tokens"]  # the engine's generated ids, as vLLM's below

    settings = {k: v for k, v in results["backend"]["settings"].items() if k != "engine_in_process"}
    llm = LLM(model=plan.source.model_dir, tokenizer=plan.source.tokenizer_dir, **settings)
    params = [SamplingParams(temperature=0.0, max_tokens=r.max_tokens, stop_token_ids=list(plan.sampling.stop_token_ids))
              for r in plan.requests]
    t0 = time.perf_counter()
    outs = llm.generate([TokensPrompt(prompt_token_ids=list(r.token_ids)) for r in plan.requests], params,
                        use_tqdm=False)
    theirs_s = time.perf_counter() - t0
    theirs_tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    same = sum(plan.tokenizer.decode(o.outputs[0].token_ids, skip_special_tokens=True).strip() == s["response"].strip()
               for o, s in zip(outs, samples))
    ours_tps, theirs_tps = ours_tokens / ours_s, theirs_tokens / theirs_s
    return {"prompts": prompts, "max_new_tokens": max_new_tokens, "kv_cache_memory_bytes": settings.get("kv_cache_memory_bytes"),
            "ifdistill": {"generate_s": round(ours_s, 2), "tokens": ours_tokens, "tokens_per_s": round(ours_tps, 1)},
            "vllm_llm_generate": {"generate_s": round(theirs_s, 2), "tokens": theirs_tokens,
                                  "tokens_per_s": round(theirs_tps, 1)},
            "ratio": round(ours_tps / theirs_tps, 3), "identical_responses": f"{same}/{len(outs)}"}


def bench_training(steps: int, warmup: int = 2) -> dict:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from ifdistill.data.build import DataConfig
    from ifdistill.data.collate import PadCollator
    from ifdistill.methods.sft.module import SFTModule
    from ifdistill.models import resolve_model_path
    from ifdistill.train.datamodule import TrainDataModule

    model_cfg = {"name_or_path": MODEL}
    data = DataConfig.resolve({"sources": [{"name": "syn", "synthetic": "train", "max_examples": 200}], "heldout": 0,
                               "max_length": 512}, icl=None)
    dm = TrainDataModule(data, model_cfg, micro_batch_size=MBS)
    dm.setup("fit")
    ds, pad = dm.built.train, dm.tokenizer.pad_token_id
    order = list(ds.epoch_order(0))
    batches = [PadCollator(pad)([ds[i] for i in order[j * MBS:(j + 1) * MBS]]) for j in range(warmup + steps)]
    tokens = [int(b["attention_mask"].sum()) for b in batches]

    torch.manual_seed(0)
    ours = SFTModule(TrainingInputs(model_cfg, {"method": "lora", "r": R, "alpha": ALPHA, "target_modules": TARGETS},
                                    attn_implementation="sdpa"))
    ours_opt = torch.optim.AdamW([p for p in ours.parameters() if p.requires_grad], lr=LR)
    torch.manual_seed(0)
    bare = get_peft_model(AutoModelForCausalLM.from_pretrained(resolve_model_path(MODEL), dtype=torch.float32,
                                                               attn_implementation="sdpa"),
                          LoraConfig(r=R, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=TARGETS, task_type="CAUSAL_LM"))
    bare_opt = torch.optim.AdamW([p for p in bare.parameters() if p.requires_grad], lr=LR)
    ours.train()
    bare.train()

    def step_ours(b, i):
        ours.training_step(b, i).backward()
        ours_opt.step()
        ours_opt.zero_grad(set_to_none=True)

    def step_bare(b, i):
        bare(input_ids=b["input_ids"], attention_mask=b["attention_mask"], labels=b["labels"]).loss.backward()
        bare_opt.step()
        bare_opt.zero_grad(set_to_none=True)

    times: dict[str, list[float]] = {"ifdistill": [], "hf_peft": []}
    for i, b in enumerate(batches):
        for name, run in (("ifdistill", step_ours), ("hf_peft", step_bare)):
            t0 = time.perf_counter()
            run(b, i)
            times[name].append(time.perf_counter() - t0)
    tok = sum(tokens[warmup:]) / steps
    out = {name: {"step_s": round(statistics.median(t[warmup:]), 3),
                  "tokens_per_s": round(tok / statistics.median(t[warmup:]), 1)} for name, t in times.items()}
    return {"tokens_per_step": tok, "threads": torch.get_num_threads(), **out,
            "ratio": round(out["ifdistill"]["tokens_per_s"] / out["hf_peft"]["tokens_per_s"], 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=48)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--steps", type=int, default=6, help="timed training steps (after 2 warm-up steps)")
    ap.add_argument("--only", choices=["gen", "train"])
    args = ap.parse_args()
    report = {}
    if args.only in (None, "train"):
        report["training"] = bench_training(args.steps)
        print(json.dumps({"training": report["training"]}), flush=True)
    if args.only in (None, "gen"):
        with tempfile.TemporaryDirectory(prefix="bench-real-") as tmp:
            report["generation"] = bench_generation(args.prompts, args.max_new_tokens, Path(tmp))
        print(json.dumps({"generation": report["generation"]}), flush=True)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    sys.exit(main())
