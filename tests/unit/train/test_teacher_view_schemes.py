"""Differential test: shared and per-example demonstrations, given the same draw, give the same training signal.

For ~100 seeded random configurations -- replay ratio, ``icl_on_replay``, ``enable_thinking``
true/false/null at the data and at the model level, ``truncation`` drop / cut_prompt_left with a
``max_length`` that cuts, a ``teacher_max_length`` that drops demonstrations, k = 0..4 -- both schemes
build their datasets from one config; the per-example path (``ifdistill.data.build._attach_icl``) is
given the demonstrations the shared collator drew for a batch, and the two batches must hold identical
student tensors, identical teacher token sequences, and give the same loss and gradients.

Packing is not part of the grid: both schemes refuse it for distillation batches (one check below).
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from ifdistill.data.build import DataConfig, _attach_icl, build_train_dataset
from ifdistill.data.collate import IclCollator
from ifdistill.data.icl import identity_teacher_view
from ifdistill.models.tiny import TinySpec, tiny_model_path
from ifdistill.train.datamodule import TrainDataModule
from ifdistill.methods.distill.module import ICLDistillModule
from ifdistill.methods.distill.settings import DistillSettings
from ifdistill.methods.distill.shared_demos import SharedDemoCollator
from ifdistill.train.method import TrainingInputs

from tests.unit.data.conftest import QWEN3_LIKE
from tests.unit.train.conftest import LORA, TINY, perturb_lora, synthetic_data

N_CONFIGS = 100
STUDENT_KEYS = ("input_ids", "attention_mask", "labels", "student_positions", "completion_valid", "num_demos",
                "is_replay", "num_supervised")


def random_config(rng: random.Random) -> tuple[dict, dict, int]:
    ratio = rng.choice([0.0, 0.25, 0.5])
    data = synthetic_data(24, heldout=0, seed=rng.randrange(1000),
                          truncation=rng.choice(["drop", "cut_prompt_left"]),
                          max_length=rng.choice([None, 260, 300]),
                          teacher_max_length=rng.choice([None, None, 500, 700]),
                          icl_on_replay=rng.random() < 0.5, enable_thinking=rng.choice([None, False, True]))
    if ratio:
        data.update(ratio=ratio, replay=[{"name": "chat", "synthetic": "chat", "max_examples": 40}])
    # Data and model flags agree up to null == false (a disagreement is refused: see test_shared_demos).
    model_flag = {None: rng.choice([None, False]), False: rng.choice([None, False]), True: True}[data["enable_thinking"]]
    model = {**TINY, "chat_template": QWEN3_LIKE, "enable_thinking": model_flag}
    return data, model, rng.randrange(5)


class FixedDraw:
    """A selector that gives every example the same demonstrations: the shared collator's draw."""

    def __init__(self, demos):
        self.demos = demos

    def select(self, k, **_):
        return list(self.demos)


def teacher_sequences(batch: dict) -> list[list[int]]:
    """Each row's teacher tokens, from either layout (prefix + continuation, or the row's own view)."""
    out = []
    for b in range(batch["input_ids"].shape[0]):
        n = int(batch["attention_mask"][b].sum())
        student = batch["input_ids"][b, :n].tolist()
        if "teacher_prefix_ids" not in batch:
            m = int(batch["teacher_attention_mask"][b].sum())
            out.append(batch["teacher_input_ids"][b, :m].tolist())
        elif bool(batch["teacher_prefix_rows"][b]):
            out.append(batch["teacher_prefix_ids"].tolist() + student[int(batch["teacher_head_len"]):])
        else:
            out.append(student)
    return out


# The tiny model's tokenizer (same spec fields that train it) on a one-layer network: the comparison is of
# token sequences and of the arithmetic on them, which depth does not change, at ~1/10 of the cost.
MICRO = TinySpec(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=1,
                 num_key_value_heads=1, head_dim=64)


@pytest.fixture(scope="module")
def micro_model() -> str:
    return str(tiny_model_path(MICRO))


@pytest.fixture(scope="module")
def tokenizer(micro_model):
    tok = AutoTokenizer.from_pretrained(micro_model)
    tok.chat_template = QWEN3_LIKE
    return tok


@pytest.fixture(scope="module")
def module(micro_model):
    torch.manual_seed(0)
    m = ICLDistillModule(TrainingInputs({"name_or_path": micro_model}, LORA),
                         DistillSettings(teacher="frozen_initial", kd_ratio=0.5))
    perturb_lora(m)
    return m


def loss_and_grads(module, batch) -> tuple[float, dict[str, torch.Tensor]]:
    module.zero_grad(set_to_none=True)
    loss, _ = module.objective(batch)
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in module.lm.named_parameters() if p.grad is not None}


@pytest.fixture
def one_thread():
    """Many small forward/backward passes: one intra-op thread is ~8x faster than two on a loaded 2-core box."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_shared_and_per_example_schemes_agree_on_random_configurations(tokenizer, module, one_thread):
    rng = random.Random(13)
    pad = tokenizer.pad_token_id
    seen = {"prefix": 0, "identity_rows": 0, "fallback": 0, "dropped": 0, "cut": 0, "k0": 0}
    for case in range(N_CONFIGS):
        data, model, k = random_config(rng)
        shared = DataConfig.resolve(data, icl={"k": k, "demos": "shared"}, model=model)
        per_example = DataConfig.resolve(data, icl={"k": k, "demos": "per_example"}, model=model)
        assert shared.icl.enable_thinking == per_example.icl.enable_thinking == (
            model["enable_thinking"] if model["enable_thinking"] is not None else data["enable_thinking"])
        built_s = build_train_dataset(shared, tokenizer)
        built_p = build_train_dataset(dataclasses.replace(per_example, icl=dataclasses.replace(per_example.icl, k=0)),
                                      tokenizer)  # student items only; teacher views attached below
        assert len(built_s.train) == len(built_p.train)
        for a, b in zip(built_s.train.items, built_p.train.items):
            assert np.array_equal(a["input_ids"], b["input_ids"]) and np.array_equal(a["loss_mask"], b["loss_mask"])
        idx = rng.sample(range(len(built_s.train)), 4)
        items_s = [dict(built_s.train[i]) for i in idx]
        items_p = [dict(built_p.train[i]) for i in idx]
        exs = [built_s.examples[i] for i in idx]
        seen["cut"] += sum(e["length"]["truncated"] for e in built_s.manifest.data["sources"].values())
        if k == 0:  # both schemes: the teacher view is the student view
            seen["k0"] += 1
            got = IclCollator(pad)([identity_teacher_view(it) for it in items_s])
            ref = IclCollator(pad)([identity_teacher_view(it) for it in items_p])
        else:
            collate = SharedDemoCollator(tokenizer, built_s.examples, built_s.demo_pool, shared.icl, pad_token_id=pad)
            draw = collate.choose(exs)
            got = collate(items_s)
            stats: dict[str, int] = {}
            _attach_icl(tokenizer, per_example.icl, items_p, exs, FixedDraw(draw), stats)
            ref = IclCollator(pad)(items_p)
            assert collate.demos_removed_for_length == stats.get("demos_removed_for_length", 0)
            seen["dropped"] += collate.demos_removed_for_length
            seen["fallback"] += collate.fallback_batches
            if "teacher_prefix_ids" in got:
                seen["prefix"] += 1
                seen["identity_rows"] += int((~got["teacher_prefix_rows"]).sum())
        where = f"case {case}: data={data} model.enable_thinking={model['enable_thinking']} k={k}"
        for key in STUDENT_KEYS:
            assert torch.equal(got[key], ref[key]), f"{key} differs; {where}"
        assert teacher_sequences(got) == teacher_sequences(ref), where
        loss_g, grads_g = loss_and_grads(module, got)
        loss_r, grads_r = loss_and_grads(module, ref)
        # The same float32 network on the same token sequences; only the teacher's attention is split
        # differently (a cached prefix vs one pass), so logits differ by float32 reduction error
        # (~1e-6 relative over a few hundred keys). The loss is a sum over <= ~1,000 tokens of terms
        # of order 1-10 and the gradients sums of as many products: a relative 1e-4 bounds both with
        # ~100x margin, while one wrong demonstration, position or mask changes them by >= 1e-2.
        assert loss_g == pytest.approx(loss_r, rel=1e-4), where
        for name, g in grads_r.items():
            scale = g.abs().max().item() + 1e-12
            assert (grads_g[name] - g).abs().max().item() <= 1e-4 * scale, f"grad {name}; {where}"
    # The grid reached every layout and rule it is meant to exercise.
    assert seen["prefix"] > 20 and seen["identity_rows"] > 5 and seen["dropped"] > 0 and seen["k0"] > 5, seen
    assert seen["cut"] > 0, seen
    assert seen["fallback"] > 0, seen


def test_packing_is_refused_for_distillation_in_both_schemes():
    for demos in ("shared", "per_example"):
        cfg = DataConfig.resolve(synthetic_data(8), icl={"k": 2, "demos": demos}, model=TINY)
        with pytest.raises(ValueError, match="packing"):
            TrainDataModule(cfg, TINY, packing=True)
