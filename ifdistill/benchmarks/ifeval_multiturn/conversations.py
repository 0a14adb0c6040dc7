"""IFEval's prompts as three-turn conversations, built deterministically; or conversations read as they are.

For each single-turn row of ``eval.data`` (IFEval's layout, in its order):

1. turn 1 is the row's prompt, with its instructions;
2. turn 2 is a fixed assistant turn: the published response to that prompt (``eval.multiturn.responses``,
   by default GPT-4's responses in the shared data folder), paired by exact prompt text and, where no response
   has the prompt's text, by the row's position (the reference's rule: one GPT-4 response answers an older
   wording of prompt 2785, ``../shared/notes/ifeval-reference.md``);
3. turn 3 adds one new constraint: an instruction drawn uniformly among the types with a wording
   (:data:`~ifdistill.benchmarks.ifeval_multiturn.wording.WORDINGS`, or ``eval.multiturn.instructions``) that
   conflict with none of turn 1's (:mod:`~ifdistill.benchmarks.ifeval_multiturn.conflicts`), its kwargs drawn
   and worded by that type's :class:`~ifdistill.benchmarks.ifeval_multiturn.wording.Wording`.

The draws use a generator seeded from ``eval.multiturn.seed`` and the row's key alone, so a conversation does
not depend on the other rows, their order or ``max_examples``. A row for which every type conflicts with one
of turn 1's (``detectable_format:constrained_response`` conflicts with all) gets no conversation and is
counted (``skipped``). The conversation's instructions are turn 1's followed by the new one, so the final
reply is scored on all of them; :attr:`Conversations.carried` says how many came from earlier turns.

Rows that hold a conversation already (more than one user turn: the published IFBench multi-turn layout,
``messages`` with the final turn's ``instruction_id_list``) are read as they are, every instruction the
final turn's (``carried`` 0). A mix of the two is refused.

:data:`GENERATOR_VERSION` enters ``eval_config_hash``: bump it when what this module makes changes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from pathlib import Path
from typing import Any, Optional, Sequence

from ifdistill.benchmarks.ifeval_multiturn.conflicts import conflicts
from ifdistill.benchmarks.ifeval_multiturn.wording import WORDINGS
from ifdistill.data.records import Example
from ifdistill.data.sources import BadLine, json_lines
from ifdistill.evaluator.dataset import row_key
from ifdistill.hashing import sha256_file

GENERATOR_VERSION = "1"
#: GPT-4's published responses to IFEval's prompts, in the shared data folder.
GPT4_RESPONSES = "ifeval/input_response_data_gpt4_20231107_145030.jsonl"


class ConversationError(ValueError):
    """Rows or responses the conversations cannot be made from; the message names the file and row."""


@dataclasses.dataclass(frozen=True)
class Conversations:
    """The evaluated conversations, how many instructions of each came from earlier turns (by key), the keys
    of rows left without one, and the responses file's identity (``None`` when none was read)."""

    examples: list[Example]
    carried: dict[str, int]
    skipped: list[str]
    responses: Optional[dict[str, Any]]


def item_rng(seed: int, key: str) -> random.Random:
    """The generator of one conversation's draws: from the seed and the row's key only."""
    return random.Random(int.from_bytes(hashlib.sha256(f"{seed}\0{key}".encode()).digest()[:8], "little"))


def read_responses(path: Path) -> list[dict[str, str]]:
    """``{prompt, response}`` rows of a responses JSONL; :class:`ConversationError` naming file:line otherwise."""
    out = []
    try:
        rows = list(json_lines(path))
    except OSError as err:
        raise ConversationError(f"eval.multiturn.responses: cannot read {path} ({err.strerror})") from None
    except BadLine as err:
        raise ConversationError(str(err)) from None
    for line_no, row in rows:
        if not (isinstance(row, dict) and isinstance(row.get("prompt"), str) and isinstance(row.get("response"), str)):
            raise ConversationError(f"{path}:{line_no}: expected an object with string fields prompt and response")
        out.append({"prompt": row["prompt"], "response": row["response"]})
    return out


def _user_turns(ex: Example) -> int:
    return sum(m["role"] == "user" for m in ex.messages)


def new_constraint(key: str, turn1: Sequence[str], seed: int, allowed: Sequence[str]
                   ) -> Optional[tuple[str, dict[str, Any], str]]:
    """``(instruction id, kwargs, third turn's text)`` of one conversation, or ``None`` when every allowed type
    conflicts with one of ``turn1``'s instructions."""
    candidates = [iid for iid in sorted(allowed) if not any(conflicts(iid, t) for t in turn1)]
    if not candidates:
        return None
    rng = item_rng(seed, key)
    iid = rng.choice(candidates)
    kwargs, text = WORDINGS[iid].make(rng)
    return iid, kwargs, text


def build(examples: Sequence[Example], *, seed: int, instructions: Sequence[str], responses: Path) -> Conversations:
    """The conversations of ``examples`` (the module docstring's rules)."""
    turns = {_user_turns(ex) for ex in examples}
    if turns - {1} and 1 in turns:
        single = next(ex for ex in examples if _user_turns(ex) == 1)
        multi = next(ex for ex in examples if _user_turns(ex) > 1)
        raise ConversationError(f"eval.data mixes single-turn rows ({single.uid}) with conversations ({multi.uid}); "
                                "give IFEval rows (made into conversations) or conversations, not both")
    if 1 not in turns:  # conversations already: the final turn's instructions are all new
        return Conversations(list(examples), {row_key(ex): 0 for ex in examples}, [], None)
    published = read_responses(responses)
    by_prompt: dict[str, str] = {}
    for row in published:
        by_prompt.setdefault(row["prompt"], row["response"])
    allowed = list(instructions) or sorted(WORDINGS)
    out, carried, skipped = [], {}, []
    for index, ex in enumerate(examples):
        answer = by_prompt.get(ex.prompt)
        if answer is None:
            if index >= len(published):
                raise ConversationError(f"{responses}: no response to row {ex.uid} (no prompt with its text, and "
                                        f"no row {index + 1} to pair by position)")
            answer = published[index]["response"]
        turn1 = tuple(ex.instruction_id_list or ())
        drawn = new_constraint(row_key(ex), turn1, seed, allowed)
        if drawn is None:
            skipped.append(row_key(ex))
            continue
        iid, kwargs, text = drawn
        messages = (*ex.messages, {"role": "assistant", "content": answer}, {"role": "user", "content": text})
        out.append(dataclasses.replace(ex, messages=messages, instruction_id_list=(*turn1, iid),
                                       kwargs=(*(ex.kwargs or ()), kwargs)))
        carried[row_key(ex)] = len(turn1)
    identity = {"path": str(responses), "sha256": sha256_file(responses), "rows": len(published)}
    return Conversations(out, carried, skipped, identity)

