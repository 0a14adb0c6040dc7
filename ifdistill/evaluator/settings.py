"""Typed schema of the ``eval`` config group and of ``ifdistill-eval``'s own top-level keys.

The ``eval`` section is shared: ``ifdistill-eval`` composes it from ``conf/eval/<name>.yaml`` and a
training run composes the *same* group, so the checkpoint callback can hand its resolved section to
an evaluator process unchanged. It has four parts with one rule each:

- ``data``, ``fewshot``, ``generation`` and the top-level ``backend``/``dtype``/``max_model_len``
  decide *what* is generated and scored; all of them enter ``eval_config_hash``
  (:mod:`ifdistill.evaluator.fingerprint`).
- a benchmark's own section (e.g. ``eval.lmeval``) configures that benchmark; its dataclass lives in the
  benchmark's folder (``ifdistill/benchmarks/<name>/settings.py``: ``SECTIONS``); every field of it enters
  that benchmark's hash (:mod:`ifdistill.evaluator.identity`), and another benchmark's section set away
  from its defaults is refused (:func:`eval_settings`).
- ``runtime`` decides only *how fast and where* (memory, threads, devices, batch size, progress
  bar); nothing in it enters the hash. A setting that could change a response must not go there.

:func:`eval_settings` merges a config node into these dataclasses in struct mode, so an unknown key
or a wrong type fails at start-up naming the key, and returns plain Python objects.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, List, Mapping, Optional

from ifdistill.config import ConfigError, check_schema, register_schema

BACKENDS = ("vllm", "hf")
#: Field metadata of a setting that enters eval_config_hash only away from its default
#: (:func:`ifdistill.evaluator.fingerprint.build_fingerprint`): one added after shipped configurations were
#: hashed, so at its default every existing hash stays what it was.
HASHED_WHEN_SET = "ifdistill_hashed_when_set"
EXPORT_KINDS = ("auto", "adapter", "merged", "model")
#: The sections of an ``ifdistill-eval`` tree; its other top-level keys are :class:`EvalRunSettings`.
TREE_SECTIONS = ("paths", "model", "eval", "hydra")


@dataclass
class SourceSettings:
    """One data source; the fields of :class:`ifdistill.data.sources.SourceSpec` plus a fallback.

    Exactly one of ``path``, ``hf_name``, ``synthetic`` is set. ``fallback_path`` is a local copy of
    a Hugging Face dataset, read when the hub cannot be reached (results.json records that it was).
    """

    name: str = "eval"
    path: Optional[str] = None
    hf_name: Optional[str] = None
    hf_config: Optional[str] = None
    split: str = "train"
    revision: Optional[str] = None
    synthetic: Optional[str] = None
    layout: str = "auto"
    verified_only: bool = False
    max_examples: Optional[int] = None
    fallback_path: Optional[str] = None


@dataclass
class FewShotSettings:
    """k demonstrations per prompt from ``pool`` (see :mod:`ifdistill.evaluator.prompts`)."""

    k: int = 0
    seed: int = 0
    pool: Optional[SourceSettings] = None


@dataclass
class GenerationSettings:
    """Decoding. Defaults follow lm-eval's IFEval task: greedy, 1280 new tokens, no stop strings."""

    chat_template: Optional[str] = None  # null: the tokenizer's own; a string or a .jinja file
    enable_thinking: Optional[bool] = None
    # Score only the text after the last "</think>" (a response that opens <think> and never closes it
    # scores as an empty answer, counted in results.json). null: on exactly when enable_thinking is.
    strip_thinking: Optional[bool] = None
    system_prompt: Optional[str] = None
    greedy: bool = True
    temperature: float = 1.0  # used only when greedy is false
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    max_new_tokens: int = 1280
    stop: List[str] = field(default_factory=list)
    stop_token_ids: List[int] = field(default_factory=list)  # besides the tokenizer's EOS
    seed: int = 0
    # k responses per prompt, each with a seed of its own (the first one's is a single sampled evaluation's):
    # reliable@k beside the mean pass rate (an instruction benchmark's; k > 1 needs greedy: false).
    samples: int = field(default=1, metadata={HASHED_WHEN_SET: True})


@dataclass
class RuntimeSettings:
    """Resources only; never part of eval_config_hash."""

    # vLLM on CPU: the KV cache is sized explicitly, because gpu_memory_utilization is read from a
    # NUMA meminfo that drifts on VMs (../shared/notes/cpu-training-and-vllm.md). null: from the model's
    # per-token KV bytes and the evaluation's sequences (ifdistill/evaluator/kv_cache.py). Ignored on GPU.
    kv_cache_memory_bytes: Optional[int] = None
    gpu_memory_utilization: float = 0.85
    # VLLM_CPU_OMP_THREADS_BIND: auto | nobind | core list ("1", "0-3"). A core list also pins the
    # whole evaluator process (HF backend included) to those cores.
    cpu_threads_bind: str = "auto"
    cpu_reserved: Optional[int] = None  # VLLM_CPU_NUM_OF_RESERVED_CPU
    num_threads: Optional[int] = None  # torch threads of the HF backend (null: torch's default)
    cuda_visible_devices: Optional[str] = None
    tensor_parallel_size: int = 1
    max_num_seqs: Optional[int] = None
    enforce_eager: Optional[bool] = None  # null: true on CPU (no compile at start-up), false on GPU (CUDA graphs)
    # vLLM's engine in the evaluator's own process (VLLM_ENABLE_V1_MULTIPROCESSING=0) instead of an EngineCore
    # and a worker process. null: in process on CPU (two spawns and a graceful shutdown fewer: 49 s -> 27 s
    # per evaluation of the tiny model on 2 cores, samples byte-identical), separate on GPU (vLLM overlaps
    # its scheduling with the model there). A persistent server with a separate engine also watches the
    # engine's processes (its heartbeat thread); in process, the engine dies or hangs with the server.
    engine_in_process: Optional[bool] = None
    # The evaluator's GPU is also training's: a persistent evaluator (ifdistill-eval serve) puts its vLLM
    # engine to sleep (level 1) between checkpoints. Ignored on CPU and by per-checkpoint processes.
    gpu_shared_with_training: bool = False
    hf_batch_size: int = 32
    hf_device: str = "auto"  # auto | cpu | cuda | cuda:N
    progress: bool = True


@dataclass
class EvalSettings:
    """The ``eval`` config section's shared settings (every benchmark's own section is added below)."""

    name: Optional[str] = None  # null: the benchmark's name
    # Which registered benchmark evaluates (ifdistill.benchmarks.registry; null: the default one). W&B
    # logs a run's ``eval`` as ``<benchmark>/*`` on ``<benchmark>/step``, an ``evals.<name>`` section as
    # ``<name>/*`` on ``<name>/step`` (ifdistill.benchmarks.registry.namespace).
    benchmark: Optional[str] = None
    backend: str = "vllm"
    dtype: str = "float32"
    max_model_len: Optional[int] = None  # null: the model's own context length
    data: SourceSettings = field(default_factory=SourceSettings)
    fewshot: FewShotSettings = field(default_factory=FewShotSettings)
    generation: GenerationSettings = field(default_factory=GenerationSettings)
    runtime: RuntimeSettings = field(default_factory=RuntimeSettings)


def benchmark_sections() -> dict[str, type]:
    """The config sections benchmarks add to ``eval`` (``SECTIONS`` of each benchmark folder's ``settings``
    module, :func:`ifdistill.benchmarks.registry.subpackage_modules`), by key."""
    from ifdistill.benchmarks.registry import subpackage_modules

    out: dict[str, type] = {}
    for module in subpackage_modules("settings"):
        out.update(getattr(module, "SECTIONS", {}))
    return out


# The eval section's schema: the shared settings above plus every benchmark's own section.
EvalSettings = dataclasses.make_dataclass(
    "EvalSettings", [(key, cls, field(default_factory=cls)) for key, cls in benchmark_sections().items()],
    bases=(EvalSettings,))
EvalSettings.__module__ = __name__
EvalSettings.__doc__ = "The ``eval`` config section: the shared settings and each benchmark's own section."


@dataclass
class EvalRunSettings:
    """``ifdistill-eval``'s top-level keys besides the ``paths``, ``model`` and ``eval`` sections."""

    task_name: str = "eval"
    adapter_dir: Optional[str] = None  # a PEFT LoRA adapter on top of model.name_or_path
    export_dir: Optional[str] = None  # a training export or any HF model / adapter directory
    export_kind: str = "auto"  # which part of an export: auto | adapter | merged | model
    output_dir: str = "outputs/eval"
    overwrite: bool = False
    # the engine's and libraries' INFO lines and warnings on the console too (always in <output_dir>/console.log)
    verbose: bool = False


register_schema("eval", EvalSettings)


def eval_settings(node: Any) -> EvalSettings:
    """Validate an ``eval`` section (a config node or a dict) and return it as :class:`EvalSettings`."""
    # resolved against its root first: ${model.dtype}, ${paths...}
    settings: EvalSettings = check_schema(EvalSettings, node, "config section 'eval'", resolve=True, as_object=True)
    from ifdistill.benchmarks import registry

    try:
        bench = registry.get(settings.benchmark)
    except registry.UnknownBenchmarkError as err:
        raise ConfigError(f"config section 'eval': {err}") from None
    settings.benchmark = bench.name  # resolved here, so results.json records the effective name
    settings.name = settings.name or bench.name
    if settings.backend not in BACKENDS:
        raise ConfigError(f"config section 'eval': backend must be one of {BACKENDS}, got {settings.backend!r}")
    g = settings.generation
    if g.strip_thinking is None:  # resolved here, so the hash and results.json hold the effective value
        g.strip_thinking = bool(g.enable_thinking)
    if g.max_new_tokens < 1:
        raise ConfigError(f"eval.generation.max_new_tokens must be >= 1, got {g.max_new_tokens}")
    if not g.greedy and g.temperature <= 0:
        raise ConfigError(f"eval.generation.temperature must be > 0 when sampling (greedy: false), got {g.temperature}")
    if g.samples < 1:
        raise ConfigError(f"eval.generation.samples must be >= 1, got {g.samples}")
    if g.samples > 1 and g.greedy:
        raise ConfigError(f"eval.generation.samples={g.samples} needs eval.generation.greedy=false: greedy "
                          "decoding writes the same response every time")
    if g.samples > 1 and not bench.samples_per_prompt:
        raise ConfigError(f"eval.generation.samples={g.samples}: benchmark {bench.name} scores one response per "
                          "prompt; k samples per prompt are for instruction benchmarks")
    if settings.fewshot.k < 0:
        raise ConfigError(f"eval.fewshot.k must be >= 0, got {settings.fewshot.k}")
    if settings.fewshot.k > 0 and settings.fewshot.pool is None:
        raise ConfigError("eval.fewshot.k > 0 needs eval.fewshot.pool (the demonstration source)")
    _refuse_foreign_sections(settings, bench, registry)
    bench.check(settings)  # the benchmark's own section
    return settings


def _refuse_foreign_sections(settings: EvalSettings, bench: Any, registry: Any) -> None:
    """A section of another benchmark, set away from its defaults, would be read by no one: refused,
    naming it (``eval=ifeval_local eval.lmeval.limit=3``)."""
    own = set(bench.sections())
    for key, cls in benchmark_sections().items():
        if key not in own and getattr(settings, key) != cls():
            owner = next((b.name for b in registry.ordered() if key in b.sections()),
                         cls.__module__.split(".")[-2])  # a folder with settings but no registration: its name
            raise ConfigError(f"config section 'eval': eval.{key} is set but is {owner}'s section and eval.benchmark "
                              f"is {bench.name}; remove eval.{key} or select eval.benchmark={owner}")


def run_settings(top: Mapping[str, Any]) -> EvalRunSettings:
    """Validate the top-level keys of an ``ifdistill-eval`` config (besides :data:`TREE_SECTIONS`, their
    values resolved); unknown ones are errors."""
    known = {f.name for f in dataclasses.fields(EvalRunSettings)}
    unknown = sorted(k for k in top if k not in known)
    if unknown:
        raise ConfigError(f"unknown top-level keys {unknown}; known: {sorted(known | set(TREE_SECTIONS))}")
    out: EvalRunSettings = check_schema(EvalRunSettings, dict(top), "ifdistill-eval config", as_object=True)
    if out.export_kind not in EXPORT_KINDS:
        raise ConfigError(f"export_kind must be one of {EXPORT_KINDS}, got {out.export_kind!r}")
    return out


@dataclass
class EvalConfig:
    """An ``ifdistill-eval`` configuration, validated: what :func:`ifdistill.evaluator.run.prepare` takes.

    Made from the Hydra tree once, at the command's edge (:func:`ifdistill.evaluator.cli.eval_config`);
    nothing below it reads the tree."""

    eval: EvalSettings
    run: EvalRunSettings
    model: dict[str, Any]  # the ``model`` section, resolved and checked against its schema


def as_dict(settings: Any) -> dict[str, Any]:
    """A dataclass (tree) as plain JSON-able dicts."""
    return dataclasses.asdict(settings)
