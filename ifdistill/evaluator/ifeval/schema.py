"""The JSON Schema of results.json, and a small validator for the subset of JSON Schema it uses.

Why a validator of our own: ``jsonschema`` is not a dependency of ifdistill (it only arrives with
vLLM), and results.json is read by the callback, the results page and other tools on machines with
or without vLLM. The schema itself is standard JSON Schema (draft 2020-12); the tests also check it
with ``jsonschema`` where that is installed. Supported keywords: ``type`` (one or a list),
``properties``, ``required``, ``additionalProperties`` (bool or schema), ``items``, ``enum``,
``minimum``, ``maximum``, ``pattern``, ``minItems``.

Bump :data:`RESULTS_SCHEMA_VERSION` (and say so in results.json readers) on incompatible changes.
"""

from __future__ import annotations

import re
from typing import Any

from ifdistill.ifeval.stats import METRICS
from ifdistill.evaluator.results import ENGINES

RESULTS_SCHEMA_VERSION = 1

_NUM = {"type": ["number", "null"]}  # NaN is written as null (a standard error with one prompt)
_COUNT = {"type": "integer", "minimum": 0}
_HEX64 = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
_THINK_STATES = ("closed", "none", "unterminated")  # ifdistill.evaluator.generation.scored_text


def _obj(props: dict[str, Any], required: list[str] | None = None, extra: Any = False) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props) if required is None else required,
            "additionalProperties": extra}


_metrics_props: dict[str, Any] = {}
for _m in METRICS:
    _metrics_props[_m] = {"type": "number", "minimum": 0, "maximum": 1}
    _metrics_props[f"{_m}_stderr"] = _NUM
    _metrics_props[f"{_m}_count"] = _COUNT
_metrics_props.update(num_prompts={"type": "integer", "minimum": 1}, num_instructions={"type": "integer", "minimum": 1})

RESULTS_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "ifdistill-eval results.json",
    **_obj({
        "schema_version": {"enum": [RESULTS_SCHEMA_VERSION]},
        "eval_config_hash": {"type": "string", "pattern": "^[0-9a-f]{16}$"},
        "fingerprint": {"type": "object"},
        "metrics": _obj(_metrics_props),
        "per_instruction_type": {"type": "object", "additionalProperties": _obj({
            "strict_acc": {"type": "number", "minimum": 0, "maximum": 1},
            "loose_acc": {"type": "number", "minimum": 0, "maximum": 1},
            "count": {"type": "integer", "minimum": 1}})},
        "counts": _obj({"num_prompts": _COUNT, "num_instructions": _COUNT, "generated_tokens": _COUNT,
                        "finish_reasons": {"type": "object", "additionalProperties": _COUNT},
                        # only with eval.generation.strip_thinking
                        "thinking": _obj({k: _COUNT for k in _THINK_STATES}, required=[])},
                       required=["num_prompts", "num_instructions", "generated_tokens", "finish_reasons"]),
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


class SchemaError(ValueError):
    """A document does not fit the schema; the message names the JSON path."""


_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _is(value: Any, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _TYPES[name])


def validate(doc: Any, schema: dict[str, Any] = RESULTS_SCHEMA, path: str = "$") -> None:
    """Raise :class:`SchemaError` at the first place ``doc`` does not fit ``schema``."""
    types = schema.get("type")
    if types is not None:
        names = types if isinstance(types, list) else [types]
        if not any(_is(doc, t) for t in names):
            raise SchemaError(f"{path}: expected {' or '.join(names)}, got {type(doc).__name__}")
    if "enum" in schema and doc not in schema["enum"]:
        raise SchemaError(f"{path}: {doc!r} is not one of {schema['enum']}")
    if isinstance(doc, (int, float)) and not isinstance(doc, bool):
        if "minimum" in schema and doc < schema["minimum"]:
            raise SchemaError(f"{path}: {doc} < minimum {schema['minimum']}")
        if "maximum" in schema and doc > schema["maximum"]:
            raise SchemaError(f"{path}: {doc} > maximum {schema['maximum']}")
    if isinstance(doc, str) and "pattern" in schema and not re.search(schema["pattern"], doc):
        raise SchemaError(f"{path}: {doc!r} does not match {schema['pattern']}")
    if isinstance(doc, dict):
        for key in schema.get("required", []):
            if key not in doc:
                raise SchemaError(f"{path}: missing required key {key!r}")
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, value in doc.items():
            if key in props:
                validate(value, props[key], f"{path}.{key}")
            elif extra is False:
                raise SchemaError(f"{path}: unexpected key {key!r}")
            elif isinstance(extra, dict):
                validate(value, extra, f"{path}.{key}")
    if isinstance(doc, list):
        if len(doc) < schema.get("minItems", 0):
            raise SchemaError(f"{path}: fewer than {schema['minItems']} items")
        if "items" in schema:
            for i, value in enumerate(doc):
                validate(value, schema["items"], f"{path}[{i}]")


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
}, required=["key", "prompt", "rendered_prompt", "prompt_num_tokens", "demo_uids", "response",
             "instruction_id_list", "kwargs", "strict_inst", "loose_inst", "strict_prompt", "loose_prompt",
             "num_generated_tokens", "finish_reason"])
