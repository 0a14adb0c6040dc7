"""Generate greedily with vLLM from token-id prompts in a separate process; print JSON to stdout.

Usage: python vllm_generate.py MODEL_DIR PROMPTS_JSON [--lora ADAPTER_DIR]
vLLM spawns an engine and a worker process, so it must start under ``if __name__ == "__main__"``.
"""

import argparse
import json
import os


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("prompts", help="JSON list of token-id lists")
    ap.add_argument("--lora")
    ap.add_argument("--max-tokens", type=int, default=16)
    args = ap.parse_args()
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "auto")
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.lora.request import LoRARequest

    llm = LLM(model=args.model, dtype="float32", max_model_len=1024, enforce_eager=True, seed=0,
              kv_cache_memory_bytes=64 << 20, enable_lora=bool(args.lora), max_lora_rank=8)
    prompts = [TokensPrompt(prompt_token_ids=ids) for ids in json.loads(args.prompts)]
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True)
    lora = LoRARequest("adapter", 1, args.lora) if args.lora else None
    outs = llm.generate(prompts, params, lora_request=lora, use_tqdm=False)
    print("RESULT " + json.dumps([list(o.outputs[0].token_ids) for o in outs]))


if __name__ == "__main__":
    main()
