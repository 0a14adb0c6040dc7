"""The judged benchmark (``benchmark: judge``) behind :func:`ifdistill.evaluator.run.prepare` / ``execute``.

Phase 1 (:func:`with_judge`, no engine yet): the evaluated model's prompts, requests and decoding are
IFEval's (:class:`~ifdistill.evaluator.run.EvalPlan`, from ``eval.data``: the IFEval prompts by
default); on top of them the judge model is resolved and its weights hashed, its tokenizer and chat
template loaded, and for ``mode: pairwise`` the reference responses are read and matched to the prompts
by key (a missing file, a row without ``key`` / ``response``, a prompt without a reference row or a row
whose ``prompt`` differs is an :class:`~ifdistill.evaluator.errors.EvaluatorError` naming file, row and
field: exit 2, nothing written). The fingerprint gains a ``judge`` section, so the judge's weights,
tokenizer and chat template, the active template's text, its greedy decoding, the score range, the
parser and both-orders rule (:data:`~ifdistill.benchmarks.judge.verdicts.PARSER_VERSION`) and the
reference responses' sha256 all enter ``eval_config_hash``.

Phase 2 (:func:`execute_judge`): the evaluated model generates (its own backend, closed before the judge
starts, or the one passed in, e.g. the persistent server's engine, put to sleep where it has a sleep mode:
a GPU shared with training); then the judge model
is started on the same kind of backend (``eval.backend``; ``eval.runtime`` for its resources) and reads,
per prompt, one filled template (absolute) or two (pairwise: candidate as A, then reference as A),
rendered with its chat template; it decodes greedily, so the judgements of one export are the same in
training and after it. results.json (:meth:`~ifdistill.evaluator.plan.PlanBase.results_record`) and
samples.jsonl (each judgement's rendered prompt, raw text and parsed verdict) are published by the
evaluator's one writer.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import logging
import re
import time
from pathlib import Path
from typing import Any, Optional

from ifdistill.data.render import RenderError, render_prompt
from ifdistill.data.sources import BadLine, json_lines
from ifdistill.evaluator.backends import make_backend
from ifdistill.evaluator.errors import EvaluatorError, PromptTooLongError
from ifdistill.evaluator.fingerprint import canonical_sha256, config_hash
from ifdistill.hashing import sha256_file
from ifdistill.evaluator.generation import Completion, Request, Sampling, finalize, scored_text
from ifdistill.benchmarks.judge import verdicts as V
from ifdistill.benchmarks.judge.verdicts import JUDGE_PLACEHOLDERS
from ifdistill.evaluator.model_source import ModelSource, context_length, model_identity, resolve_model_source
from ifdistill.evaluator.output import SAMPLES_FILE
from ifdistill.evaluator.prompts import load_tokenizer, stop_token_ids
from ifdistill.evaluator.results import package_versions, publish
from ifdistill.evaluator.plan import EvalPlan, generate_responses
from ifdistill.benchmarks.judge.settings import JudgeSettings

log = logging.getLogger(__name__)

_NAMES = sorted({n for names in JUDGE_PLACEHOLDERS.values() for n in names}, key=len, reverse=True)
_PLACEHOLDER = re.compile(r"\{(" + "|".join(_NAMES) + r")\}")


@dataclasses.dataclass(kw_only=True)
class JudgePlan(EvalPlan):
    """The evaluated model's IFEval-style plan plus the judge; ``eval_config_hash`` covers both."""

    judge_source: ModelSource
    judge_tokenizer: Any
    judge_context_len: int
    judge_sampling: Sampling
    judge_identity: dict[str, Any]
    reference: Optional[dict[str, str]]  # prompt key -> reference response (pairwise)
    reference_identity: Optional[dict[str, Any]]


def fill(template: str, **values: str) -> str:
    """The template with each ``{placeholder}`` replaced in one pass: a response that itself contains
    ``{response_b}`` stays as written, and other braces in the template are left alone."""
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def read_reference(path: str, prompts: list[Any]) -> tuple[dict[str, str], dict[str, Any]]:
    """Reference responses by prompt key from a samples.jsonl (or its directory), and their identity.

    A row gives its ``scored_response`` when it has one (a thinking model's answer after ``</think>``),
    else its ``response``; every prompt needs a row with its key, and a row's ``prompt``, when present,
    must be that prompt's text. Lines are read as the data layer reads them
    (:func:`~ifdistill.data.sources.json_lines`): a line that is not UTF-8 is named by file and line; a leading
    byte-order mark is accepted."""
    file = Path(path).expanduser()
    if file.is_dir():
        file = file / SAMPLES_FILE
    if not file.is_file():
        raise EvaluatorError(f"eval.judge.reference {file}: no such file")
    rows: dict[str, tuple[int, dict[str, Any]]] = {}
    try:
        lines = list(json_lines(file))
    except BadLine as err:
        raise EvaluatorError(str(err)) from None
    for line_no, row in lines:
        if not isinstance(row, dict):
            raise EvaluatorError(f"{file}:{line_no}: not a JSON object")
        if row.get("key") is None:
            raise EvaluatorError(f"{file}:{line_no}: field 'key' missing")
        if not isinstance(row.get("response"), str):
            raise EvaluatorError(f"{file}:{line_no}: field 'response' missing or not text")
        key = str(row["key"])
        if key in rows:
            raise EvaluatorError(f"{file}:{line_no}: field 'key' {key!r} repeats row {rows[key][0]}")
        rows[key] = (line_no, row)
    out: dict[str, str] = {}
    for p in prompts:
        if p.key not in rows:
            raise EvaluatorError(f"{file}: no row with field 'key' {p.key!r} (a prompt of eval.data)")
        line_no, row = rows[p.key]
        if "prompt" in row and row["prompt"] != p.example.prompt:
            raise EvaluatorError(f"{file}:{line_no}: field 'prompt' differs from the text of prompt {p.key!r}")
        answer = row.get("scored_response")
        out[p.key] = answer if isinstance(answer, str) else row["response"]
    identity = {"path": str(file.resolve()), "file_sha256": sha256_file(file), "num_rows": len(rows),
                "responses_sha256": canonical_sha256([[p.key, out[p.key]] for p in prompts])}
    return out, identity


def with_judge(plan: EvalPlan) -> JudgePlan:
    """Phase 1's judge part (module docstring): the judge, the reference, and the extended hash."""
    j = plan.settings.judge
    try:
        source = resolve_model_source({"name_or_path": j.model.name_or_path, "revision": j.model.revision})
        tokenizer, template = load_tokenizer(source.tokenizer_dir, j.model.chat_template)
    except EvaluatorError as err:  # the same errors as the evaluated model's, said of the judge
        raise type(err)(f"eval.judge.model: {err}") from None
    limits = [n for n in (j.model.max_model_len, context_length(source.model_dir)) if n]
    if not limits:
        raise EvaluatorError("the judge's config states no context length; set eval.judge.model.max_model_len")
    stops = stop_token_ids(tokenizer, source.model_dir, [])
    sampling = Sampling(greedy=True, temperature=1.0, top_p=1.0, top_k=0, stop=(), stop_token_ids=tuple(stops))
    reference, ref_identity = read_reference(j.reference, plan.prompts) if j.mode == "pairwise" else (None, None)
    identity = model_identity(source, template)
    text = j.pairwise_template if j.mode == "pairwise" else j.absolute_template
    fingerprint = {**plan.fingerprint, "judge": {
        "parser_version": V.PARSER_VERSION, "mode": j.mode,
        "order_rule": "both_orders" if j.mode == "pairwise" else None,
        "weights_digest": identity["weights_digest"], "tokenizer_sha256": identity["tokenizer_sha256"],
        "enable_thinking": j.model.enable_thinking, "dtype": j.model.dtype or plan.settings.dtype,
        "template_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "score_range": [j.score_min, j.score_max] if j.mode == "absolute" else None,
        "decoding": {"greedy": True, "max_new_tokens": j.max_new_tokens, "stop_token_ids": list(stops)},
        "context_len": min(limits),
        "reference_responses_sha256": ref_identity["responses_sha256"] if ref_identity else None}}
    base = {f.name: getattr(plan, f.name) for f in dataclasses.fields(EvalPlan)}
    base.update(fingerprint=fingerprint, eval_config_hash=config_hash(fingerprint))
    return JudgePlan(**base, judge_source=source, judge_tokenizer=tokenizer, judge_context_len=min(limits),
                     judge_sampling=sampling, judge_identity=identity, reference=reference,
                     reference_identity=ref_identity)


def judge_inputs(plan: JudgePlan, responses: list[str]) -> list[tuple[str, str, str]]:
    """``(prompt key, order, filled template)`` per judgement, in prompt order (pairwise: both orders)."""
    j = plan.settings.judge
    out = []
    for p, response in zip(plan.prompts, responses, strict=True):
        if j.mode == "absolute":
            out.append((p.key, "absolute", fill(j.absolute_template, prompt=p.example.prompt, response=response)))
            continue
        ref = plan.reference[p.key]
        out.append((p.key, V.ORDERS[0], fill(j.pairwise_template, prompt=p.example.prompt, response_a=response,
                                            response_b=ref)))
        out.append((p.key, V.ORDERS[1], fill(j.pairwise_template, prompt=p.example.prompt, response_a=ref,
                                            response_b=response)))
    return out


def _judge_requests(plan: JudgePlan, inputs: list[tuple[str, str, str]]) -> list[Request]:
    j = plan.settings.judge
    requests = []
    for key, order, text in inputs:
        try:
            ids = render_prompt(plan.judge_tokenizer, [{"role": "user", "content": text}],
                                enable_thinking=j.model.enable_thinking)
        except RenderError as err:
            raise EvaluatorError(f"cannot render the judge's prompt for {key!r} ({order}): {err}") from None
        room = plan.judge_context_len - len(ids)
        if room < 1:
            raise PromptTooLongError(f"the judge's prompt for {key!r} ({order}) has {len(ids)} tokens; the judge's "
                                     f"context is {plan.judge_context_len} (eval.judge.model.max_model_len)")
        requests.append(Request(token_ids=tuple(ids), max_tokens=min(j.max_new_tokens, room), seed=0))
    return requests


def _run_judge(plan: JudgePlan, requests: list[Request]) -> tuple[list[Completion], dict[str, Any]]:
    settings = dataclasses.replace(plan.settings, dtype=plan.settings.judge.model.dtype or plan.settings.dtype)
    backend = make_backend(settings, plan.judge_source, context_len=plan.judge_context_len,
                           seed=plan.settings.generation.seed, requests=requests)
    try:
        raw = backend.generate(requests, plan.judge_sampling, adapter_dir=None, progress=plan.settings.runtime.progress)
        info = {"name": backend.name, "settings": dict(getattr(backend, "settings", {}))}
    finally:
        backend.close()
    return [finalize(ids, r, plan.judge_sampling, plan.judge_tokenizer) for ids, r in zip(raw, requests)], info


def judge_verdict(j: JudgeSettings, text: str) -> V.Verdict:
    """The verdict in the judge's answer: with ``enable_thinking``, only the text after its think block (an
    unterminated one leaves no answer: ``missing``)."""
    answer = scored_text(text, bool(j.model.enable_thinking))[0]
    return V.parse_score(answer, j.score_min, j.score_max) if j.mode == "absolute" else V.parse_preference(answer)


def _rows_and_metrics(plan: JudgePlan, completions: list[Completion], judged: list[Completion],
                      requests: list[Request], inputs: list[tuple[str, str, str]]) -> tuple[list[dict], dict]:
    strip = bool(plan.settings.generation.strip_thinking)
    per_prompt = 1 if plan.settings.judge.mode == "absolute" else 2
    rows, verdicts, outcomes = [], [], []
    for i, (p, c) in enumerate(zip(plan.prompts, completions, strict=True)):
        judgements = []
        for k in range(i * per_prompt, (i + 1) * per_prompt):
            v = judge_verdict(plan.settings.judge, judged[k].text)
            verdicts.append(v)
            judgements.append({"order": inputs[k][1], "judge_prompt": plan.judge_tokenizer.decode(
                list(requests[k].token_ids), skip_special_tokens=False), "judge_raw": judged[k].text,
                "judge_num_generated_tokens": len(judged[k].token_ids), "judge_finish_reason": judged[k].finish_reason,
                "verdict": v.as_dict()})
        answer, state = scored_text(c.text, strip)
        row: dict[str, Any] = {"key": p.key, "prompt": p.example.prompt,
                               "rendered_prompt": plan.tokenizer.decode(list(p.token_ids), skip_special_tokens=False),
                               "response": c.text, "num_generated_tokens": len(c.token_ids),
                               "finish_reason": c.finish_reason}
        if strip:
            row.update(scored_response=answer, thinking=state)
        if per_prompt == 2:
            row["reference_response"] = plan.reference[p.key]
            row["outcome"] = V.pair_outcome(verdicts[-2], verdicts[-1])
            outcomes.append(row["outcome"])
        else:
            row["score"] = verdicts[-1].value if verdicts[-1].category == "valid" else None
        rows.append({**row, "judgements": judgements})
    metrics = V.pairwise_metrics(outcomes, verdicts) if per_prompt == 2 else V.absolute_metrics(verdicts)
    return rows, {**metrics, "num_prompts": len(rows)}


def execute_judge(plan: JudgePlan, backend: Any, *, own: bool, runtime: Optional[dict[str, Any]],
                  t0: float) -> dict[str, Any]:
    """Phase 2 (module docstring); returns results.json's content. ``own``: close ``backend`` before
    the judge starts (the caller started it for this evaluation)."""
    t1 = time.perf_counter()
    raw, backend_info, generate_s = generate_responses(plan, backend, own=own)
    if not own and hasattr(backend, "sleep"):  # a persistent vLLM engine on a shared GPU frees it for the judge
        backend.sleep()  # (a no-op on CPU and without sleep mode); its server wakes it for the next request
    completions = [finalize(ids, r, plan.sampling, plan.tokenizer) for ids, r in zip(raw, plan.requests)]
    strip = bool(plan.settings.generation.strip_thinking)
    inputs = judge_inputs(plan, [scored_text(c.text, strip)[0] for c in completions])
    requests = _judge_requests(plan, inputs)
    t3 = time.perf_counter()
    judged, judge_backend = _run_judge(plan, requests)
    t4 = time.perf_counter()
    samples, metrics = _rows_and_metrics(plan, completions, judged, requests, inputs)
    tokens = sum(len(c.token_ids) for c in completions)
    counts = {"num_prompts": len(samples), "num_judgements": len(judged), "generated_tokens": tokens,
              "finish_reasons": dict(sorted(collections.Counter(c.finish_reason for c in completions).items())),
              "judge_generated_tokens": sum(len(c.token_ids) for c in judged),
              "judge_finish_reasons": dict(sorted(collections.Counter(c.finish_reason for c in judged).items()))}
    results = plan.results_record(
        scores={"metrics": metrics, "counts": counts,
                "judge": {"mode": plan.settings.judge.mode, "model": plan.judge_identity,
                          "reference": plan.reference_identity, "backend": judge_backend}},
        data={"eval": plan.data.identity, "fewshot_pool": plan.pool.identity if plan.pool else None},
        backend=backend_info, runtime=runtime, versions=package_versions(),
        timings={"prepare_s": round(plan.prepare_s, 3), "load_s": round(t1 - t0, 3), "generate_s": round(generate_s, 3),
                 "judge_s": round(t4 - t3, 3), "total_s": round(plan.prepare_s + time.perf_counter() - t0, 3),
                 "generated_tokens_per_s": round(tokens / max(generate_s, 1e-9), 1)})
    publish(plan.run.output_dir, results, samples, overwrite=plan.run.overwrite)
    log.info("eval %s -> %s: %s", plan.eval_config_hash, plan.run.output_dir, summary_line(results))
    return results


def _num(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, (int, float)) and value == value else "-"


def summary_line(results: dict[str, Any]) -> str:
    """The headline of a judged results.json, for logs and the CLI."""
    m = results["metrics"]
    if "win_rate" in m:
        return (f"win rate {_num(m['win_rate'])} ± {_num(m['win_rate_stderr'])} (wins {m['num_wins']}, ties "
                f"{m['num_ties']}, losses {m['num_losses']}, unparsable pairs {m['num_unparsable_pairs']}; "
                f"sign test p {m['sign_test_p']:.4g})")
    return (f"mean score {_num(m['score_mean'])} ± {_num(m['score_mean_stderr'])} ({m['num_scored']} scored, "
            f"{m['num_unparsable']} unparsable)")
