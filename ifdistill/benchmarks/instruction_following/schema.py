"""The JSON Schema of an IFEval / IFBench results.json and of one samples.jsonl row (validated with
:func:`ifdistill.evaluator.schema.validate`)."""

from __future__ import annotations

from typing import Any

from ifdistill.evaluator.results import ENGINES
from ifdistill.evaluator import schema as _core
from ifdistill.evaluator.schema import RESULTS_SCHEMA_VERSION, SchemaError, obj as _obj
from ifdistill.benchmarks.instruction_following.reliability import RELIABILITY_METRICS
from ifdistill.benchmarks.instruction_following.stats import METRICS

__all__ = ["RESULTS_SCHEMA", "SAMPLE_SCHEMA", "SchemaError", "validate"]

_NUM = {"type": ["number", "null"]}  # NaN is written as null (a standard error with one prompt)
_COUNT = {"type": "integer", "minimum": 0}
_HEX64 = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
_THINK_STATES = ("closed", "none", "unterminated")  # ifdistill.evaluator.generation.scored_text


_metrics_props: dict[str, Any] = {}
for _m in METRICS:
    _metrics_props[_m] = {"type": "number", "minimum": 0, "maximum": 1}
    _metrics_props[f"{_m}_stderr"] = _NUM
    _metrics_props[f"{_m}_count"] = _COUNT
_metrics_props.update(num_prompts={"type": "integer", "minimum": 1}, num_instructions={"type": "integer", "minimum": 1})
_REQUIRED_METRICS = list(_metrics_props)


def _optional_metrics() -> list[str]:
    """The metrics an instruction benchmark's results.json may hold beside the four: reliable@k with k responses
    per prompt, and each registered instruction benchmark's own scores (its ``metric_names``)."""
    from ifdistill.benchmarks.instruction_following.instruction_benchmark import InstructionBenchmark
    from ifdistill.benchmarks import registry

    names = dict.fromkeys(RELIABILITY_METRICS)
    for bench in registry.ordered():
        if isinstance(bench, InstructionBenchmark):
            names.update(dict.fromkeys(m for m in bench.metric_names if m not in METRICS))
    return list(names)


for _m in _optional_metrics():
    _metrics_props[_m] = {"type": "number", "minimum": 0, "maximum": 1}
    _metrics_props[f"{_m}_stderr"] = _NUM
_FRACTION = {"type": ["number", "null"], "minimum": 0, "maximum": 1}

RESULTS_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "ifdistill-eval results.json",
    **_obj({
        "schema_version": {"enum": [RESULTS_SCHEMA_VERSION]},
        "eval_config_hash": {"type": "string", "pattern": "^[0-9a-f]{16}$"},
        "fingerprint": {"type": "object"},
        "metrics": _obj(_metrics_props, required=_REQUIRED_METRICS),
        "per_instruction_type": {"type": "object", "additionalProperties": _obj({
            "strict_acc": {"type": "number", "minimum": 0, "maximum": 1},
            "loose_acc": {"type": "number", "minimum": 0, "maximum": 1},
            "count": {"type": "integer", "minimum": 1}})},
        "counts": _obj({"num_prompts": _COUNT, "num_instructions": _COUNT, "generated_tokens": _COUNT,
                        "finish_reasons": {"type": "object", "additionalProperties": _COUNT},
                        # only with eval.generation.strip_thinking
                        "thinking": _obj({k: _COUNT for k in _THINK_STATES}, required=[]),
                        "samples_per_prompt": {"type": "integer", "minimum": 2}},  # only with k > 1
                       required=["num_prompts", "num_instructions", "generated_tokens", "finish_reasons"],
                       extra=_COUNT),  # a benchmark's own counts
        "model": _obj({
            "configured": {"type": "string"},
            "kind": {"enum": ["model", "adapter", "merged"]},
            "path": {"type": "string"},
            "adapter_path": {"type": ["string", "null"]},
            "export_dir": {"type": ["string", "null"]},
            "tokenizer_path": {"type": "string"},
            "weights_sha256": {"type": "object", "additionalProperties": _HEX64},
            "adapter_weights_sha256": {"type": "object", "additionalProperties": _HEX64},
            "weights_digest": _HEX64,
            "tokenizer_sha256": _HEX64,
            "chat_template_sha256": _HEX64,
            "adapter_config": {"type": ["object", "null"]}}),
        "data": _obj({"eval": {"type": "object"}, "fewshot_pool": {"type": ["object", "null"]}}),
        "config": _obj({"eval": {"type": "object"}, "model": {"type": "object"},
                        "adapter_dir": {"type": ["string", "null"]}, "export_dir": {"type": ["string", "null"]},
                        "export_kind": {"type": "string"}, "output_dir": {"type": "string"}}),
        "backend": _obj({"name": {"enum": ["vllm", "hf"]}, "settings": {"type": "object"}}),
        # which engine produced it (optional: results written before it existed lack it)
        "runtime": _obj({"engine": {"enum": list(ENGINES)}}, required=["engine"], extra=True),
        "versions": {"type": "object", "additionalProperties": {"type": ["string", "null"]}},
        "timings": _obj({k: {"type": "number", "minimum": 0} for k in (
            "prepare_s", "load_s", "generate_s", "score_s", "total_s", "generated_tokens_per_s")}),
        "created_at": {"type": "string"},
        "host": {"type": "string"},
        # ifdistill.checksum over the rest (optional: results written before it existed lack it)
        "checksum": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"},
    }),
}
RESULTS_SCHEMA["required"].remove("runtime")
RESULTS_SCHEMA["required"].remove("checksum")


#: One line of samples.jsonl.
SAMPLE_SCHEMA: dict[str, Any] = _obj({
    "key": {"type": "string"},
    "prompt": {"type": "string"},
    "rendered_prompt": {"type": "string"},
    "prompt_num_tokens": {"type": "integer", "minimum": 1},
    "demo_uids": {"type": "array", "items": {"type": "string"}},
    "response": {"type": "string"},
    "instruction_id_list": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    "kwargs": {"type": "array", "items": {"type": "object"}},
    "strict_inst": {"type": "array", "items": {"type": "boolean"}},
    "loose_inst": {"type": "array", "items": {"type": "boolean"}},
    "strict_prompt": {"type": "boolean"},
    "loose_prompt": {"type": "boolean"},
    "num_generated_tokens": _COUNT,
    "finish_reason": {"enum": ["stop", "length"]},
    "scored_response": {"type": "string"},  # these two only with eval.generation.strip_thinking
    "thinking": {"enum": list(_THINK_STATES)},
    # with k responses per prompt: each of them, and the prompt's own reliable@k and pass rate
    "responses": {"type": "array", "items": _obj({
        "response": {"type": "string"}, "seed": _COUNT, "strict_inst": {"type": "array", "items": {"type": "boolean"}},
        "loose_inst": {"type": "array", "items": {"type": "boolean"}}, "strict_prompt": {"type": "boolean"},
        "loose_prompt": {"type": "boolean"}, "num_generated_tokens": _COUNT, "finish_reason": {"enum": ["stop", "length"]}}),
        "minItems": 2},
    "metrics": {"type": "object", "additionalProperties": _FRACTION},  # the row's own values of metrics
    "new_instruction_ids": {"type": "array", "items": {"type": "string"}},  # a conversation's final turn's
}, required=["key", "prompt", "rendered_prompt", "prompt_num_tokens", "demo_uids", "response",
             "instruction_id_list", "kwargs", "strict_inst", "loose_inst", "strict_prompt", "loose_prompt",
             "num_generated_tokens", "finish_reason"])


def validate(doc: Any, schema: dict[str, Any] | None = None, path: str = "$") -> None:
    """:func:`ifdistill.evaluator.schema.validate` against ``schema`` (default: this results.json schema)."""
    _core.validate(doc, RESULTS_SCHEMA if schema is None else schema, path)
