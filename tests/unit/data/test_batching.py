"""Batches: packed and padded losses equal the per-example loss with a real Qwen2 forward (CPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

from ifdistill.data.collate import IGNORE, PackCollator, PadCollator, block_causal_mask, packed_model_inputs
from ifdistill.data.render import render
from ifdistill.data.synthetic import generate
from ifdistill.data.truncation import LengthStats, apply_length_policy


def loss_sum(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Sum of next-token cross-entropy over label tokens (the shift is done here, as HF does)."""
    logits, labels = logits[..., :-1, :].flatten(0, -2), labels[..., 1:].flatten()
    return F.cross_entropy(logits.float(), labels, ignore_index=IGNORE, reduction="sum")


@pytest.fixture(scope="module")
def items(tok):
    rows = generate("train", 7)
    out = []
    for i, row in enumerate(rows):
        msgs = [{"role": "user", "content": row["prompt"]}, {"role": "assistant", "content": row["response"]}]
        r = render(tok, msgs)
        out.append({"input_ids": r.input_ids[:120], "loss_mask": r.loss_mask[:120], "is_replay": i % 3 == 0,
                    "index": i})
        out[-1]["loss_mask"][-10:] = [1] * 10  # make sure every truncated item keeps supervised tokens
    return out


@pytest.fixture(scope="module", params=["sdpa", "eager"])
def model(request, tiny_model_dir):
    torch.manual_seed(0)
    m = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation=request.param,
                                             dtype=torch.float32)
    return m.eval()


@pytest.fixture(scope="module")
def ref(model, items) -> tuple[torch.Tensor, int]:
    """Sum of the per-example, unpadded losses and the number of supervised tokens."""
    total, count = torch.zeros(()), 0
    with torch.no_grad():
        for it in items:
            ids = torch.tensor([it["input_ids"]])
            labels = torch.tensor([[t if m else IGNORE for t, m in zip(it["input_ids"], it["loss_mask"])]])
            labels[0, 0] = IGNORE
            total += loss_sum(model(input_ids=ids).logits, labels)
            count += int((labels[0, 1:] != IGNORE).sum())
    return total, count


@pytest.mark.parametrize("max_row_tokens", [None, 260])
@pytest.mark.parametrize("explicit_mask", [False, True])
def test_packed_loss_equals_per_example_loss(model, items, ref, max_row_tokens, explicit_mask):
    ref, count = ref
    batch = PackCollator(0, max_row_tokens=max_row_tokens)(items)
    kwargs = packed_model_inputs(batch, model.config._attn_implementation, explicit_mask=explicit_mask)
    with torch.no_grad():
        packed = loss_sum(model(**kwargs).logits, batch["labels"])
    assert int(batch["num_supervised"].sum()) == count
    torch.testing.assert_close(packed, ref, rtol=1e-5, atol=1e-4)
    if max_row_tokens:
        assert batch["input_ids"].shape[0] > 1 and batch["input_ids"].shape[1] <= max_row_tokens


def test_packing_without_boundaries_would_differ(model, items, ref):
    """Guard against a vacuous test: without restarting positions, examples attend to each other."""
    ref, _ = ref
    batch = PackCollator(0)(items)
    with torch.no_grad():
        leaky = loss_sum(model(input_ids=batch["input_ids"], use_cache=False).logits, batch["labels"])
        # transformers 5.x pitfall: with the config's default use_cache=True a cache object exists and
        # the packed-sequence detection from position_ids is skipped (even in train mode).
        cached = loss_sum(model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits,
                          batch["labels"])
    assert not torch.allclose(leaky, ref, rtol=1e-3)
    assert not torch.allclose(cached, ref, rtol=1e-3)


def test_padded_loss_equals_per_example_loss(model, items, ref):
    ref, count = ref
    batch = PadCollator(0, pad_to_multiple_of=8)(items)
    assert batch["input_ids"].shape[1] % 8 == 0
    with torch.no_grad():
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    torch.testing.assert_close(loss_sum(out.logits, batch["labels"]), ref, rtol=1e-5, atol=1e-4)
    assert int(batch["num_supervised"].sum()) == count


def test_pack_collator_layout(items):
    batch = PackCollator(7, max_row_tokens=260)(items[:3])
    lengths = [len(it["input_ids"]) for it in items[:3]]
    pos, seq = batch["position_ids"], batch["seq_idx"]
    row = 0
    assert pos[row, : lengths[0]].tolist() == list(range(lengths[0]))
    assert pos[row, lengths[0]] == 0  # restart at the second example
    for i, n in enumerate(lengths):
        assert int((seq == i).sum()) == n
        first = (seq == i).nonzero()[0]
        assert batch["labels"][first[0], first[1]] == IGNORE  # nothing predicts a sequence's first token
    assert batch["cu_seqlens"][-1] == batch["input_ids"].numel()
    assert (batch["input_ids"][seq < 0] == 7).all() and (batch["labels"][seq < 0] == IGNORE).all()
    assert batch["is_replay"].tolist() == [True, False, False]
    mask = block_causal_mask(torch.tensor([[0, 0, 1, -1]]))
    allowed = (mask[0, 0] == 0).int().tolist()
    assert allowed == [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]


def test_length_policies_count_what_they_do(tok):
    msgs = [{"role": "system", "content": "a long system prompt " * 10}, {"role": "user", "content": "q?"},
            {"role": "assistant", "content": "the answer."}]
    r = render(tok, msgs)
    answer = len(r.input_ids) - r.prompt_len - 1  # without the trailing newline
    stats = LengthStats()
    assert apply_length_policy(r, None, "drop", stats).input_ids == r.input_ids[:-1]  # tail stripped
    assert apply_length_policy(r, 20, "drop", stats) is None
    cut = apply_length_policy(r, answer + 5, "cut_prompt_left", stats)
    assert len(cut.input_ids) == answer + 5 and cut.input_ids[-answer:] == r.input_ids[r.prompt_len:-1]
    assert sum(cut.loss_mask) == answer and cut.spans == ((5, answer + 5),)
    assert apply_length_policy(r, answer, "cut_prompt_left", stats) is None  # would leave no prompt
    assert stats.to_dict() == {"kept": 2, "truncated": 1, "tokens_cut": len(r.input_ids) - 1 - answer - 5,
                               "supervised_tokens_cut": 0,
                               "dropped": {"too_long": 1, "answer_longer_than_max_length": 1}}
    with pytest.raises(ValueError, match="policy"):
        apply_length_policy(r, 10, "cut_right", stats)


def test_collators_accept_numpy_items(items):
    np_items = [{**it, "input_ids": np.asarray(it["input_ids"]), "loss_mask": np.asarray(it["loss_mask"], np.int8)}
                for it in items]
    a, b = PadCollator(0)(items), PadCollator(0)(np_items)
    assert all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(ValueError, match="loss_mask"):
        PadCollator(0)([{"input_ids": [1, 2, 3], "loss_mask": [0, 1]}])


def test_a_left_cut_inside_an_earlier_answer_never_supervises_the_first_token(tok):
    """The collator sets labels[0] = -100, so a cut must leave loss_mask[0] = 0: otherwise the step's token
    count (the loss normaliser) counts one token more than the loss sums."""
    from ifdistill.train.datamodule import supervised_tokens

    msgs = [{"role": "user", "content": "first question?"}, {"role": "assistant", "content": "one two three " * 8},
            {"role": "user", "content": "second?"}, {"role": "assistant", "content": "the answer."}]
    r = render(tok, msgs)  # train_on=assistant: both answers supervised
    (s0, e0), (s1, _) = r.spans
    stripped = len(r.input_ids) - 1  # the trailing newline goes first
    for start in range(s0, e0):  # every cut that starts the kept part inside the first answer
        stats = LengthStats()
        cut = apply_length_policy(r, stripped - start, "cut_prompt_left", stats)
        assert cut is not None and cut.loss_mask[0] == 0
        item = {"input_ids": cut.input_ids, "loss_mask": cut.loss_mask}
        batch = PadCollator(0)([item])
        assert supervised_tokens(item) == int(batch["num_supervised"][0]) == int((batch["labels"] != IGNORE).sum())
        assert sum(cut.loss_mask) == sum(e - s for s, e in cut.spans)  # spans and mask tell the same story
        assert stats.supervised_tokens_cut == (start - s0) + 1  # the cut part of the answer, plus position 0
