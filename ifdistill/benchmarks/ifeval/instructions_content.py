"""Content, start/end, combination and punctuation instructions.

``detectable_content:number_placeholders``, ``detectable_content:postscript``,
``combination:two_responses``, ``combination:repeat_prompt``, ``startend:end_checker``,
``startend:quotation`` and ``punctuation:no_comma``.

Rules worth knowing (they decide parity with the reference):

* Placeholders are non-greedy ``[...]`` within a line; ``[]`` counts.
* Postscript: the lower-cased response contains ``p.s.`` (marker ``P.S.``) or ``p.p.s`` (marker
  ``P.P.S``), each dot optionally followed by one whitespace character, **anywhere** - there is no
  line-start anchor. Any other marker is used lower-cased as a regular expression.
* ``repeat_prompt`` compares with the ``prompt_to_repeat`` kwarg, never with the row's prompt
  (the reference only re-reads the row's prompt for an instruction whose arguments contain a key
  named ``prompt``, and none does).
* ``end_checker`` strips whitespace, then ``"`` characters, lower-cases, then ``endswith``.
"""

from __future__ import annotations

import re

from ifdistill.benchmarks.instruction_following.instruction_base import (
    Instruction,
    want_count,
    want_regex,
    want_text,
)

_PLACEHOLDER_RE = re.compile(r"\[.*?\]")
_RESPONSE_SEPARATOR = "******"


class Placeholders(Instruction):
    """At least ``num_placeholders`` placeholders in square brackets, such as ``[address]``."""

    instruction_id = "detectable_content:number_placeholders"
    params = ("num_placeholders",)

    def __init__(self, *, num_placeholders):
        self.num_placeholders = want_count("num_placeholders", num_placeholders)

    def check(self, text: str) -> bool:
        return len(_PLACEHOLDER_RE.findall(text)) >= self.num_placeholders


class Postscript(Instruction):
    """A postscript introduced by ``postscript_marker`` (``P.S.`` or ``P.P.S``) appears."""

    instruction_id = "detectable_content:postscript"
    params = ("postscript_marker",)

    def __init__(self, *, postscript_marker):
        self.postscript_marker = want_text("postscript_marker", postscript_marker, strip=True)
        if self.postscript_marker == "P.P.S":
            pattern = r"\s*p\.\s?p\.\s?s.*$"
        elif self.postscript_marker == "P.S.":
            pattern = r"\s*p\.\s?s\..*$"
        else:
            pattern = r"\s*" + self.postscript_marker.lower() + r".*$"
        self._pattern = want_regex("postscript_marker", pattern, re.MULTILINE)

    def check(self, text: str) -> bool:
        return self._pattern.search(text.lower()) is not None


class TwoResponses(Instruction):
    """Two different answers separated by ``******``; blank pieces are allowed only at the ends."""

    instruction_id = "combination:two_responses"

    def check(self, text: str) -> bool:
        pieces = text.split(_RESPONSE_SEPARATOR)
        last = len(pieces) - 1
        answers = []
        for index, piece in enumerate(pieces):
            if piece.strip():
                answers.append(piece.strip())
            elif index not in (0, last):
                return False
        return len(answers) == 2 and answers[0] != answers[1]


class RepeatPrompt(Instruction):
    """The response starts with ``prompt_to_repeat`` (both stripped and lower-cased)."""

    instruction_id = "combination:repeat_prompt"
    params = ("prompt_to_repeat",)

    def __init__(self, *, prompt_to_repeat):
        self.prompt_to_repeat = want_text("prompt_to_repeat", prompt_to_repeat)
        self._expected = self.prompt_to_repeat.strip().lower()

    def check(self, text: str) -> bool:
        return text.strip().lower().startswith(self._expected)


class EndPhrase(Instruction):
    """The response ends with ``end_phrase`` (case-insensitive; surrounding quotes are ignored)."""

    instruction_id = "startend:end_checker"
    params = ("end_phrase",)

    def __init__(self, *, end_phrase):
        self.end_phrase = want_text("end_phrase", end_phrase, strip=True)
        self._expected = self.end_phrase.lower()

    def check(self, text: str) -> bool:
        return text.strip().strip('"').lower().endswith(self._expected)


class Quotation(Instruction):
    """The stripped response is wrapped in double quotes (and is longer than one character)."""

    instruction_id = "startend:quotation"

    def check(self, text: str) -> bool:
        body = text.strip()
        return len(body) > 1 and body[0] == '"' and body[-1] == '"'


class NoComma(Instruction):
    """No ASCII comma anywhere (other comma characters, such as ``，``, are allowed)."""

    instruction_id = "punctuation:no_comma"

    def check(self, text: str) -> bool:
        return "," not in text
