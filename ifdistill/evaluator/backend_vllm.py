"""vLLM backend: token-id prompts, explicit stop ids, LoRA through ``LoRARequest``; CPU or GPU.

Choices and why (../shared/notes/cpu-training-and-vllm.md has the measurements):

- Prompts go in as ``TokensPrompt`` ids rendered by ifdistill, never through ``LLM.chat``, so vLLM
  and the HF backend see identical ids.
- ``generation_config="vllm"``: vLLM ignores the model's generation_config.json (which can carry
  sampling defaults and extra EOS ids); the evaluator passes every setting explicitly.
- On CPU the KV cache is sized by ``runtime.kv_cache_memory_bytes`` (the utilisation-based size is
  read from a NUMA meminfo that drifts on VMs, and start-up skips the profiling run) and threads by
  ``VLLM_CPU_OMP_THREADS_BIND`` / ``VLLM_CPU_NUM_OF_RESERVED_CPU``, set before vLLM is imported --
  the engine and worker processes it spawns read them at start.
- An adapter is served by the base engine started with ``enable_lora`` and ``max_lora_rank`` = the
  adapter's rank rounded up to a size vLLM supports; the same engine then serves the base model too.
- vLLM spawns an EngineCore and a worker process: callers must run under ``if __name__ == "__main__"``.
"""

from __future__ import annotations

import hashlib
import logging
import os
from typing import Optional, Sequence

from ifdistill.evaluator.generation import Request, Sampling
from ifdistill.evaluator.model_source import ModelSource
from ifdistill.evaluator.settings import RuntimeSettings

log = logging.getLogger(__name__)

LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vllm.config.lora.MaxLoRARanks


def lora_rank_slot(rank: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that holds an adapter of rank ``rank``."""
    for slot in LORA_RANKS:
        if rank <= slot:
            return slot
    raise ValueError(f"LoRA rank {rank} exceeds vLLM's largest max_lora_rank {LORA_RANKS[-1]}")


def lora_id(adapter_dir: str) -> int:
    """A stable id per adapter path: vLLM caches adapters by id, so two adapters must never share one."""
    return 1 + int.from_bytes(hashlib.sha256(adapter_dir.encode()).digest()[:4], "little") % (1 << 30)


def apply_cpu_environment(runtime: RuntimeSettings) -> None:
    """Thread settings vLLM-CPU reads from the environment (before its engine processes start)."""
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = runtime.cpu_threads_bind
    if runtime.cpu_reserved is not None:
        os.environ["VLLM_CPU_NUM_OF_RESERVED_CPU"] = str(runtime.cpu_reserved)


class VLLMBackend:
    name = "vllm"

    def __init__(self, model_dir: str, *, tokenizer_dir: str, dtype: str, max_model_len: int, seed: int,
                 runtime: RuntimeSettings, lora_rank: Optional[int] = None):
        apply_cpu_environment(runtime)
        from vllm import LLM
        from vllm.platforms import current_platform

        self.model_dir = model_dir
        self.on_cpu = current_platform.is_cpu()
        self.max_lora_rank = lora_rank_slot(lora_rank) if lora_rank else None
        kwargs = dict(model=model_dir, tokenizer=tokenizer_dir, dtype=dtype, max_model_len=max_model_len,
                      seed=seed, generation_config="vllm",
                      enforce_eager=self.on_cpu if runtime.enforce_eager is None else runtime.enforce_eager,
                      tensor_parallel_size=runtime.tensor_parallel_size)
        if self.on_cpu:
            if not runtime.kv_cache_memory_bytes:
                raise ValueError("vLLM on CPU needs eval.runtime.kv_cache_memory_bytes (e.g. 268435456)")
            kwargs["kv_cache_memory_bytes"] = int(runtime.kv_cache_memory_bytes)
        else:
            kwargs["gpu_memory_utilization"] = runtime.gpu_memory_utilization
        if runtime.max_num_seqs:
            kwargs["max_num_seqs"] = runtime.max_num_seqs
        if self.max_lora_rank:
            kwargs.update(enable_lora=True, max_lora_rank=self.max_lora_rank, max_loras=1)
        self.settings = {k: v for k, v in kwargs.items() if k not in ("model", "tokenizer")}
        log.info("starting vLLM: %s", self.settings)
        self.llm = LLM(**kwargs)

    def serves(self, source: ModelSource) -> bool:
        """Whether this engine can generate for ``source`` (same base; LoRA slot big enough)."""
        if source.model_dir != self.model_dir:
            return False
        if source.adapter_dir:
            return bool(self.max_lora_rank) and (source.lora_rank or 0) <= self.max_lora_rank
        return True

    def generate(self, requests: Sequence[Request], sampling: Sampling, *, adapter_dir: Optional[str] = None,
                 progress: bool = True) -> list[list[int]]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.lora.request import LoRARequest

        params = [SamplingParams(
            n=1, temperature=0.0 if sampling.greedy else sampling.temperature,
            top_p=1.0 if sampling.greedy else sampling.top_p, top_k=0 if sampling.greedy else sampling.top_k,
            seed=None if sampling.greedy else r.seed, max_tokens=r.max_tokens,
            stop=list(sampling.stop) or None, stop_token_ids=list(sampling.stop_token_ids),
            repetition_penalty=1.0, skip_special_tokens=True) for r in requests]
        prompts = [TokensPrompt(prompt_token_ids=list(r.token_ids)) for r in requests]
        lora = LoRARequest(f"adapter-{lora_id(adapter_dir)}", lora_id(adapter_dir), adapter_dir) if adapter_dir else None
        if lora is not None and not self.max_lora_rank:
            raise ValueError("this vLLM engine was started without LoRA support")
        outputs = self.llm.generate(prompts, params, lora_request=lora, use_tqdm=progress)
        return [list(o.outputs[0].token_ids) for o in outputs]

    def close(self) -> None:
        llm, self.llm = getattr(self, "llm", None), None
        if llm is None:
            return
        try:
            llm.llm_engine.engine_core.shutdown()
        except Exception as err:  # best effort: the processes also end with ours
            log.debug("vLLM shutdown: %s", err)
        del llm
        import gc

        gc.collect()
