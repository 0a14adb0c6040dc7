"""CI's run of the GPU kit: ``scripts/gpu_check.py --cpu-smoke`` as a user starts it, and its JSON.

The smoke runs the benchmark's very functions on tiny shapes on CPU and ``pytest -m gpu`` (collected and,
without CUDA, skipped with the reason), so the kit cannot rot while no GPU is lent. The checks are about
the report's consistency -- every field present, every number finite, the counts adding up, each derived
value equal to what it is derived from -- not about speed.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
OTHER_MEASUREMENTS = {"distill_k4_shared_vs_sft_lora_padded", "generate_hf_ifeval"}


def _finite_positive(row: dict, *keys: str) -> None:
    for k in keys:
        assert isinstance(row[k], (int, float)) and math.isfinite(row[k]) and row[k] > 0, (row["measurement"], k, row[k])


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("gpu-check") / "smoke.json"
    # one architecture (Qwen3's): the Qwen2 shape takes the same code path, and each adds ~90 s of CI
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--cpu-smoke", "--only", "smoke-qwen3",
                           "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=840)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "| model | measurement |" in proc.stdout  # the one table
    return json.loads(out.read_text())


def test_report_header_and_test_counts(smoke):
    assert smoke["schema"] == 1 and smoke["mode"] == "cpu-smoke" and smoke["ok"] is True
    assert smoke["install"] == {"skipped": True}
    assert math.isfinite(smoke["seconds"]) and smoke["seconds"] > 0
    t = smoke["tests"]
    assert t["collected"] == t["passed"] + t["failed"] + t["errors"] + t["skipped"] and t["collected"] > 0
    assert t["failed"] == t["errors"] == 0
    if not torch.cuda.is_available():  # every GPU test collected and skipped, each with the stated reason
        assert smoke["device"]["cuda"] is False
        assert t["skipped"] == t["collected"] == sum(t["skip_reasons"].values())
        assert all("needs a CUDA GPU" in r or "needs 2 CUDA GPUs" in r for r in t["skip_reasons"])


def test_benchmark_rows_are_complete_finite_and_consistent(smoke):
    from bench.bench_gpu import sft_label
    from bench.trl_peer import trl_available

    bench = smoke["bench"]
    s = bench["settings"]
    models = sorted({r["model"] for r in bench["rows"]})
    assert models == ["smoke-qwen3"] and len(s["seqs"]) == 2
    trl = trl_available()  # the bench extra (make setup installs it): TRL's rows beside ifdistill's
    assert bench["trl"] == trl if trl else bench["trl"].startswith("not installed")
    levers = ("eager", "compiled")  # Liger's lever needs CUDA and liger-kernel
    for model in models:
        rows = {r["measurement"]: r for r in bench["rows"] if r["model"] == model}
        ours = {sft_label(k, q) for k in ("lora", "full") for q in s["seqs"]}
        with_trl = s["seqs"][:s["trl_seqs"]] if trl else []
        assert set(rows) == (OTHER_MEASUREMENTS | ours | {f"{sft_label(k, s['seqs'][0])}_{v}" for k in s["lever_kinds"]
                                                           for v in levers}
                             | {f"trl_{sft_label(k, q)}" for k in ("lora", "full") for q in with_trl})
        for kind in s["lever_kinds"]:  # the levers: the same step, eager and with every decoder layer compiled
            eager, compiled = (rows[f"{sft_label(kind, s['seqs'][0])}_{v}"] for v in levers)
            assert eager["kernels"]["compiled_layers"] == 0 and compiled["kernels"]["compiled_layers"] == 2
            assert compiled["kernels"]["backend"] == s["compile_backend"] and not compiled["kernels"]["liger"]
            assert eager["tokens_per_step"] == compiled["tokens_per_step"] and eager["loss_first"] == pytest.approx(
                compiled["loss_first"], rel=1e-2)  # same batch and weights; float32: a reordered sum over 151,936 logits moves by <= n 2^-24 = 0.9 %
        for seq in s["seqs"]:
            lora, full = rows[sft_label("lora", seq)], rows[sft_label("full", seq)]
            for r in (lora, full):
                assert r["kernels"]["compiled_layers"] == 0  # auto: eager on CPU
                _finite_positive(r, "tokens_per_step", "step_s", "tokens_per_s", "model_flops_per_step", "loss_first",
                                 "loss_last", "model_flops_6n", "model_flops_4n")
                assert r["tokens_per_step"] <= seq and r["steps"] == s["steps"]
                assert r["tokens_per_s"] == pytest.approx(r["tokens_per_step"] / r["step_s"], rel=1e-9)
                assert r["mfu"] is r["mfu_6n"] is r["mfu_4n"] is None and r["peak_mem_gib"] is None  # CPU: no peak
                # the production configuration: chunked head of conf/train.yaml, the smoke's attention kernel
                assert r["logit_chunk_size"] and r["attn_implementation"] == s["attn_implementation"]
                p = r["profile"]  # the profiled step: host time measured, no device on CPU
                _finite_positive(p, "wall_s", "host_busy_s")
                assert p["device_busy_s"] is None and p["top_ops"]
            # each row's own convention, and the two conventions differ only in the base weights' count:
            # LoRA's extra over full fine-tuning (its adapters, 6 FLOPs per parameter and token) is the same in both
            assert full["model_flops_per_step"] == full["model_flops_6n"] and lora["model_flops_per_step"] == lora["model_flops_4n"]
            extra_6n, extra_4n = (lora[k] - full[k] for k in ("model_flops_6n", "model_flops_4n"))
            assert extra_6n == pytest.approx(extra_4n, rel=1e-12) and extra_6n > 0
            assert full["trainable_params"] == full["params"] == lora["params"] - lora["trainable_params"] > 0
            # full fine-tuning counts the weight gradients too (c = 6 against 4), LoRA adds 6 FLOPs per
            # adapter parameter per token: so the ratio lies strictly between 1 and 6/4
            assert lora["tokens_per_step"] == full["tokens_per_step"]
            assert 1.0 < full["model_flops_per_step"] / lora["model_flops_per_step"] < 1.5
            ratio = bench["ratios"][f"{model} lora/full tokens/s at {seq}"]
            assert ratio == pytest.approx(lora["tokens_per_s"] / full["tokens_per_s"], rel=1e-9)
            for kind, r in (("lora", lora), ("full", full)) if seq in with_trl else ():  # TRL: the same rows
                theirs = rows[f"trl_{sft_label(kind, seq)}"]
                _finite_positive(theirs, "tokens_per_s", "step_s", "loss_first", "loss_last")
                assert theirs["tokens_per_step"] == r["tokens_per_step"] and theirs["steps"] == s["steps"]
                assert theirs["attn_implementation"] == r["attn_implementation"] and theirs["liger"] is False
                assert bench["ratios"][f"{model} ifdistill/TRL tokens/s, {kind} at {seq}"] == pytest.approx(
                    r["tokens_per_s"] / theirs["tokens_per_s"], rel=1e-9)
        d = rows["distill_k4_shared_vs_sft_lora_padded"]
        _finite_positive(d, "sft_step_s", "distill_step_s", "ratio", "student_tokens_per_step")
        assert d["ratio"] == pytest.approx(d["distill_step_s"] / d["sft_step_s"], rel=1e-9) and d["k"] == s["k"]
        assert bench["ratios"][f"{model} distill_k4_shared/sft step"] == d["ratio"]
        g = rows["generate_hf_ifeval"]
        _finite_positive(g, "generate_s", "tokens_per_s", "generated_tokens")
        assert g["prompts"] == s["prompts"] and g["generated_tokens"] <= g["prompts"] * g["max_new_tokens"]
    assert len(bench["ratios"]) == len(models) * (1 + len(s["seqs"]) + 2 * len(with_trl))
