"""The evaluator on Qwen3's real template: rendered prompts equal the template's generation prompt byte
for byte, every training example's mask starts exactly where the evaluator's prompt ends (all IFEval
prompts, the synthetic data), k-shot demonstrations render as the ICL teacher's do, and with thinking
on the text after ``</think>`` is scored.
"""

from __future__ import annotations

import pytest

from ifdistill.data.icl import build_icl_pair, select_demos
from ifdistill.data.render import render
from ifdistill.evaluator.cli import load_config
from ifdistill.evaluator.dataset import load_eval_rows, load_rows
from ifdistill.evaluator.generation import scored_text
from ifdistill.evaluator.prompts import build_prompts
from ifdistill.evaluator.output import read_results
from ifdistill.evaluator.run import evaluate
from ifdistill.benchmarks.instruction_following.schema import SAMPLE_SCHEMA, validate
from ifdistill.evaluator.settings import FewShotSettings, GenerationSettings, SourceSettings
from ifdistill.benchmarks.registry import get as _benchmark

DUMMY = "Dummy answer, two sentences. The end."
QWEN3_HF = ["model=tiny_qwen3", "eval=ifeval_local", "eval.backend=hf", "eval.data.max_examples=3",
            "eval.generation.max_new_tokens=6", "eval.runtime.progress=false", "eval.runtime.num_threads=1"]


@pytest.mark.parametrize("thinking,fewshot", [(None, 1), (True, 0)])
def test_rendered_prompt_is_the_templates_generation_prompt(tiny_qwen3_dir, tmp_path, thinking, fewshot):
    """Through evaluate() with the HF backend on tiny_qwen3: samples.jsonl's rendered_prompt equals
    apply_chat_template(add_generation_prompt=True, enable_thinking=<setting>) byte for byte (None is
    the documented False for thinking templates)."""
    from transformers import AutoTokenizer

    out = tmp_path / "out"
    overrides = [*QWEN3_HF, f"model.enable_thinking={'null' if thinking is None else str(thinking).lower()}",
                 f"eval.fewshot.k={fewshot}"]
    results = evaluate(load_config(overrides, output_dir=str(out)))
    _, samples = read_results(out)
    tok = AutoTokenizer.from_pretrained(tiny_qwen3_dir)
    rows = {str(ex.key): ex for ex in load_eval_rows(SourceSettings(path=str(_benchmark("ifeval").local_rows()),
                                                                    layout="ifeval")).examples}
    pool = {ex.uid: ex for ex in load_rows(SourceSettings(name="synthetic_train", synthetic="train", layout="ifeval"),
                                           need_completion=True).examples}
    for s in samples:
        validate(s, SAMPLE_SCHEMA)
        demos = [m for d in s["demo_uids"] for m in ({"role": "user", "content": pool[d].prompt},
                                                     {"role": "assistant", "content": pool[d].completion})]
        messages = demos + [{"role": "user", "content": rows[s["key"]].prompt}]
        want = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                       enable_thinking=bool(thinking))
        assert s["rendered_prompt"] == want
        assert len(s["demo_uids"]) == fewshot
        assert ("scored_response" in s) is bool(thinking)  # strip_thinking follows enable_thinking
    g = results["config"]["eval"]["generation"]
    assert g["strip_thinking"] is bool(thinking) and results["fingerprint"]["generation"]["strip_thinking"] is bool(thinking)
    assert ("thinking" in results["counts"]) is bool(thinking)
    if thinking:
        assert sum(results["counts"]["thinking"].values()) == 3


def test_scored_text_after_think():
    assert scored_text("<think>\nplan\n</think>\n\nthe answer", True) == ("the answer", "closed")
    assert scored_text("<think>\nplan that never ends", True) == ("", "unterminated")
    assert scored_text("no think block", True) == ("no think block", "none")
    assert scored_text("<think>\nx\n</think>\n\nkept whole", False) == ("<think>\nx\n</think>\n\nkept whole", "off")


def test_unterminated_thinking_scores_empty_and_is_counted(tiny_qwen3_dir, tmp_path, monkeypatch):
    """With thinking on, a response cut inside its think block is scored as an empty answer (fails a
    'lowercase' instruction it would otherwise pass) and counted as unterminated."""
    from ifdistill.evaluator import generation
    from ifdistill.evaluator.generation import Completion

    texts = iter(["<think>\nhmm", "<think>\nok\n</think>\n\nall lowercase here", "all lowercase, no think"])

    def fake_finalize(ids, request, sampling, tokenizer):  # the responses a thinking model could give
        return Completion(token_ids=(1,), text=next(texts), finish_reason="length")

    monkeypatch.setattr(generation, "finalize", fake_finalize)  # what IFEval's execute cuts responses with
    out = tmp_path / "out"
    results = evaluate(load_config([*QWEN3_HF, "model.enable_thinking=true", "eval.generation.max_new_tokens=1"],
                                      output_dir=str(out)))
    _, samples = read_results(out)
    assert results["counts"]["thinking"] == {"closed": 1, "none": 1, "unterminated": 1}
    assert [s["thinking"] for s in samples] == ["unterminated", "closed", "none"]
    assert [s["scored_response"] for s in samples] == ["", "all lowercase here", "all lowercase, no think"]


def _property_holds(tok, conversations, thinking) -> int:
    """For each (eval example, training messages): the evaluator's prompt ids are a prefix of the
    training ids and the loss mask starts exactly there; returns how many were checked."""
    examples = [ex for ex, _ in conversations]
    prompts = build_prompts(tok, examples, generation=GenerationSettings(enable_thinking=thinking),
                            fewshot=FewShotSettings(k=0), pool=None)
    for p, (ex, messages) in zip(prompts, conversations, strict=True):
        r = render(tok, messages, enable_thinking=thinking)  # as ifdistill.data.build renders training rows
        n = len(p.token_ids)
        assert list(p.token_ids) == r.input_ids[:n], ex.uid
        assert r.prompt_len == n and r.loss_mask[:n] == [0] * n and r.loss_mask[n] == 1, ex.uid
    return len(prompts)


@pytest.mark.parametrize("thinking", [False, True])
def test_prefix_and_mask_on_every_ifeval_prompt(qwen3_tokenizer, thinking):
    rows = load_eval_rows(SourceSettings(path=str(_benchmark("ifeval").local_rows()), layout="ifeval")).examples
    convs = [(ex, ex.to_messages() + [{"role": "assistant", "content": DUMMY}]) for ex in rows]
    assert _property_holds(qwen3_tokenizer, convs, thinking) == 541


@pytest.mark.parametrize("thinking", [False, True])
def test_prefix_and_mask_on_the_synthetic_data(qwen3_tokenizer, thinking):
    convs = []
    for split in ("train", "eval"):
        rows = load_rows(SourceSettings(synthetic=split, layout="ifeval"), need_completion=split == "train").examples
        for ex in rows:
            messages = ex.to_messages() if ex.completion else ex.to_messages() + [{"role": "assistant", "content": DUMMY}]
            convs.append((ex, messages))
    assert _property_holds(qwen3_tokenizer, convs, thinking) == len(convs) > 100


@pytest.mark.parametrize("tokenizer_fixture", ["qwen3_tokenizer", "tiny_tokenizer"])
def test_icl_teacher_view_renders_the_eval_kshot_prompt(request, tokenizer_fixture):
    """One renderer for demonstrations: the ICL teacher's view of an example (its demos as earlier turns)
    starts with exactly the ids of ifdistill-eval's k-shot prompt for the same example and demos, and
    its mask starts where that prompt ends; the demos are chosen by the same rule."""
    tok = request.getfixturevalue(tokenizer_fixture)
    pool = load_rows(SourceSettings(synthetic="train", layout="ifeval"), need_completion=True).examples
    examples = list(pool[:8])
    k, seed = 4, 0
    prompts = build_prompts(tok, examples, generation=GenerationSettings(), fewshot=FewShotSettings(k=k, seed=seed),
                            pool=pool)
    by_uid = {ex.uid: ex for ex in pool}
    for p, ex in zip(prompts, examples):
        demos = [by_uid[u] for u in p.demo_uids]
        assert [d.uid for d in select_demos(pool, k, seed=seed, exclude_key=p.key,
                                            exclude_prompt=ex.prompt)] == list(p.demo_uids)
        teacher = build_icl_pair(tok, ex, demos).teacher
        n = len(p.token_ids)
        assert teacher.input_ids[:n] == list(p.token_ids) and teacher.prompt_len == n, ex.uid
