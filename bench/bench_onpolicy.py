"""On-policy ICL distillation's step time against an SFT step and an off-policy distillation step.

Three modules on the tiny model (LoRA r=16, float32, one process) train on the same examples: SFT on
the gold completions, off-policy ICL distillation (2 demonstrations per example, frozen-initial
teacher, forward KL) and on-policy ICL distillation with HF generation (``lmbda=1``: every example on
the student's sample; reverse KL; ``--max-new-tokens``). A step is ``training_step`` + backward of one
micro-batch of ``--batch`` examples. The variants run interleaved step by step (same batch, same
moment: other jobs on a shared machine make single timings swing by several x); each ratio is taken
inside a repeat and the median over repeats is reported, with the share of the on-policy step spent
generating (timed around the sampler inside the same steps).

The on-policy step runs twice per repeat: with HF generation and with the colocated vLLM engine
(``engine=vllm``, vLLM-CPU here; ``--no-vllm`` leaves it out), whose adapter is pushed before every
step's samples as at ``sync_every=1`` (the push is counted as generating).

    .venv/bin/python bench/bench_onpolicy.py [--repeats 5] [--batch 4] [--max-new-tokens 32] [--no-vllm]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from ifdistill.methods.distill.settings import DistillSettings
from ifdistill.methods.onpolicy_distill.settings import OnPolicyDistillSettings
from ifdistill.train.method import TrainingInputs

TINY = {"name_or_path": "builtin:tiny"}
LORA = {"method": "lora", "r": 16, "alpha": 32, "dropout": 0.0}


def batches(n: int, batch: int):
    from transformers import AutoTokenizer

    from ifdistill.data.build import DataConfig, build_train_dataset
    from ifdistill.data.collate import IclCollator, PadCollator
    from ifdistill.models import resolve_model_path

    tok = AutoTokenizer.from_pretrained(resolve_model_path(TINY["name_or_path"]))
    data = DataConfig.resolve({"sources": [{"name": "syn", "synthetic": "train", "max_examples": n}],
                               "heldout": 0, "max_length": 384}, icl={"k": 2, "demos": "per_example"}, model=TINY)
    items = build_train_dataset(data, tok).train.items
    groups = [items[i:i + batch] for i in range(0, len(items) - batch + 1, batch)]
    return [(PadCollator(tok.pad_token_id)(g), IclCollator(tok.pad_token_id)(g)) for g in groups]


class TimedSampler:
    """The module's sampler, with the seconds it spends accumulated (an engine's weight push included)."""

    def __init__(self, inner):
        self.inner, self.seconds = inner, 0.0

    def __call__(self, prompts, **kw):
        t0 = time.perf_counter()
        try:
            if hasattr(self.inner, "sync"):  # no trainer steps here: push as sync_every=1 does each step
                self.inner.sync()
            return self.inner(prompts, **kw)
        finally:
            self.seconds += time.perf_counter() - t0


def step(module, batch) -> float:
    t0 = time.perf_counter()
    module.training_step(batch, 0).backward()
    module.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def main() -> None:
    from ifdistill.methods.onpolicy_distill.module import OnPolicyDistillModule
    from ifdistill.methods.distill.module import ICLDistillModule
    from ifdistill.methods.sft.module import SFTModule

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-vllm", action="store_true", help="leave out the on-policy step with the vLLM engine")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    data = batches(args.batch * (args.repeats + 2) * 2, args.batch)
    torch.manual_seed(0)
    sft = SFTModule(TrainingInputs(TINY, LORA))
    off = ICLDistillModule(TrainingInputs(TINY, LORA), DistillSettings(kd_ratio=0.5))
    gen = {"max_new_tokens": args.max_new_tokens}
    onpolicy = {"hf": OnPolicyDistillModule(TrainingInputs(TINY, LORA),
                                            OnPolicyDistillSettings(lmbda=1.0, kl="reverse", generation=gen))}
    if not args.no_vllm:
        onpolicy["vllm"] = OnPolicyDistillModule(TrainingInputs(TINY, LORA),
                                                 OnPolicyDistillSettings(lmbda=1.0, kl="reverse", generation=gen,
                                                                         engine="vllm"))
    for m in (off, *onpolicy.values()):
        m.lm.load_state_dict(sft.lm.state_dict())
    for m in onpolicy.values():
        m.sampler = TimedSampler(m.sampler)
    step(sft, data[0][0]), step(off, data[0][1])  # warm-up: first-call costs (the engine's start)
    for m in onpolicy.values():
        step(m, data[0][1])
    rows = []
    for sft_batch, icl_batch in data[1:args.repeats + 1]:
        t_sft, t_off = step(sft, sft_batch), step(off, icl_batch)
        row = {"sft_s": t_sft, "offpolicy_s": t_off}
        for name, m in onpolicy.items():
            m.sampler.seconds = 0.0
            t_on = step(m, icl_batch)
            row.update({f"onpolicy_{name}_s": t_on, f"onpolicy_{name}_vs_sft": t_on / t_sft,
                        f"onpolicy_{name}_vs_offpolicy": t_on / t_off,
                        f"onpolicy_{name}_generation_share": m.sampler.seconds / t_on})
        rows.append(row)
    for m in onpolicy.values():
        if hasattr(m.sampler.inner, "close"):
            m.sampler.inner.close()
    summary = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(json.dumps({"bench": "onpolicy", "batch": args.batch,
                      "max_new_tokens": args.max_new_tokens, "repeats": len(rows),
                      **{k: round(v, 4) for k, v in summary.items()}}))


if __name__ == "__main__":
    main()
