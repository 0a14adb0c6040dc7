"""lm-eval tasks as one more benchmark behind :func:`ifdistill.evaluator.run.prepare` / ``execute``.

:func:`prepare_tasks` (phase 1, no engine yet): lm-eval's ``TaskManager`` (its own task folder plus
``eval.lmeval.include_path``) builds each task -- reading its dataset, from a local file or the hub
cache -- applies ``num_fewshot`` and the few-shot seed as lm-eval's ``simple_evaluate`` does, and
renders every request with :class:`~ifdistill.benchmarks.lmeval.model.EngineLM`'s tokenizer and chat
template. ``eval_config_hash`` is computed from what was rendered (:func:`fingerprint`). An unknown
task, a dataset that cannot be read (offline hub, missing file) and a document without a field the
task reads are :class:`~ifdistill.evaluator.errors.EvaluatorError` naming the task: exit code 2.

:func:`execute_tasks` (phase 2): the same task objects, few-shot samplers re-seeded, go through lm-eval's
``evaluate`` with the engine attached; the rendered requests are checked to equal phase 1's, and
results.json / samples.jsonl are published by the evaluator's own writer.

Importing this module imports lm-eval (never a dataset); :mod:`ifdistill.evaluator.run` imports it
only for ``benchmark: lmeval``.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import importlib.metadata
import json
import logging
import random
import time
from pathlib import Path
from typing import Any, Optional

from ifdistill.benchmarks.lmeval.model import EngineLM
from ifdistill.evaluator.errors import EvaluatorError
from ifdistill.evaluator.fingerprint import canonical_sha256, config_hash, prompt_ids_sha256
from ifdistill.evaluator.model_source import ModelSource, model_identity
from ifdistill.evaluator.plan import PlanBase
from ifdistill.evaluator.settings import EvalRunSettings, EvalSettings

log = logging.getLogger(__name__)

#: Bump when EngineLM's tokenisation, cutting or decoding of responses changes.
PROTOCOL_VERSION = "lmeval-1"
# simple_evaluate's defaults for the global generators (a task's own sampling may read them)
RANDOM_SEED, NUMPY_SEED, TORCH_SEED = 0, 1234, 1234


@dataclasses.dataclass(kw_only=True)
class LMEvalPlan(PlanBase):
    """Everything decided before an engine starts; ``eval_config_hash`` is final here."""

    lm: EngineLM
    tasks: dict[str, Any]  # lm-eval's TaskDict: tasks, groups, group_map
    requests: dict[str, str]  # task -> sha256 of its rendered requests


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:300] if text else ''}"


@functools.lru_cache(maxsize=4)
def _manager(include_path: tuple[str, ...]) -> Any:
    """lm-eval's index of task YAMLs (its own 6-9 s scan of every task folder), once per process and include
    path, kept on disk between processes (:mod:`~ifdistill.benchmarks.lmeval.task_index`): the persistent
    server prepares every checkpoint's evaluation with the same one. It indexes names and files only;
    each :func:`_load_tasks` builds fresh task objects from the YAMLs."""
    from ifdistill.benchmarks.lmeval.task_index import task_manager

    return task_manager(include_path)


def _load_tasks(settings: EvalSettings) -> dict[str, Any]:
    lm = settings.lmeval
    for folder in lm.include_path:
        if not Path(folder).is_dir():
            raise EvaluatorError(f"eval.lmeval.include_path {folder}: no such folder")
    manager = _manager(tuple(str(p) for p in lm.include_path))
    loaded: dict[str, Any] = {"tasks": {}, "groups": {}, "group_map": {}}
    for name in lm.tasks:
        if name not in manager.all_tasks:
            close = difflib.get_close_matches(name, manager.all_tasks, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            where = f" or eval.lmeval.include_path {list(lm.include_path)}" if lm.include_path else ""
            raise EvaluatorError(f"lm-eval task {name!r}: unknown to lm-eval {_version()}{where}{hint}")
        try:
            one = manager.load([name])
        except (ImportError, AssertionError) as err:  # a task module's own check of its extra packages
            raise EvaluatorError(f"lm-eval task {name!r}: needs packages this environment lacks ({_one_line(err)})") from None
        except Exception as err:  # noqa: BLE001 - a dataset that cannot be read: hub offline, missing file, ...
            raise EvaluatorError(f"lm-eval task {name!r}: its dataset cannot be read ({_one_line(err)})") from None
        for key in loaded:
            loaded[key].update(one.get(key) or {})
    return loaded


def _configure(tasks: dict[str, Any], settings: EvalSettings) -> None:
    """``num_fewshot`` and the few-shot seed, with ``simple_evaluate``'s rules: a task fixed at 0 shots stays
    at 0; a task without a default gets 0."""
    import numpy as np
    import torch

    random.seed(RANDOM_SEED)
    np.random.seed(NUMPY_SEED)
    torch.manual_seed(TORCH_SEED)
    for task in tasks.values():
        default = task.get_config("num_fewshot")
        if settings.lmeval.num_fewshot is not None and default != 0:
            task.set_config(key="num_fewshot", value=settings.lmeval.num_fewshot)
        elif default is None:
            task.set_config(key="num_fewshot", value=0)
        task.set_fewshot_seed(seed=settings.lmeval.fewshot_seed)


def _build_requests(tasks: dict[str, Any], settings: EvalSettings, lm: EngineLM) -> None:
    from lm_eval.evaluator_utils import get_sample_size

    s = settings.lmeval
    for name, task in tasks.items():
        try:
            task.build_all_requests(
                limit=get_sample_size(task, s.limit), rank=0, world_size=1, cache_requests=False,
                rewrite_requests_cache=False, system_instruction=settings.generation.system_prompt,
                apply_chat_template=s.apply_chat_template, fewshot_as_multiturn=s.fewshot_as_multiturn,
                chat_template=lm.apply_chat_template if s.apply_chat_template else None,
                tokenizer_name=lm.tokenizer_name if s.apply_chat_template else "")
        except Exception as err:  # noqa: BLE001 - jinja2's StrictUndefined, KeyError: a field the task reads
            raise EvaluatorError(f"lm-eval task {name!r}: a document lacks what the task reads ({_one_line(err)})") from None
        if not task.instances:
            raise EvaluatorError(f"lm-eval task {name!r}: no documents to evaluate")


def _stable(obj: Any) -> Any:
    """A task config as JSON without addresses: functions by module and name, other objects by type."""
    if isinstance(obj, dict):
        return {str(k): _stable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_stable(v) for v in obj]
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    if callable(obj) and hasattr(obj, "__qualname__"):
        return f"{getattr(obj, '__module__', '?')}.{obj.__qualname__}"
    return type(obj).__name__


def requests_digest(task: Any, lm: EngineLM) -> str:
    """sha256 of a task's rendered requests: type, document, repeat index, arguments, and the context's ids."""
    h = hashlib.sha256()
    for inst in task.instances:
        h.update(json.dumps([inst.request_type, inst.doc_id, inst.idx, _stable(inst.args)],
                            ensure_ascii=False).encode() + b"\n")
    contexts = {inst.args[0] for inst in task.instances if inst.request_type != "loglikelihood_rolling"}
    h.update(prompt_ids_sha256(lm.tok_encode(c) for c in sorted(contexts)).encode())
    return h.hexdigest()


def _docs_sha256(task: Any) -> str:
    docs = {inst.doc_id: inst.doc for inst in task.instances}
    return canonical_sha256([json.loads(json.dumps(docs[i], default=str, sort_keys=True)) for i in sorted(docs)])


def _version() -> str:
    return importlib.metadata.version("lm_eval")


def fingerprint(settings: EvalSettings, plan_tasks: dict[str, Any], digests: dict[str, str], *, chat_template: str,
                stop_token_ids: list[int], context_len: int) -> dict[str, Any]:
    """What can change a score: lm-eval's version, each task's resolved config (a local dataset's file paths
    left out: its documents are hashed), documents and rendered requests (the few-shot draw is in them),
    the evaluator's template, thinking flag, stop ids, seed. Every field of ``eval.lmeval`` enters as
    ``lmeval.<field>`` by the core (:mod:`ifdistill.evaluator.identity`)."""
    tasks = {}
    for name, task in plan_tasks["tasks"].items():
        config = _stable(task.dump_config())
        # where a local dataset lies is not what it holds (docs_sha256): a moved copy keeps the hash
        (config.get("dataset_kwargs") or {}).pop("data_files", None)
        tasks[name] = {"config_sha256": canonical_sha256(config), "num_fewshot": task.get_config("num_fewshot"),
                       "output_type": task.get_config("output_type"), "docs_sha256": _docs_sha256(task),
                       "num_docs": len({i.doc_id for i in task.instances}), "requests_sha256": digests[name]}
    return {
        "protocol_version": PROTOCOL_VERSION,
        "lm_eval_version": _version(),
        "tasks": tasks,
        "groups": {g: sorted(children) for g, children in (plan_tasks.get("group_map") or {}).items()},
        "template": {"chat_template_sha256": hashlib.sha256(chat_template.encode()).hexdigest(),
                     "enable_thinking": settings.generation.enable_thinking,
                     "strip_thinking": settings.generation.strip_thinking,
                     "system_prompt": settings.generation.system_prompt},
        "generation": {"seed": settings.generation.seed, "stop_token_ids": sorted(int(i) for i in stop_token_ids)},
        "backend": settings.backend,
        "dtype": settings.dtype,
        "context_len": int(context_len),
    }


def prepare_tasks(settings: EvalSettings, run: EvalRunSettings, model_cfg: dict[str, Any], source: ModelSource, *,
                  tokenizer: Any, chat_template: str, context_len: int, stop_token_ids: list[int],
                  t0: float) -> LMEvalPlan:
    """Phase 1 for ``benchmark: lmeval`` (module docstring)."""
    lm = EngineLM(tokenizer, chat_template=chat_template, enable_thinking=settings.generation.enable_thinking,
                  max_length=context_len - 1, stop_token_ids=stop_token_ids, seed=settings.generation.seed,
                  name=str(source.tokenizer_dir), strip_thinking=bool(settings.generation.strip_thinking))
    tasks = _load_tasks(settings)
    _configure(tasks["tasks"], settings)
    _build_requests(tasks["tasks"], settings, lm)
    digests = {name: requests_digest(task, lm) for name, task in tasks["tasks"].items()}
    fp = fingerprint(settings, tasks, digests, chat_template=chat_template, stop_token_ids=stop_token_ids,
                     context_len=context_len)
    return LMEvalPlan(settings=settings, run=run, model_cfg=model_cfg, source=source, tokenizer=tokenizer,
                      chat_template=chat_template, context_len=context_len, lm=lm, tasks=tasks, requests=digests,
                      fingerprint=fp, eval_config_hash=config_hash(fp),
                      model_identity=model_identity(source, chat_template), prepare_s=time.perf_counter() - t0)


def execute_and_publish(plan: LMEvalPlan, backend: Any, *, own: bool, runtime: Optional[dict[str, Any]],
                        t0: float) -> dict[str, Any]:
    """Phase 2 for ``benchmark: lmeval``: lm-eval's ``evaluate`` on the engine, then results.json and
    samples.jsonl through the evaluator's writer; returns results.json's content. ``own``: close
    ``backend`` afterwards (the caller started it for this evaluation)."""
    from lm_eval.evaluator import evaluate

    from ifdistill.benchmarks.lmeval import output
    from ifdistill.evaluator.results import package_versions, publish

    s = plan.settings.lmeval
    _configure(plan.tasks["tasks"], plan.settings)  # the same few-shot draw as in prepare
    t1 = time.perf_counter()
    plan.lm.attach(backend, adapter_dir=plan.source.adapter_dir, progress=plan.settings.runtime.progress)
    try:
        res = evaluate(lm=plan.lm, task_dict=plan.tasks, limit=s.limit, bootstrap_iters=s.bootstrap_iters,
                       log_samples=True, system_instruction=plan.settings.generation.system_prompt,
                       apply_chat_template=s.apply_chat_template, fewshot_as_multiturn=s.fewshot_as_multiturn)
        backend_info = {"name": backend.name, "settings": dict(getattr(backend, "settings", {}))}
    finally:
        plan.lm.attach(None, adapter_dir=None, progress=False)
        if own:
            backend.close()
    t2 = time.perf_counter()
    for name, task in plan.tasks["tasks"].items():
        if requests_digest(task, plan.lm) != plan.requests[name]:
            raise RuntimeError(f"lm-eval task {name!r} rendered other requests than in prepare (a bug)")
    names = list(plan.tasks["tasks"])
    samples = output.sample_rows(res, names)
    docs = len(samples)
    results = plan.results_record(
        scores={"metrics": output.metrics_of(res), "tasks": output.task_records(res),
                "counts": {"num_documents": docs, "generated_tokens": plan.lm.generated_tokens,
                           "finish_reasons": dict(sorted(plan.lm.finish_reasons.items())),
                           "loglikelihood_rows": plan.lm.scored_rows,
                           "requests": {name: len(task.instances) for name, task in plan.tasks["tasks"].items()}}},
        data={"eval": {name: {"dataset_path": task.get_config("dataset_path"),
                              "dataset_name": task.get_config("dataset_name"),
                              "docs_sha256": plan.fingerprint["tasks"][name]["docs_sha256"]}
                       for name, task in plan.tasks["tasks"].items()}, "fewshot_pool": None},
        backend=backend_info, runtime=runtime, versions={**package_versions(), "lm_eval": _version()},
        timings={"prepare_s": round(plan.prepare_s, 3), "load_s": round(t1 - t0, 3),
                 "evaluate_s": round(t2 - t1, 3), "total_s": round(plan.prepare_s + time.perf_counter() - t0, 3),
                 "documents_per_s": round(docs / max(t2 - t1, 1e-9), 2)})
    publish(plan.run.output_dir, results, samples, overwrite=plan.run.overwrite)
    log.info("eval %s -> %s: %s (%d documents)", plan.eval_config_hash, plan.run.output_dir,
             summary_line(results), docs)
    return results


def summary_line(results: dict[str, Any], limit: Optional[int] = 6) -> str:
    """The first metrics of an lm-eval results.json, for logs."""
    items = [(k, v) for k, v in results["metrics"].items() if not k.endswith("_stderr")]
    return " | ".join(f"{k} {v:.4f}" for k, v in items[:limit] if isinstance(v, (int, float)))
