"""LoRA load-path check: the same checkpoint generates the same text live, reloaded and merged.

Why: ../shared/context.md (section 2) lists "merged and unmerged LoRA have produced different
outputs" among the reasons in-training and post-training evaluations rank runs differently. A LoRA
checkpoint can reach generation by three paths, and a bug in any of them (an adapter saved from the
wrong object, a missing module in ``target_modules`` at reload, a wrong scaling when merging, a
dtype cast) silently changes what is evaluated:

- **live**: the in-process ``PeftModel`` the trainer holds (pass it as ``live_model``). Without one
  (the CLI), it is rebuilt as training builds it -- ``get_peft_model`` on a fresh base with the
  adapter's ``LoraConfig``, then the saved weights put in with ``set_peft_model_state_dict`` --
  which exercises the save side but not the trainer's own object;
- **reloaded**: ``PeftModel.from_pretrained(base, adapter_dir)``, what an evaluator loading the
  adapter does;
- **merged**: the reloaded model after ``merge_and_unload()`` (and, when given, an exported merged
  directory loaded as a plain model: **merged_export**).

All paths see the same prompt tokens (one rendering: :func:`ifdistill.data.render.render_prompt`,
the evaluator's), generate greedily with Hugging Face ``generate`` one prompt at a time (no padding,
so batching cannot explain a difference), and are scored by a benchmark that scores free responses
(:meth:`~ifdistill.benchmarks.base.Benchmark.score_responses`; the default benchmark's rows). The report gives
per-prompt token-level agreement (and the first differing token), the metrics of each path and
their differences. The base model without the adapter is generated too: if it agrees with the
adapter everywhere, the adapter has no effect and agreement proves nothing.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ifdistill.benchmarks import registry
from ifdistill.benchmarks.base import short_name


def render_prompts(tokenizer, prompts: Sequence[Mapping[str, Any]], enable_thinking: bool | None = None
                   ) -> list[list[int]]:
    """Prompt token ids, rendered as the evaluator renders them (one user turn, generation prompt)."""
    try:
        from ifdistill.data.render import render_prompt
    except ImportError:  # before the data package landed: the template with the generation prompt
        render_prompt = None
    out = []
    for p in prompts:
        messages = [{"role": "user", "content": p["prompt"]}]
        if render_prompt is not None:
            out.append(render_prompt(tokenizer, messages, enable_thinking=enable_thinking))
        else:
            out.append(list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)))
    return out


def _stop_ids(tokenizer) -> list[int]:
    ids = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    vocab = tokenizer.get_vocab()
    ids += [vocab[t] for t in ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|endoftext|>")
            if t in vocab and vocab[t] not in ids]
    return ids


def greedy_generate(model, tokenizer, prompt_ids: Sequence[Sequence[int]], max_new_tokens: int) -> list[list[int]]:
    """New token ids per prompt (stop token excluded), greedy, one prompt at a time."""
    import torch
    from transformers import GenerationConfig

    stops = _stop_ids(tokenizer)
    config = GenerationConfig(do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=stops,
                              pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stops[0])
    model.eval()
    device = next(model.parameters()).device
    out = []
    with torch.no_grad():
        for ids in prompt_ids:
            x = torch.tensor([list(ids)], device=device)
            y = model.generate(input_ids=x, attention_mask=torch.ones_like(x), generation_config=config)
            new = y[0, x.shape[1]:].tolist()
            while new and new[-1] in stops:
                new.pop()
            out.append(new)
    return out


def _load_base(base_model_dir, dtype: str):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(base_model_dir), dtype=getattr(torch, dtype))


def rebuild_live_model(base_model_dir, adapter_dir, dtype: str = "float32"):
    """A trainer-style ``PeftModel``: ``get_peft_model`` + the saved weights (see module docstring)."""
    from peft import LoraConfig, get_peft_model, load_peft_weights, set_peft_model_state_dict

    config = LoraConfig.from_pretrained(str(adapter_dir))
    model = get_peft_model(_load_base(base_model_dir, dtype), config)
    result = set_peft_model_state_dict(model, load_peft_weights(str(adapter_dir), device="cpu"))
    missing = [k for k in getattr(result, "missing_keys", []) if "lora_" in k]
    if missing:
        raise ValueError(f"{adapter_dir}: adapter weights missing for {len(missing)} LoRA tensors, e.g. {missing[0]}")
    return model


def _first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def check_lora_load_paths(base_model_dir: str | os.PathLike, adapter_dir: str | os.PathLike,
                          prompts: Sequence[Mapping[str, Any]], *, live_model=None,
                          merged_dir: str | os.PathLike | None = None, tokenizer=None,
                          max_new_tokens: int = 64, enable_thinking: bool | None = None,
                          dtype: str = "float32", benchmark: str | None = None) -> dict[str, Any]:
    """Generate with every load path and compare (``prompts``: rows of ``benchmark``'s data, default the
    default benchmark's: ``key``, ``prompt``, ``instruction_id_list``, ``kwargs``). Returns the JSON-able report described in the module
    docstring; ``all_agree`` is True when every path produced the same tokens for every prompt."""
    from peft import PeftModel
    from transformers import AutoTokenizer

    tokenizer = tokenizer or AutoTokenizer.from_pretrained(str(base_model_dir))
    prompt_ids = render_prompts(tokenizer, prompts, enable_thinking)
    tokens: dict[str, list[list[int]]] = {}

    live = live_model if live_model is not None else rebuild_live_model(base_model_dir, adapter_dir, dtype)
    tokens["live"] = greedy_generate(live, tokenizer, prompt_ids, max_new_tokens)
    with live.disable_adapter():
        base_tokens = greedy_generate(live, tokenizer, prompt_ids, max_new_tokens)
    if live_model is None:
        del live

    reloaded = PeftModel.from_pretrained(_load_base(base_model_dir, dtype), str(adapter_dir))
    tokens["reloaded"] = greedy_generate(reloaded, tokenizer, prompt_ids, max_new_tokens)
    merged = reloaded.merge_and_unload()
    tokens["merged"] = greedy_generate(merged, tokenizer, prompt_ids, max_new_tokens)
    del reloaded, merged
    if merged_dir is not None:
        tokens["merged_export"] = greedy_generate(_load_base(merged_dir, dtype), tokenizer, prompt_ids,
                                                  max_new_tokens)

    names = list(tokens)
    texts = {n: [tokenizer.decode(t, skip_special_tokens=True) for t in tokens[n]] for n in names}
    bench = registry.get(benchmark)
    scores = {n: bench.score_responses(prompts, texts[n]) for n in names}
    scored = {n: scores[n][0] for n in names}
    pairs = list(itertools.combinations(names, 2))
    per_prompt = []
    for i, p in enumerate(prompts):
        div = {f"{a}_vs_{b}": _first_divergence(tokens[a][i], tokens[b][i]) for a, b in pairs}
        per_prompt.append({
            "key": str(p.get("key", i)),
            "identical": {pair: d is None for pair, d in div.items()},
            "first_divergence": div,
            "strict_prompt": {n: scored[n][i]["strict_prompt"] for n in names},
            "loose_prompt": {n: scored[n][i]["loose_prompt"] for n in names},
            "adapter_changes_output": tokens["live"][i] != base_tokens[i],
            "responses": {n: texts[n][i] for n in names},
        })
    metrics = {n: scores[n][1] for n in names}
    agreement = {f"{a}_vs_{b}": sum(pp["identical"][f"{a}_vs_{b}"] for pp in per_prompt) for a, b in pairs}
    return {
        "base_model_dir": str(base_model_dir), "adapter_dir": str(adapter_dir),
        "merged_dir": str(merged_dir) if merged_dir is not None else None,
        "live": "given" if live_model is not None else "rebuilt",
        "n_prompts": len(prompts), "max_new_tokens": max_new_tokens, "paths": names,
        "agreement": {pair: {"identical": k, "fraction": k / len(prompts) if prompts else 1.0}
                      for pair, k in agreement.items()},
        "adapter_changes_output": sum(pp["adapter_changes_output"] for pp in per_prompt),
        "metrics": metrics,
        "benchmark": bench.name,
        "metric_differences": {f"{a}_vs_{b}": {m: metrics[b][m] - metrics[a][m] for m in metrics[a]}
                               for a, b in pairs},
        "all_agree": all(k == len(prompts) for k in agreement.values()),
        "per_prompt": per_prompt,
    }


def load_prompts(path: str | os.PathLike, limit: int | None = None) -> list[dict[str, Any]]:
    """IFEval-format rows (``key``, ``prompt``, ``instruction_id_list``, ``kwargs``) from a JSONL file."""
    rows = []
    with open(path) as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
                if limit is not None and len(rows) >= limit:
                    break
    return rows


def render_markdown(result: dict[str, Any]) -> str:
    lines = ["# LoRA load-path check", "",
             f"- base: `{result['base_model_dir']}`", f"- adapter: `{result['adapter_dir']}`",
             f"- live model: {result['live']}; {result['n_prompts']} prompts, greedy, "
             f"max_new_tokens {result['max_new_tokens']}",
             f"- the adapter changes the output on {result['adapter_changes_output']} of "
             f"{result['n_prompts']} prompts (0 would make agreement meaningless)", "",
             ]
    metrics = list(next(iter(result["metrics"].values()), {}))
    lines += ["| paths | identical responses | " + " | ".join(f"Δ {short_name(m)}" for m in metrics) + " |",
              "|---|---|" + "---|" * len(metrics)]
    for pair, a in result["agreement"].items():
        d = result["metric_differences"][pair]
        lines.append(f"| {pair.replace('_vs_', ' vs ')} | {a['identical']}/{result['n_prompts']} | "
                     + " | ".join(f"{100 * d[m]:+.2f}" for m in metrics) + " |")
    lines += ["", "**All paths agree.**" if result["all_agree"] else "**The load paths disagree** on:", ""]
    for pp in result["per_prompt"]:
        bad = {k: v for k, v in pp["first_divergence"].items() if v is not None}
        if bad:
            lines.append(f"- prompt {pp['key']}: " + ", ".join(f"{k.replace('_vs_', ' vs ')} from token {v}"
                                                              for k, v in bad.items()))
    return "\n".join(lines).rstrip() + "\n"


def write(result: dict[str, Any], out_dir: str | os.PathLike) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "lora_check.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "lora_check.md").write_text(render_markdown(result))
    return [out / "lora_check.json", out / "lora_check.md"]
