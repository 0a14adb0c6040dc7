"""ICL inputs: deterministic demo choice that never includes the example, and aligned completions."""

from __future__ import annotations

import random

import pytest
import torch

from ifdistill.data.collate import IclCollator
from ifdistill.data.icl import DemoSelector, build_icl_pair, select_demos, with_demos
from ifdistill.data.records import Example, normalise_row
from ifdistill.data.render import render_prompt
from ifdistill.data.synthetic import generate


@pytest.fixture(scope="module")
def pool() -> list[Example]:
    return [normalise_row(r, source="syn", row_id=str(i)) for i, r in enumerate(generate("train", 200))]


def test_selection_is_deterministic_and_order_independent(pool):
    a = select_demos(pool, 4, seed=0, exclude_key=pool[10].uid)
    assert a == select_demos(pool, 4, seed=0, exclude_key=pool[10].uid)
    shuffled = pool[:]
    random.Random(1).shuffle(shuffled)
    assert a == select_demos(shuffled, 4, seed=0, exclude_key=pool[10].uid)
    assert len({d.uid for d in a}) == 4
    assert a != select_demos(pool, 4, seed=1, exclude_key=pool[10].uid)
    assert a != select_demos(pool, 4, seed=0, exclude_key=pool[11].uid)
    assert select_demos(pool, 0, seed=0, exclude_key=pool[10].uid) == []


def test_never_the_example_itself_by_id_key_or_prompt(pool):
    sel = DemoSelector(pool, seed=3)
    for ex in pool:
        for by in (ex.uid, ex.key):
            demos = sel.select(8, exclude_key=by)
            assert ex.uid not in {d.uid for d in demos}
            assert ex.prompt not in {d.prompt for d in demos}
    # a copy of an example under another id (same prompt text) is excluded too
    target = pool[5]
    twin = Example(messages=target.messages, source="other", row_id="twin", key="999")
    sel = DemoSelector(pool + [twin], seed=3)
    for seed_key in (target.uid, target.key):
        assert all(d.prompt != target.prompt for d in sel.select(len(pool) - 1, exclude_key=seed_key))
    # an evaluated prompt that is not in the pool: exclude by prompt text
    outside = sel.select(len(pool) - 1, exclude_key="eval-1", exclude_prompt="  " + target.prompt + "\n")
    assert target.prompt not in {d.prompt for d in outside}
    with pytest.raises(ValueError, match="only"):
        sel.select(len(pool) + 5, exclude_key=target.uid)


def test_teacher_and_student_views_align(tok, pool):
    ex = pool[0]
    demos = select_demos(pool, 3, seed=0, exclude_key=ex.uid)
    pair = build_icl_pair(tok, ex, demos)
    assert pair.num_demos == 3
    s_ids = [pair.student.input_ids[i] for i in pair.student_positions]
    t_ids = [pair.teacher.input_ids[i] for i in pair.teacher_positions]
    assert s_ids == t_ids and len(s_ids) == pair.student.num_supervised
    assert tok.decode(s_ids) == ex.completion + "<|im_end|>"
    teacher_text = tok.decode(pair.teacher.input_ids)
    assert all(d.prompt in teacher_text and d.completion in teacher_text for d in demos)
    # only the final answer is supervised in the teacher view, and its prompt is what the
    # evaluator renders for a k-shot prompt with the same demos
    assert pair.teacher.spans == ((pair.teacher_positions[0], pair.teacher_positions[-1] + 1),)
    kshot = with_demos(ex.messages[:-1], demos)
    assert pair.teacher.input_ids[: pair.teacher.prompt_len] == render_prompt(tok, kshot)


def test_demos_go_after_the_system_turn(pool):
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}]
    out = with_demos(msgs, pool[:2])
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert out[1]["content"] == pool[0].prompt and out[-2:] == msgs[-2:]


def test_icl_collator_positions_gather_equal_tokens(tok, pool):
    items = []
    for ex in pool[:4]:
        pair = build_icl_pair(tok, ex, select_demos(pool, 2, seed=0, exclude_key=ex.uid))
        items.append({"input_ids": pair.student.input_ids, "loss_mask": pair.student.loss_mask,
                      "teacher_input_ids": pair.teacher.input_ids, "teacher_loss_mask": pair.teacher.loss_mask,
                      "student_positions": pair.student_positions, "teacher_positions": pair.teacher_positions,
                      "num_demos": pair.num_demos})
    batch = IclCollator(0)(items)
    v = batch["completion_valid"]
    s = torch.gather(batch["input_ids"], 1, batch["student_positions"])
    t = torch.gather(batch["teacher_input_ids"], 1, batch["teacher_positions"])
    assert torch.equal(s[v], t[v])
    assert int(v.sum()) == int(batch["num_supervised"].sum()) == int((batch["teacher_labels"] != -100).sum())
    assert batch["num_demos"].tolist() == [2, 2, 2, 2]
