"""``detectable_format:*`` instructions: bullets, fixed answers, highlights, sections, JSON, title.

The regular expressions below *are* the benchmark's definitions, so their corner cases are kept on
purpose rather than "fixed":

* Bullets: a line starting (after optional whitespace) with ``*`` not followed by ``*``, or with
  ``-``. A ``---`` rule therefore counts as a bullet, and because ``\\s`` and ``[^*]`` also match a
  newline, a lone ``*`` line swallows the next line. The count must be exact.
* Highlights: ``*text*`` and ``**text**`` spans inside one line, each counted when its inner text is
  not blank. In ``**bold**`` the single-star pattern only finds the two empty ``**`` pairs, so the
  span counts once (via the double-star pattern).
* Sections: the splitter word (case as given, used as a regex) followed by a number; the count is
  the number of pieces of ``re.split`` minus one.
* JSON: strip; drop a leading ```` ```json ````, ```` ```Json ````, ```` ```JSON ````, ```` ``` ````
  (in that order, each at most once) and a trailing ```` ``` ````; strip again; ``json.loads``.
* Title: ``<<...>>`` within one line with non-blank content.
"""

from __future__ import annotations

import json
import re

from ifdistill.benchmarks.instruction_following.instruction_base import (
    Instruction,
    want_count,
    want_regex,
    want_text,
)

_STAR_BULLET_RE = re.compile(r"^\s*\*[^\*].*$", re.MULTILINE)
_DASH_BULLET_RE = re.compile(r"^\s*-.*$", re.MULTILINE)
_SINGLE_HIGHLIGHT_RE = re.compile(r"\*([^\n\*]*)\*")
_DOUBLE_HIGHLIGHT_RE = re.compile(r"\*\*([^\n\*]*)\*\*")
_TITLE_RE = re.compile(r"<<[^\n]+>>")

#: The answers ``constrained_response`` accepts (contained anywhere in the response).
CONSTRAINED_ANSWERS = ("My answer is yes.", "My answer is no.", "My answer is maybe.")

_JSON_FENCES = ("```json", "```Json", "```JSON", "```")


class BulletLists(Instruction):
    """Exactly ``num_bullets`` markdown bullet lines (``* item`` or ``- item``)."""

    instruction_id = "detectable_format:number_bullet_lists"
    params = ("num_bullets",)

    def __init__(self, *, num_bullets):
        self.num_bullets = want_count("num_bullets", num_bullets)

    def check(self, text: str) -> bool:
        found = len(_STAR_BULLET_RE.findall(text)) + len(_DASH_BULLET_RE.findall(text))
        return found == self.num_bullets


class ConstrainedResponse(Instruction):
    """The response contains one of "My answer is yes." / "...no." / "...maybe." (case as written)."""

    instruction_id = "detectable_format:constrained_response"

    def check(self, text: str) -> bool:
        return any(answer in text for answer in CONSTRAINED_ANSWERS)


class HighlightedSections(Instruction):
    """At least ``num_highlights`` non-blank ``*highlighted*`` (or ``**bold**``) spans."""

    instruction_id = "detectable_format:number_highlighted_sections"
    params = ("num_highlights",)

    def __init__(self, *, num_highlights):
        self.num_highlights = want_count("num_highlights", num_highlights)

    def check(self, text: str) -> bool:
        if "*" not in text:
            return self.num_highlights <= 0
        found = sum(1 for m in _SINGLE_HIGHLIGHT_RE.finditer(text) if m.group(1).strip())
        found += sum(1 for m in _DOUBLE_HIGHLIGHT_RE.finditer(text) if m.group(1).strip())
        return found >= self.num_highlights


class MultipleSections(Instruction):
    """At least ``num_sections`` sections, each opened by ``<section_spliter> <number>``."""

    instruction_id = "detectable_format:multiple_sections"
    params = ("section_spliter", "num_sections")

    def __init__(self, *, section_spliter, num_sections):
        self.section_spliter = want_text("section_spliter", section_spliter, strip=True)
        self.num_sections = want_count("num_sections", num_sections)
        self._pattern = want_regex(
            "section_spliter", r"\s?" + self.section_spliter + r"\s?\d+\s?"
        )

    def check(self, text: str) -> bool:
        return len(self._pattern.split(text)) - 1 >= self.num_sections


class JsonFormat(Instruction):
    """The whole response, optionally inside a markdown code fence, parses as JSON."""

    instruction_id = "detectable_format:json_format"

    def check(self, text: str) -> bool:
        body = text.strip()
        for fence in _JSON_FENCES:
            body = body.removeprefix(fence)
        body = body.removesuffix("```").strip()
        try:
            json.loads(body)
        except (ValueError, RecursionError):
            # RecursionError: absurdly deep nesting, where the reference crashes; ifdistill answers "no".
            return False
        return True


class Title(Instruction):
    """A title in double angular brackets, ``<<title>>``, on one line and not blank."""

    instruction_id = "detectable_format:title"

    def check(self, text: str) -> bool:
        if "<<" not in text:
            return False
        return any(t.lstrip("<").rstrip(">").strip() for t in _TITLE_RE.findall(text))
