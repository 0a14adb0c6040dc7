"""``ifdistill-train`` on one GPU as a user runs it: DeepSpeed ZeRO-2 and ZeRO-3 in bf16-mixed, the ZeRO-3
export evaluated by the checkpoint-eval callback with the HF backend on the training GPU, equal to the
CPU HF backend's greedy answers, and the evaluator on a GPU of its own where two exist.

Runs share the CPU strategy tests' settings (``tests/integration/train/runs.py``: tiny model, LoRA r=4,
64 synthetic examples, 8 steps, checkpoints every 2) with ``trainer.accelerator=gpu trainer.devices=1``;
``precision: auto`` makes them bf16-mixed. The evaluation run starts from the echo-tuned tiny model
(``tests/integration/evaluator/tuned.py``): a random-init model repeats one token whatever the prompt, so
equal answers on it would prove nothing.

Memory split when the evaluator shares the training GPU (docs/gpu.md): the HF backend holds its own copy
of the weights in ``eval.dtype`` plus the key/value cache of ``eval.runtime.hf_batch_size`` rows; the
trainer keeps its weights, optimizer state and activations. The test samples ``nvidia-smi`` while it
runs and prints each process's peak, which must fit the GPU together.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from ifdistill.train.checkpointing import consolidated_state_dict
from ifdistill.methods.sft.module import SFTModule
from ifdistill.train.method import TrainingInputs
from tests.gpu.conftest import two_gpus_or_skip
from tests.integration.train.runs import COMMON, STEPS, csv_rows, lora_weights, max_abs_diff, run_dir
from tests.support import first_divergence

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
GPU = ["trainer.accelerator=gpu", "trainer.devices=1"]
EVAL = ["callbacks=checkpoint_eval", "eval.backend=hf", "eval.generation.max_new_tokens=32", "eval.runtime.progress=false",
        f"callbacks.checkpoint_eval.every_n_steps={STEPS}"]
# fp32 on both devices (the tiny model's dtype; TF32 is off by default): the kernels differ only in
# summation order, ~λ sqrt(H) 2^-24 |z| ≈ 1e-5 of a logit, so a greedy choice can differ only where the
# two best logits are closer than that; 1e-3 leaves two orders of magnitude for the 32 decoding steps
NEAR_TIE = 1e-3


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    env.pop("DS_ACCELERATOR", None)
    return env


def train_gpu(root: Path, *overrides: str, timeout: float = 900) -> dict:
    """``ifdistill-train`` on one GPU to the end; returns the summary it prints. A ``peft=`` override
    replaces the shared LoRA settings."""
    root.mkdir(parents=True, exist_ok=True)
    own_peft = any(o.startswith("peft=") for o in overrides)
    common = [o for o in COMMON if not (own_peft and o.startswith("peft"))]
    argv = [sys.executable, "-m", "ifdistill.cli.train", *common, *GPU, *overrides,
            f"paths.output_root={root}", f"hydra.run.dir={root}/hydra"]
    proc = subprocess.run(argv, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith('{"run_id"')][-1]
    return json.loads(line)


class GpuMemory:
    """Peak GPU memory per role (trainer / evaluator) from ``nvidia-smi``, sampled every 0.2 s."""

    def __init__(self):
        self.peak_mib: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.available = shutil.which("nvidia-smi") is not None

    def __enter__(self):
        if self.available:
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self.available:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True).stdout
            for line in out.splitlines():
                try:
                    pid, mib = (int(x) for x in line.split(","))
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
                except (ValueError, OSError):
                    continue
                role = "evaluator" if "ifdistill.evaluator.cli" in cmd else "trainer" if "ifdistill.cli.train" in cmd else None
                if role:
                    self.peak_mib[role] = max(self.peak_mib.get(role, 0), mib)
            time.sleep(0.2)


@pytest.fixture(scope="module")
def zero_runs(tmp_path_factory):
    done: dict[int, dict] = {}

    def get(stage: int) -> dict:
        if stage not in done:
            done[stage] = train_gpu(tmp_path_factory.mktemp(f"zero{stage}"), f"trainer=deepspeed_stage_{stage}")
        return done[stage]

    return get


@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_zero_on_one_gpu_trains_and_checkpoints(zero_runs, stage):
    run = zero_runs(stage)
    assert run["global_step"] == STEPS
    losses = [float(r["train/loss"]) for r in csv_rows(run) if r.get("train/loss")]
    assert len(losses) >= STEPS - 1 and all(math.isfinite(x) for x in losses), losses
    assert max_abs_diff(lora_weights(run, 2), lora_weights(run, STEPS)) > 0  # trained between checkpoints
    ckpt = Path(run["run_dir"]) / "checkpoints" / f"step={STEPS:06d}.ckpt"
    assert ckpt.is_dir() and (ckpt / "latest").is_file()  # DeepSpeed's checkpoint layout
    state = consolidated_state_dict(ckpt)
    module = SFTModule(TrainingInputs({"name_or_path": "builtin:tiny"}, {"method": "lora", "r": 4, "alpha": 8,
                                                                         "dropout": 0.1}))
    module.load_state_dict(state, strict=True)  # every parameter, nothing extra
    assert all(torch.isfinite(v.float()).all() for v in state.values())


def _eval_on_cpu(run: Path, step: int, out: Path) -> list[dict]:
    """``ifdistill-eval`` of the step's export with the run's eval request, on CPU (no GPU visible)."""
    request = run / "evals" / f"step_{step:06d}" / ".request"
    argv = [sys.executable, "-m", "ifdistill.evaluator.cli", f"--config-dir={request}", "eval=_request", "model=_request",
            f"export_dir={run / 'exports' / f'step_{step:06d}'}", f"output_dir={out}", f"hydra.run.dir={out}",
            "eval.runtime.hf_device=cpu"]
    proc = subprocess.run(argv, cwd=ROOT, env=dict(_env(), CUDA_VISIBLE_DEVICES=""), capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]


def test_zero3_export_evaluated_on_the_training_gpu_equals_cpu_greedy(tuned, tmp_path):
    from tests.integration.evaluator.test_backends_agree import _margin

    with GpuMemory() as memory:
        summary = train_gpu(tmp_path / "train", "trainer=deepspeed_stage_3", "peft=none", "optim.lr=1e-5",
                            f"model.name_or_path={tuned['ft']}", *EVAL, "eval=ifeval_local", "eval.data.name=words",
                            f"eval.data.path={tuned['words']}",
                            "+callbacks.checkpoint_eval.devices.hf_device=cuda")
    run = Path(summary["run_dir"])
    export = json.loads((run / "exports" / f"step_{STEPS:06d}" / "export.json").read_text())
    assert export["kinds"] == ["model"]  # full weights gathered from the ZeRO-3 shards
    results = json.loads((run / "evals" / f"step_{STEPS:06d}" / "results.json").read_text())
    assert results["backend"]["name"] == "hf" and results["backend"]["settings"]["device"] == "cuda"
    gpu = [json.loads(line) for line in (run / "evals" / f"step_{STEPS:06d}" / "samples.jsonl").read_text().splitlines()]
    cpu = _eval_on_cpu(run, STEPS, tmp_path / "cpu")
    assert [s["rendered_prompt"] for s in gpu] == [s["rendered_prompt"] for s in cpu]
    # prompt-dependent answers (the echo): far from the one repeated token of a random-init model
    assert len({s["response"] for s in cpu}) > 0.5 * len(cpu)
    from transformers import AutoTokenizer

    model_dir = run / "exports" / f"step_{STEPS:06d}" / "model"
    tok = AutoTokenizer.from_pretrained(model_dir)
    mismatches = []
    for g, c in zip(gpu, cpu, strict=True):
        if g["response"] == c["response"]:
            continue
        k, ids_g, a, b = first_divergence(tok, g["response"], c["response"], tok.convert_tokens_to_ids("<|im_end|>"))
        prompt = tok(c["rendered_prompt"], add_special_tokens=False)["input_ids"]
        mismatches.append((c["key"], k, _margin(model_dir, None, prompt, ids_g[:k], a, b)))
    print(f"\nZeRO-3 export, HF on GPU vs CPU: {len(cpu) - len(mismatches)}/{len(cpu)} equal; mismatches "
          f"(key, position, CPU logit margin): {mismatches}; GPU memory peak MiB per process: {memory.peak_mib}")
    assert all(m[2] < NEAR_TIE for m in mismatches), mismatches
    if memory.peak_mib.get("evaluator"):  # nvidia-smi sees this container's pids: the documented split holds
        total = torch.cuda.get_device_properties(0).total_memory / 2**20
        assert sum(memory.peak_mib.values()) <= total


def test_checkpoint_eval_on_its_own_gpu(tmp_path):
    two_gpus_or_skip()
    summary = train_gpu(tmp_path / "train", *EVAL, "eval=synthetic", "eval.data.max_examples=12",
                        "+callbacks.checkpoint_eval.devices.cuda_visible_devices='1'",
                        "+callbacks.checkpoint_eval.devices.hf_device=cuda")
    run = Path(summary["run_dir"])
    results = json.loads((run / "evals" / f"step_{STEPS:06d}" / "results.json").read_text())
    assert results["backend"]["settings"]["device"] == "cuda"
    assert results["config"]["eval"]["runtime"]["cuda_visible_devices"] == "1"
    assert results["counts"]["num_prompts"] == 12
