"""results.json's common part: its schema version, and a small validator for the subset of JSON Schema the
benchmarks' schemas use (each benchmark states the schema of its own results, e.g.
:mod:`ifdistill.benchmarks.instruction_following.schema`).

Why a validator of our own: ``jsonschema`` is not a dependency of ifdistill (it only arrives with
vLLM), and results.json is read by the callback, the results page and other tools on machines with
or without vLLM. The schemas themselves are standard JSON Schema (draft 2020-12); the tests also check
them with ``jsonschema`` where that is installed. Supported keywords: ``type`` (one or a list),
``properties``, ``required``, ``additionalProperties`` (bool or schema), ``items``, ``enum``,
``minimum``, ``maximum``, ``pattern``, ``minItems``.

Bump :data:`RESULTS_SCHEMA_VERSION` (and say so in results.json readers) on incompatible changes.
"""

from __future__ import annotations

import re
from typing import Any

RESULTS_SCHEMA_VERSION = 1


def obj(props: dict[str, Any], required: list[str] | None = None, extra: Any = False) -> dict[str, Any]:
    """A JSON Schema object of ``props`` (all required unless ``required`` says otherwise)."""
    return {"type": "object", "properties": props, "required": list(props) if required is None else required,
            "additionalProperties": extra}


class SchemaError(ValueError):
    """A document does not fit the schema; the message names the JSON path."""


_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _is(value: Any, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _TYPES[name])


def validate(doc: Any, schema: dict[str, Any], path: str = "$") -> None:
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
