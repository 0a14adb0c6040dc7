"""vLLM backend: token-id prompts, explicit stop ids, LoRA through ``LoRARequest``; CPU or GPU.

Choices and why (../shared/notes/cpu-training-and-vllm.md has the measurements):

- Prompts go in as ``TokensPrompt`` ids rendered by ifdistill, never through ``LLM.chat``, so vLLM
  and the HF backend see identical ids.
- ``generation_config="vllm"``: vLLM ignores the model's generation_config.json (which can carry
  sampling defaults and extra EOS ids); the evaluator passes every setting explicitly.
- On CPU the KV cache is sized by ``runtime.kv_cache_memory_bytes``, or when that is null from the
  model and the evaluation's sequences (:mod:`ifdistill.evaluator.kv_cache`); never by vLLM's
  utilisation-based size (read from a NUMA meminfo that drifts on VMs; start-up skips the profiling
  run). Threads are set by
  ``VLLM_CPU_OMP_THREADS_BIND`` / ``VLLM_CPU_NUM_OF_RESERVED_CPU``, set before vLLM is imported --
  the engine and worker processes it spawns read them at start.
- An adapter is served by the base engine started with ``enable_lora`` and ``max_lora_rank`` = the
  adapter's rank rounded up to a size vLLM supports; the same engine then serves the base model too.
- Prefix caching is on (vLLM's default, stated explicitly): the engine reuses the KV blocks of shared
  prompt prefixes *within* an evaluation. An engine that serves several checkpoints
  (:mod:`ifdistill.evaluator.serve`) must clear it whenever the weights or the adapter change
  (:meth:`VLLMBackend.reset_caches`), since a block's key is its token ids, not the weights.
- vLLM spawns an EngineCore and a worker process: callers must run under ``if __name__ == "__main__"``.
  On CPU the engine runs in the caller's process instead (``runtime.engine_in_process``): on two cores
  the two spawns (each importing vLLM and torch) and the graceful shutdown (the EngineCore is
  force-killed after vLLM's 5 s grace) were 22 of an evaluation's 49 s.
"""

from __future__ import annotations

import hashlib
import logging
import os
from typing import Any, Optional, Sequence

from ifdistill.evaluator.errors import EvaluatorError
from ifdistill.evaluator.generation import Request, Sampling
from ifdistill.startup_heap import settle
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


def _refresh_embeddings(worker) -> int:
    """In each vLLM worker, after ``reload_weights``: redo the post-load processing of every embedding and
    LM-head layer from its current weight (on CPU: the prepacked GEMM of a tied head); returns how many."""
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    count = 0
    for module in worker.model_runner.get_model().modules():
        if isinstance(module, VocabParallelEmbedding) and getattr(module, "quant_method", None) is not None:
            module.quant_method.process_weights_after_loading(module)
            count += 1
    return count


class VLLMBackend:
    name = "vllm"

    def __init__(self, model_dir: str, *, tokenizer_dir: str, dtype: str, max_model_len: int, seed: int,
                 runtime: RuntimeSettings, lora_rank: Optional[int] = None, persistent: bool = False,
                 sequence_tokens: Sequence[int] = (), sampled: bool = False):
        """``sequence_tokens``: prompt + new-token budget of each sequence to generate (sizes an automatic
        KV cache on CPU). ``persistent``: the engine serves several checkpoints (:mod:`ifdistill.evaluator.serve`): every
        adapter request gets a new id, weights can be reloaded in place (which sends a function to the
        worker: vLLM's pickle-based serialisation between its own local processes is allowed), and on
        GPU with ``runtime.gpu_shared_with_training`` the engine can sleep between checkpoints. ``sampled``: it
        will sample (``greedy: false``, a seed per request); on CPU it then runs without chunked prefill, as
        vLLM-CPU itself runs MLA models: a request prefilled in parts has its generator rewound with a
        CUDA-only call (``Generator.set_offset``) that a CPU generator refuses (``CPU Generator does not use
        offset``), so no request may be prefilled in parts (every prompt fits one step's token budget)."""
        apply_cpu_environment(runtime)
        if persistent:
            os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # read by the engine process at its start
        from vllm import LLM
        from vllm.platforms import current_platform

        self.model_dir = model_dir
        self.on_cpu = current_platform.is_cpu()
        in_process = self.on_cpu if runtime.engine_in_process is None else runtime.engine_in_process
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0" if in_process else "1"  # read when the engine starts
        self.max_lora_rank = lora_rank_slot(lora_rank) if lora_rank else None
        kwargs = dict(model=model_dir, tokenizer=tokenizer_dir, dtype=dtype, max_model_len=max_model_len,
                      seed=seed, generation_config="vllm", enable_prefix_caching=True,
                      enforce_eager=self.on_cpu if runtime.enforce_eager is None else runtime.enforce_eager,
                      tensor_parallel_size=runtime.tensor_parallel_size)
        if self.on_cpu:
            kv_bytes = runtime.kv_cache_memory_bytes
            if not kv_bytes:
                from ifdistill.evaluator.kv_cache import auto_kv_cache_bytes

                kv_bytes = auto_kv_cache_bytes(model_dir, dtype, max_model_len=max_model_len,
                                               sequence_tokens=sequence_tokens, max_num_seqs=runtime.max_num_seqs)
            kwargs["kv_cache_memory_bytes"] = int(kv_bytes)
        else:
            kwargs["gpu_memory_utilization"] = runtime.gpu_memory_utilization
            if persistent and runtime.gpu_shared_with_training:  # GPU only: vLLM-CPU has no sleep mode
                kwargs["enable_sleep_mode"] = True
        if self.on_cpu and sampled:
            from vllm.config import SchedulerConfig

            kwargs.update(enable_chunked_prefill=False, max_num_batched_tokens=max(
                max_model_len, SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS))
        self.sampled = sampled
        if runtime.max_num_seqs:
            kwargs["max_num_seqs"] = runtime.max_num_seqs
        if self.max_lora_rank:
            kwargs.update(enable_lora=True, max_lora_rank=self.max_lora_rank, max_loras=1)
        self.settings = {k: v for k, v in kwargs.items() if k not in ("model", "tokenizer")}
        self.settings["engine_in_process"] = in_process  # results.json's backend record
        self.sleep_mode = bool(kwargs.get("enable_sleep_mode"))
        self.asleep = False
        self._lora_serial: Optional[int] = 0 if persistent else None  # persistent: one fresh adapter id per request
        log.info("starting vLLM (%s): %s", "in process" if in_process else "engine process", self.settings)
        settle()  # before the engine's own gc.collect() calls (ifdistill.startup_heap)
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

        if self.on_cpu and not sampling.greedy and not self.sampled:
            raise EvaluatorError("this vLLM-CPU engine was started for greedy decoding; sampling needs an engine "
                                 "started to sample (VLLMBackend(sampled=True): no chunked prefill)")
        params = [SamplingParams(
            n=1, temperature=0.0 if sampling.greedy else sampling.temperature,
            top_p=1.0 if sampling.greedy else sampling.top_p, top_k=0 if sampling.greedy else sampling.top_k,
            seed=None if sampling.greedy else r.seed, max_tokens=r.max_tokens,
            stop=list(sampling.stop) or None, stop_token_ids=list(sampling.stop_token_ids),
            repetition_penalty=1.0, skip_special_tokens=True) for r in requests]
        prompts = [TokensPrompt(prompt_token_ids=list(r.token_ids)) for r in requests]
        outputs = self._run(prompts, params, adapter_dir, progress)
        return [list(o.outputs[0].token_ids) for o in outputs]

    def loglikelihood(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], *, adapter_dir: Optional[str] = None,
                      progress: bool = True) -> list[tuple[float, bool]]:
        """``(sum of log p(continuation | context), all argmax)`` per ``(context, continuation)`` id pair from
        vLLM's prompt log-probabilities of ``context + continuation`` (raw logits, before any sampling
        processor; ``prompt_logprobs=0`` returns each prompt token's own log-prob and rank). One token is
        generated per request because vLLM needs a positive budget; it is ignored."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(n=1, temperature=0.0, max_tokens=1, prompt_logprobs=0, detokenize=False)
        prompts = [TokensPrompt(prompt_token_ids=list(ctx) + list(cont)) for ctx, cont in pairs]
        outputs = self._run(prompts, params, adapter_dir, progress)
        out = []
        for o, (ctx, cont) in zip(outputs, pairs, strict=True):
            total, greedy = 0.0, True
            for pos, token in enumerate(cont, start=len(ctx)):
                lp = o.prompt_logprobs[pos][token]
                total += lp.logprob
                greedy = greedy and lp.rank == 1
            out.append((total, greedy))
        return out

    def _run(self, prompts: list, params: Any, adapter_dir: Optional[str], progress: bool) -> list:
        """``LLM.generate`` with the adapter's ``LoRARequest`` (a persistent engine: a fresh id, unloaded after)."""
        from vllm.lora.request import LoRARequest

        lora = None
        if adapter_dir:
            if not self.max_lora_rank:
                raise ValueError("this vLLM engine was started without LoRA support")
            if self._lora_serial is None:
                lora = LoRARequest(f"adapter-{lora_id(adapter_dir)}", lora_id(adapter_dir), adapter_dir)
            else:
                self._lora_serial += 1
                lora = LoRARequest(f"checkpoint-{self._lora_serial}", self._lora_serial, adapter_dir)
        try:
            return self.llm.generate(prompts, params, lora_request=lora, use_tqdm=progress)
        finally:
            if lora is not None and self._lora_serial is not None:
                self.llm.llm_engine.remove_lora(lora.lora_int_id)  # its slot and cached weights go now

    # -- serving several checkpoints from one engine (ifdistill.evaluator.serve) --------------------
    def load_weights(self, model_dir: str) -> None:
        """Load the full weights in ``model_dir`` into the running engine, in place (same architecture).

        vLLM's worker ``reload_weights`` reads the safetensors of ``model_dir`` through the same loader
        as at start-up (checkpoint format: names mapped, QKV / gate-up fused, tied embeddings skipped)
        and then drops the LoRA, encoder and multimodal state derived from the old weights. A layer that
        receives no weights of its own is left as it was -- a tied LM head shares the embedding's
        parameter (updated) but on CPU keeps a GEMM kernel prepacked from the *old* values, so every
        embedding layer's post-load processing is run again (:func:`_refresh_embeddings`)."""
        self.llm.collective_rpc("reload_weights", kwargs={"weights_path": model_dir, "is_checkpoint_format": True})
        self.llm.collective_rpc(_refresh_embeddings)
        self.model_dir = model_dir

    def reset_caches(self) -> None:
        """Forget everything computed with earlier weights: the prefix cache (KV blocks keyed by token
        ids only), and the encoder and multimodal caches (empty for text models; cleared for safety)."""
        if not self.llm.reset_prefix_cache():
            raise RuntimeError("vLLM refused to reset its prefix cache (requests still running)")
        self.llm.reset_mm_cache()
        self.llm.llm_engine.reset_encoder_cache()

    def sleep(self) -> None:
        """GPU, engine started with ``sleep_mode``: level 1 between checkpoints -- the weights are
        copied to CPU memory and the KV cache is discarded, so training gets back all the GPU memory
        but CUDA graphs and the allocator's pool bookkeeping. Never called on CPU."""
        if self.sleep_mode and not self.on_cpu and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def wake_up(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False

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
