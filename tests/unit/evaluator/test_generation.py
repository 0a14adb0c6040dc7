"""How raw generated ids become a response -- the post-processing both backends share."""

from __future__ import annotations

import pytest

from ifdistill.evaluator.backend_vllm import lora_id, lora_rank_slot
from ifdistill.evaluator.generation import Request, Sampling, finalize, request_seed


def _sampling(tok, stop=()):
    return Sampling(greedy=True, temperature=1.0, top_p=1.0, top_k=0, stop=tuple(stop),
                    stop_token_ids=(tok.convert_tokens_to_ids("<|im_end|>"),))


def _ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def test_cut_after_the_first_stop_token(tiny_tokenizer):
    tok = tiny_tokenizer
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    body = _ids(tok, "the ocean is large")
    c = finalize(body + [eos] + _ids(tok, " trailing"), Request((1,), 64, 0), _sampling(tok), tok)
    assert c.text == "the ocean is large" and c.finish_reason == "stop"
    assert list(c.token_ids) == body + [eos]


def test_budget_cut_and_a_stop_token_beyond_the_budget(tiny_tokenizer):
    tok = tiny_tokenizer
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    body = _ids(tok, "one two three four five six")
    c = finalize(body + [eos], Request((1,), 3, 0), _sampling(tok), tok)
    assert c.finish_reason == "length" and list(c.token_ids) == body[:3]
    # EOS exactly as the last allowed token still counts as a stop (vLLM reports it the same way).
    c = finalize(body[:2] + [eos], Request((1,), 3, 0), _sampling(tok), tok)
    assert c.finish_reason == "stop" and len(c.token_ids) == 3


def test_stop_strings_cut_at_the_shortest_prefix_that_holds_them(tiny_tokenizer):
    tok = tiny_tokenizer
    raw = _ids(tok, "first line\nEND of it and more words")
    c = finalize(raw, Request((1,), 64, 0), _sampling(tok, stop=["END"]), tok)
    assert c.text == "first line\n" and c.finish_reason == "stop"
    assert "END" in tok.decode(list(c.token_ids)) and "END" not in tok.decode(list(c.token_ids[:-1]))
    # Already cut by a backend that stopped there: the same result.
    assert finalize(list(c.token_ids), Request((1,), 64, 0), _sampling(tok, stop=["END"]), tok) == c


def test_special_tokens_are_not_part_of_the_text(tiny_tokenizer):
    tok = tiny_tokenizer
    start = tok.convert_tokens_to_ids("<|im_start|>")
    c = finalize(_ids(tok, "a b") + [start] + _ids(tok, " c"), Request((1,), 64, 0), _sampling(tok), tok)
    assert "<|im_start|>" not in c.text and c.finish_reason == "length"


def test_request_seeds_are_per_prompt_and_stable():
    assert request_seed(0, "1001") == request_seed(0, "1001")
    assert request_seed(0, "1001") != request_seed(0, "1002") != request_seed(1, "1002")
    assert 0 <= request_seed(5, "x") < 2**31


def test_lora_slots_and_ids():
    assert [lora_rank_slot(r) for r in (1, 4, 8, 12, 16, 64, 300)] == [1, 8, 8, 16, 16, 64, 320]
    with pytest.raises(ValueError):
        lora_rank_slot(1024)
    assert lora_id("/a/adapter") == lora_id("/a/adapter") != lora_id("/b/adapter")
