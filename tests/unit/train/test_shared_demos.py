"""Shared demonstrations: one prefix per micro-batch gives the teacher views of the per-example scheme."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from ifdistill.data.collate import IclCollator
from ifdistill.data.icl import teacher_view
from ifdistill.train.datamodule import TrainDataModule
from ifdistill.methods.distill.module import ICLDistillModule
from ifdistill.methods.distill.settings import DistillSettings
from ifdistill.methods.distill.shared_demos import split_teacher
from ifdistill.train.method import TrainingInputs

from tests.unit.train.conftest import LORA, TINY, perturb_lora, resolved, synthetic_data


def test_split_finds_head_and_demonstrations():
    student = [1, 2, 3, 4]
    assert split_teacher(student, [9, 9, 1, 2, 3, 4]) == ([], [9, 9])        # demos before everything
    assert split_teacher([7, 3, 4], [7, 9, 9, 3, 4]) == ([7], [9, 9])         # after a system head
    assert split_teacher(student, [1, 9, 2, 3, 4, 5]) is None                 # not of that form
    assert split_teacher(student, student) is None                            # no demonstrations


def shared_datamodule(data: dict, k: int = 2, **model) -> TrainDataModule:
    dm = TrainDataModule(resolved(data, k=k, demos="shared", model={**TINY, **model}), {**TINY, **model},
                         method=ICLDistillModule, micro_batch_size=4)
    dm.setup("fit")
    return dm


@pytest.fixture(scope="module")
def shared_dm():
    return shared_datamodule(synthetic_data(40))


def per_example_views(collate, items):
    """The batch's draw, each view made by the per-example path's function (the differential reference)."""
    exs = [collate.examples[int(it["index"])] for it in items]
    demos = collate.choose(exs)
    return [{**it, **teacher_view(collate.tok, ex, it, demos, collate.icl).fields} for it, ex in zip(items, exs)]


def test_collator_shares_one_prefix_and_never_demonstrates_a_batch_example(shared_dm):
    collate = shared_dm.train_collator()
    items = [shared_dm.built.train[i] for i in range(4)]
    batch = collate(items)
    assert "teacher_prefix_ids" in batch and "teacher_input_ids" not in batch
    assert int(batch["teacher_head_len"]) == 0  # ChatML without a system turn: demos come first
    assert bool(batch["teacher_prefix_rows"].all())
    again = collate(items)
    assert torch.equal(batch["teacher_prefix_ids"], again["teacher_prefix_ids"])  # deterministic
    exs = [collate.examples[int(it["index"])] for it in items]
    demos = collate.choose(exs)
    assert len(demos) == 2 and not {d.uid for d in demos} & {e.uid for e in exs}


def test_shared_prefix_teacher_equals_full_teacher_views(shared_dm):
    collate = shared_dm.train_collator()
    items = [shared_dm.built.train[i] for i in range(4)]
    shared = collate(items)
    full = IclCollator(shared_dm.tokenizer.pad_token_id)(per_example_views(collate, items))
    module = ICLDistillModule(TrainingInputs(TINY, LORA), DistillSettings(teacher="frozen_initial", kd_ratio=0.5))
    perturb_lora(module)
    r1, s1, t1, y1 = module.completion_index(shared)
    r2, s2, t2, y2 = module.completion_index(full)
    assert torch.equal(r1, r2) and torch.equal(s1, s2) and torch.equal(y1, y2)
    a, b = module.teacher_logits(shared, r1, t1), module.teacher_logits(full, r2, t2)
    assert torch.allclose(a, b, atol=1e-4), (a - b).abs().max()
    loss_shared, stats_shared = module.objective(shared)
    loss_full, stats_full = module.objective(full)
    assert loss_shared.item() == pytest.approx(loss_full.item(), rel=1e-5)
    assert stats_shared["teacher_nll"].item() == pytest.approx(stats_full["teacher_nll"].item(), rel=1e-5)


def test_shared_batches_come_out_of_the_datamodule(shared_dm):
    batch = next(iter(shared_dm.train_dataloader()))
    assert "teacher_prefix_ids" in batch and int(batch["num_demos"].min()) == 2
    assert int(batch["step_tokens"]) == int(batch["completion_valid"].sum())


def test_teacher_max_length_drops_demonstrations_like_the_per_example_path(shared_dm):
    items = [shared_dm.built.train[i] for i in range(4)]
    full = shared_dm.train_collator()(items)
    cap = int(full["teacher_prefix_ids"].numel()) + max(len(it["input_ids"]) for it in items) - 1
    capped = shared_dm.train_collator()
    capped.icl = dataclasses.replace(capped.icl, teacher_max_length=cap)
    batch = capped(items)
    reference = per_example_views(capped, items)
    assert batch["num_demos"].tolist() == [v["num_demos"] for v in reference]
    assert int(batch["num_demos"].min()) == 1 and capped.demos_removed_for_length >= 1


# -- regressions: the shared scheme follows the per-example rules ------------------------------------

def test_replay_examples_read_no_demonstrations_unless_icl_on_replay():
    """With data.icl_on_replay=false the shared scheme gives replay examples no demonstrations."""
    data = synthetic_data(24, replay=[{"name": "chat", "synthetic": "chat", "max_examples": 60}], ratio=0.5)
    dm = shared_datamodule(data)
    collate = dm.train_collator()
    items = dm.built.train.items
    replay = [it for it in items if it["is_replay"]]
    new = [it for it in items if not it["is_replay"]]
    assert len(replay) >= 4 and len(new) >= 4
    mixed = collate(new[:2] + replay[:2])
    assert mixed["num_demos"].tolist() == [2, 2, 0, 0]
    assert mixed["teacher_prefix_rows"].tolist() == [True, True, False, False]  # still one shared prefix
    assert collate(replay[:4])["num_demos"].tolist() == [0, 0, 0, 0]
    on_replay = shared_datamodule({**data, "icl_on_replay": True}).train_collator()
    assert on_replay(replay[:4])["num_demos"].tolist() == [2, 2, 2, 2]


def test_mixed_batch_teacher_equals_per_example_views():
    """Prefix rows and identity (replay) rows in one batch: the same logits as the per-example layout."""
    data = synthetic_data(24, replay=[{"name": "chat", "synthetic": "chat", "max_examples": 60}], ratio=0.5)
    dm = shared_datamodule(data)
    collate = dm.train_collator()
    new = [it for it in dm.built.train.items if not it["is_replay"]]
    replay = [it for it in dm.built.train.items if it["is_replay"]]
    items = [new[0], replay[0], new[1], replay[1]]
    shared = collate(items)
    full = IclCollator(dm.tokenizer.pad_token_id)(per_example_views(collate, items))
    module = ICLDistillModule(TrainingInputs(TINY, LORA), DistillSettings(teacher="frozen_initial", kd_ratio=0.5))
    perturb_lora(module)
    rows, s_cols, t_cols, _ = module.completion_index(shared)
    a = module.teacher_logits(shared, rows, t_cols)
    b = module.teacher_logits(full, *module.completion_index(full)[0:1], module.completion_index(full)[2])
    # Same float32 network on the same tokens; only the attention split (cached prefix vs one pass)
    # differs, so the logits agree to float32 reduction error over a few hundred positions (~1e-5).
    assert torch.allclose(a, b, atol=1e-4), (a - b).abs().max()


def test_the_thinking_flag_is_resolved_once_for_students_teachers_and_the_evaluator():
    """Teacher, student and evaluator read prompts formatted with one thinking flag, resolved once: the
    model's (the evaluator's) value; a data.enable_thinking that disagrees with it (a null model value
    included) is refused before anything is built."""
    from ifdistill.data.build import DataConfig
    from tests.unit.data.conftest import QWEN3_LIKE

    data = synthetic_data(24, enable_thinking=True)
    with pytest.raises(ValueError, match="enable_thinking"):
        DataConfig.resolve(data, icl={"k": 2, "demos": "shared"}, model={**TINY, "enable_thinking": None})
    dm = shared_datamodule(data, chat_template=QWEN3_LIKE, enable_thinking=True)
    collate = dm.train_collator()
    items = [dm.built.train[i] for i in range(4)]
    batch = collate(items)
    assert "teacher_prefix_ids" in batch and collate.fallback_batches == 0
    assert collate.icl.enable_thinking is True
    # the student positions are where the items' loss masks are: students were rendered with the same flag
    for b, it in enumerate(items):
        valid = batch["completion_valid"][b]
        assert batch["student_positions"][b][valid].tolist() == np.nonzero(it["loss_mask"])[0].tolist()
