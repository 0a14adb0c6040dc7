"""The normalised training record (:class:`Example`) and how raw rows become one.

Every source -- a local JSONL or Parquet file, a Hugging Face dataset, the embedded synthetic
generator -- ends up as an :class:`Example`: a conversation (``messages``) plus the metadata that the
rest of ifdistill needs (source name, row id for error messages and the manifest, and for rows in the
IFEval schema the ``key``, ``instruction_id_list`` and ``kwargs`` that the scorer reads).

Validation happens *here*, before any tokenizer sees the text: a wrong type reaching a Jinja chat
template or a fast tokenizer surfaces as a stack trace from deep inside those libraries, naming
neither the file nor the line. So every check raises :class:`DataError` with ``location`` (file:line)
and ``field``; the loader decides whether to stop (strict, the default) or skip and count (tolerant).

Three layouts are understood (``layout="auto"`` picks by the fields present):

- ``messages``: ``{"messages": [{"role": ..., "content": ...}, ...]}`` ending with an assistant turn.
- ``prompt_completion``: ``{"prompt": str | messages, "completion": str | messages}`` (TRL's layout);
  ``response`` is accepted in place of ``completion``.
- ``ifeval``: the argilla ifeval-like layout ``{key?, prompt, response, instruction_id_list, kwargs,
  prompt_level_strict_acc?}``. ``kwargs`` may be a list of dicts, a JSON string, or the Hugging Face
  layout where every possible argument is present with ``None`` (the ``None`` values are dropped, as
  the IFEval scorer expects). ``verified_only`` keeps only rows with ``prompt_level_strict_acc`` true,
  the filter the published setup used. A row that also holds ``messages`` is a conversation with the
  instructions of its *last* user turn: the published IFBench multi-turn layout (allenai/IFBench_multi-turn,
  ``{key, prompt, instruction_id_list, kwargs, messages}``, messages user / assistant / user); the
  conversation is ``messages`` (its ``prompt`` field is not read), and a trailing assistant turn is its answer.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

ROLES = ("system", "user", "assistant")
LAYOUTS = ("auto", "messages", "prompt_completion", "ifeval")


class DataError(ValueError):
    """A row that cannot become an :class:`Example`; says where (file:line) and which field.

    ``kind`` is one of :data:`ERROR_KINDS`; tolerant loading counts skipped rows by it:

    - ``malformed_json``: the line is not JSON (field: none);
    - ``missing_field``: a required field is absent or null (``completion``, ``messages[1].content``);
    - ``wrong_type``: a field has the wrong type (a number as ``prompt``, a row that is not an object);
    - ``empty_completion``: the answer to learn is empty or whitespace;
    - ``bad_value``: well-typed but unusable (unknown role, kwargs count != instruction count, ...);
    - ``turn_order``: the roles do not alternate as a chat template requires (:func:`check_turn_order`);
    - ``duplicate_field``: a JSON object names the same field twice (JSON keeps the last, silently);
    - ``duplicate_key``: a row repeats the IFEval ``key`` (or ``id``) of an earlier row of its source;
    - ``render_failed``: the chat template cannot render the row with a correct loss mask.

    The message reads ``<file>:<line>: field '<field>': <what> [<kind>]``.
    """

    def __init__(self, kind: str, message: str, *, location: str | None = None, field: str | None = None):
        self.kind, self.location, self.field, self.detail = kind, location, field, message
        where = location or "<row>"
        what = f" field {field!r}:" if field else ""
        super().__init__(f"{where}:{what} {message} [{kind}]")


ERROR_KINDS = ("malformed_json", "missing_field", "wrong_type", "empty_completion", "bad_value", "turn_order",
               "duplicate_field", "duplicate_key", "render_failed")


@dataclasses.dataclass(frozen=True)
class Example:
    """One training or evaluation conversation with its provenance.

    ``messages`` is a tuple of ``{"role", "content"}`` dicts; for training it ends with the assistant
    turn to learn. ``row_id`` is unique within ``source`` and stable across runs (file:line or
    dataset#index or the IFEval key), so manifests and error messages can point at the row.
    """

    messages: tuple[dict[str, str], ...]
    source: str
    row_id: str
    key: str | None = None
    instruction_id_list: tuple[str, ...] | None = None
    kwargs: tuple[dict[str, Any], ...] | None = None

    @property
    def uid(self) -> str:
        """Globally unique id: ``source/row_id`` (used to exclude an example from its own demos)."""
        return f"{self.source}/{self.row_id}"

    @property
    def prompt(self) -> str:
        """Content of the last user turn before the final assistant turn."""
        for m in reversed(self.messages):
            if m["role"] == "user":
                return m["content"]
        return ""

    @property
    def completion(self) -> str:
        """Content of the final assistant turn ('' when the conversation ends with a user turn)."""
        last = self.messages[-1]
        return last["content"] if last["role"] == "assistant" else ""

    def to_messages(self) -> list[dict[str, str]]:
        return [dict(m) for m in self.messages]


def _err(kind: str, msg: str, location: str | None, field: str | None = None) -> DataError:
    return DataError(kind, msg, location=location, field=field)


def _need(row: Mapping[str, Any], field: str, typ: type | tuple[type, ...], location: str | None) -> Any:
    if field not in row or row[field] is None:
        raise _err("missing_field", "required field is missing", location, field)
    value = row[field]
    if not isinstance(value, typ):
        names = typ.__name__ if isinstance(typ, type) else " or ".join(t.__name__ for t in typ)
        raise _err("wrong_type", f"expected {names}, got {type(value).__name__}", location, field)
    return value


def _a(role: str) -> str:
    """``role`` with its article: ``a user``, ``an assistant``."""
    return f"{'an' if role[:1].lower() in 'aeio' else 'a'} {role}"  # a user: u sounds 'you'


def check_turn_order(messages: Sequence[Mapping[str, str]], location: str | None, field: str = "messages",
                     *, end: str | None = None, names: Sequence[str] | None = None) -> None:
    """Refuse a conversation whose roles do not alternate as chat templates require: one ``system`` turn,
    first, if any; then ``user`` and ``assistant`` in turn, starting with ``user``; ending with ``end``
    (``assistant``: a training row, whose last turn is learnt; ``user``: a prompt; ``None``: either, a
    prompt that carries its reference answer). Templates render two user turns in a row or a second
    system turn without complaint, so such a row would train on a conversation no model ever sees.
    ``names[i]``: the field that holds turn ``i`` as the file spells it (default ``<field>[i].role``)."""
    names = names or [f"{field}[{i}].role" for i in range(len(messages))]
    start = 1 if messages and messages[0]["role"] == "system" else 0
    for i in range(start, len(messages)):
        want = "user" if (i - start) % 2 == 0 else "assistant"
        if messages[i]["role"] != want:
            before = f"after {_a(messages[i - 1]['role'])} turn" if i else "as the first turn"
            raise _err("turn_order", f"{_a(messages[i]['role'])} turn {before}: roles must be an optional system "
                                     "turn, then user and assistant in turn", location, names[i])
    if start == len(messages):
        raise _err("turn_order", "a system turn alone: the conversation has no user turn", location, field)
    if end is not None and messages[-1]["role"] != end:
        raise _err("turn_order", f"the conversation ends with {_a(messages[-1]['role'])} turn; "
                                 f"{'a training row' if end == 'assistant' else 'a prompt'} ends with {_a(end)} turn",
                   location, names[-1])


def check_messages(messages: Any, location: str | None, field: str = "messages",
                   *, need_completion: bool = True) -> tuple[dict[str, str], ...]:
    """Validate a conversation's turns one by one; return it as a tuple of plain ``{"role", "content"}``
    dicts (their order is checked on the whole conversation, :func:`check_turn_order`)."""
    if not isinstance(messages, (list, tuple)):
        raise _err("wrong_type", f"expected a list of messages, got {type(messages).__name__}", location, field)
    if not messages:
        raise _err("bad_value", "empty conversation", location, field)
    out = []
    for i, m in enumerate(messages):
        f = f"{field}[{i}]"
        if not isinstance(m, Mapping):
            raise _err("wrong_type", f"expected an object, got {type(m).__name__}", location, f)
        role, content = m.get("role"), m.get("content")
        if role is None:
            raise _err("missing_field", "required field is missing", location, f + ".role")
        if content is None:
            raise _err("missing_field", "required field is missing", location, f + ".content")
        if not isinstance(role, str) or role not in ROLES:
            raise _err("bad_value", f"role must be one of {ROLES}, got {role!r}", location, f + ".role")
        if not isinstance(content, str):
            raise _err("wrong_type", f"expected str, got {type(content).__name__}", location, f + ".content")
        out.append({"role": role, "content": content})
    if need_completion:
        if out[-1]["role"] != "assistant":
            raise _err("bad_value", "conversation must end with an assistant turn", location, field)
        if not out[-1]["content"].strip():
            raise _err("empty_completion", "the final assistant turn is empty", location,
                       f"{field}[{len(out) - 1}].content")
        if not any(m["role"] == "user" for m in out):
            raise _err("bad_value", "conversation has no user turn", location, field)
    return tuple(out)


def normalise_kwargs(raw: Any, n: int, location: str | None) -> tuple[dict[str, Any], ...]:
    """IFEval kwargs as one dict per instruction, ``None`` values dropped (HF layout)."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as e:
            raise _err("bad_value", f"kwargs is a string but not JSON ({e.msg})", location, "kwargs") from None
    if isinstance(raw, Mapping) and n == 1:
        raw = [raw]
    if not isinstance(raw, (list, tuple)):
        raise _err("wrong_type", f"expected a list of objects, got {type(raw).__name__}", location, "kwargs")
    if len(raw) != n:
        raise _err("bad_value", f"{len(raw)} kwargs for {n} instructions", location, "kwargs")
    out = []
    for i, kw in enumerate(raw):
        if kw is None:
            kw = {}
        if not isinstance(kw, Mapping):
            raise _err("wrong_type", f"expected an object, got {type(kw).__name__}", location, f"kwargs[{i}]")
        out.append({k: (list(v) if isinstance(v, tuple) else v) for k, v in kw.items() if v is not None})
    return tuple(out)


def detect_layout(row: Mapping[str, Any]) -> str:
    if "instruction_id_list" in row:  # with ``messages`` too: IFBench's multi-turn rows
        return "ifeval"
    if "messages" in row:
        return "messages"
    if "prompt" in row:  # a missing completion is then reported as such
        return "prompt_completion"
    return "unknown"


def _turns(value: Any, role: str, location: str | None, field: str) -> list[dict[str, str]]:
    """A prompt or completion given either as a string or as a list of messages."""
    if isinstance(value, str):
        return [{"role": role, "content": value}]
    if isinstance(value, (list, tuple)):
        return list(check_messages(value, location, field, need_completion=False))
    raise _err("wrong_type", f"expected str or list of messages, got {type(value).__name__}", location, field)


def _turn_names(value: Any, field: str) -> list[str]:
    """The file's name of each turn a prompt or completion holds (a string is one turn)."""
    return [field] if isinstance(value, str) else [f"{field}[{i}].role" for i in range(len(value))]


def completion_field(row: Mapping[str, Any], layout: str, name: str | None = None) -> str:
    """The field that holds a row's answer, as its file spells it: the one the row has, else ``name`` (the
    one the source's earlier rows used), else the layout's (``response`` for IFEval rows)."""
    for field in ("completion", "response"):
        if field in row:
            return field
    return name or ("response" if layout == "ifeval" else "completion")


def _instructions(row: Mapping[str, Any], location: str | None) -> tuple[tuple[str, ...], tuple[dict[str, Any], ...]]:
    """An IFEval-layout row's ``instruction_id_list`` and its ``kwargs`` (one dict per instruction)."""
    ids = _need(row, "instruction_id_list", (list, tuple), location)
    if not all(isinstance(i, str) for i in ids):
        raise _err("wrong_type", "expected a list of str", location, "instruction_id_list")
    ids = tuple(ids)
    return ids, normalise_kwargs(_need(row, "kwargs", (list, tuple, str, Mapping), location), len(ids), location)


def _verified(row: Mapping[str, Any], location: str | None) -> bool:
    """Whether an IFEval-layout row's ``prompt_level_strict_acc`` says its answer passed (``verified_only``)."""
    acc = row.get("prompt_level_strict_acc")
    if acc is None:
        raise _err("missing_field", "verified_only needs this field", location, "prompt_level_strict_acc")
    if not isinstance(acc, (bool, int, float)):
        raise _err("wrong_type", f"expected bool, got {type(acc).__name__}", location, "prompt_level_strict_acc")
    return bool(acc)


def normalise_row(row: Any, *, source: str, row_id: str, location: str | None = None,
                  layout: str = "auto", verified_only: bool = False,
                  need_completion: bool = True, completion_name: str | None = None) -> Example | None:
    """Turn one raw row into an :class:`Example`; ``None`` when ``verified_only`` filters it out.

    ``need_completion=False`` accepts prompt-only rows (evaluation sets in the IFEval schema).
    ``completion_name``: the answer's field in the source's other rows (``response`` or ``completion``),
    so a row that lacks it is told so in the file's own words.
    Raises :class:`DataError` naming ``location`` and the field for every defect it finds.
    """
    location = location or f"{source}:{row_id}"
    if not isinstance(row, Mapping):
        raise _err("wrong_type", f"a row must be a JSON object, got {type(row).__name__}", location)
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; expected one of {LAYOUTS}")
    if layout == "auto":
        layout = detect_layout(row)
        if layout == "unknown":
            raise _err("missing_field", "no 'messages', 'prompt'+'completion'/'response' or IFEval "
                       f"fields; the row has {sorted(row)[:8]}", location, "messages")
    key = row.get("key")
    key = None if key is None else str(key)
    ids = kwargs = None
    if layout == "messages":
        if row.get("messages") is None:
            raise _err("missing_field", "required field is missing", location, "messages")
        messages = check_messages(row["messages"], location, need_completion=need_completion)
        check_turn_order(messages, location, end="assistant" if need_completion else None)
    elif layout == "ifeval" and row.get("messages") is not None:  # IFBench's multi-turn layout (module docstring)
        ids, kwargs = _instructions(row, location)
        if verified_only and not _verified(row, location):
            return None
        messages = check_messages(row["messages"], location, need_completion=need_completion)
        check_turn_order(messages, location, end="assistant" if need_completion else None)
    else:
        prompt = _need(row, "prompt", (str, list, tuple), location)
        turns = _turns(prompt, "user", location, "prompt")
        names = _turn_names(prompt, "prompt")
        if layout == "ifeval":
            ids, kwargs = _instructions(row, location)
            if verified_only and not _verified(row, location):
                return None
        field = completion_field(row, layout, completion_name)
        if need_completion or row.get(field) is not None:
            answer = _need(row, field, (str, list, tuple), location)
            completion = _turns(answer, "assistant", location, field)
            names += _turn_names(answer, field)
            if not completion or completion[-1]["role"] != "assistant":
                raise _err("bad_value", "the completion must end with an assistant turn", location, field)
            if not completion[-1]["content"].strip():
                raise _err("empty_completion", "the completion is empty", location, field)
            turns += completion
        messages = check_messages(turns, location, "prompt", need_completion=False)
        if need_completion and not any(m["role"] == "user" for m in messages):
            raise _err("bad_value", "conversation has no user turn", location, "prompt")
        check_turn_order(messages, location, end="assistant" if need_completion else None, names=names)
    if not need_completion and not any(m["role"] == "user" for m in messages):
        raise _err("bad_value", "conversation has no user turn", location, "messages")
    return Example(messages=messages, source=source, row_id=row_id, key=key,
                   instruction_id_list=ids, kwargs=kwargs)
