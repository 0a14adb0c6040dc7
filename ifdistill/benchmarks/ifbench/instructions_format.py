"""IFBench's ``format:*`` constraints.

The checks are kept as the reference defines them, corner cases included, because they *are* the
benchmark: ``format:line_indent`` removes blank lines while iterating over the same list (so a
blank line right after another blank line is kept and then compared), ``format:thesis`` slices
``<em>`` as if it were ``<i>``, ``format:no_bullets_bullets`` stops accepting sentence lines after
an empty one, ``format:options`` compares ``a) b) c)``-style options exactly and other options
case- and punctuation-insensitively.

``format:quote_unquote`` raises ``IndexError`` in the reference when nothing is left after the
whitespace, digits and punctuation other than ``"`` are stripped; such a text holds no quote at all,
so it passes here, as every other text without a quote does.
"""

from __future__ import annotations

import re
import string

from ifdistill.benchmarks.instruction_following.instruction_base import Instruction, want_text
from ifdistill.benchmarks.ifbench import text as T
from ifdistill.benchmarks.ifbench.instructions_count import DELETE_PUNCT, PUNCT, PUNCT_SPACE

_OPENING = {")": "(", "]": "[", "}": "{"}
_MC_OPTIONS_RE = re.compile(r"\W*[aA]\W*[bB]\W*[cC]\W*")
_QUOTE_TAIL = string.digits + PUNCT.replace('"', "")


class NestedParentheses(Instruction):
    """A bracket group (``()[]{}``) closed after reaching depth 5; a mismatch resets the count."""

    instruction_id = "format:parentheses"

    def check(self, text: str) -> bool:
        if sum(text.count(c) for c in "([{") < 5:
            return False  # depth 5 needs five openers
        stack: list[str] = []
        deepest = 0
        for char in text:
            if char in "([{":
                stack.append(char)
                deepest = max(deepest, len(stack))
            elif char in ")]}":
                if stack and stack[-1] == _OPENING[char]:
                    stack.pop()
                    if deepest >= 5 and len(stack) < deepest:
                        return True
                else:
                    stack, deepest = [], 0
        return False


class NestedQuotes(Instruction):
    """Quotes (``"`` and ``'``) nested three levels deep, closed again."""

    instruction_id = "format:quotes"

    def check(self, text: str) -> bool:
        if text.count('"') + text.count("'") < 6:
            return False  # three levels need three quotes opened and three closed
        stack: list[str] = []
        reached = depth = 0
        for char in text:
            if stack and char == stack[-1]:
                stack.pop()
                depth -= 1
                if reached - depth >= 3:
                    return True
            elif char == '"' or char == "'":
                stack.append(char)
                depth += 1
                reached = max(reached, depth)
        return False


class Options(Instruction):
    """The response is one of the ``options`` (split on "/", else "or", else ",")."""

    instruction_id = "format:options"
    params = ("options",)

    def __init__(self, *, options):
        self.options = want_text("options", options)
        self._exact = _MC_OPTIONS_RE.match(self.options) is not None
        if "/" in self.options:
            separator = "/"
        elif "or" in self.options:
            separator = "or"
        else:
            separator = ","
        self._choices = [o.strip() for o in self.options.split(separator)]
        self._normalised = {o.strip(PUNCT_SPACE).lower() for o in self._choices}

    def check(self, text: str) -> bool:
        if self._exact:
            return text in self._choices
        return text.strip(PUNCT_SPACE).lower() in self._normalised


class NewlineWords(Instruction):
    """One word per line: as many non-empty lines as whitespace words (punctuation deleted)."""

    instruction_id = "format:newline"

    def check(self, text: str) -> bool:
        body = text.translate(DELETE_PUNCT).strip()
        lines = [line for line in body.split("\n") if line != ""]
        return len(lines) == len(body.split())


def _without_punct(text: str) -> str:
    return text.translate(DELETE_PUNCT).strip()


class EmojiSentences(Instruction):
    """Every sentence ends with an emoji (in its last two characters once punctuation is deleted),
    or the next sentence starts with one."""

    instruction_id = "format:emoji"

    def check(self, text: str) -> bool:
        sentences = T.split_into_sentences(text)
        for i, sentence in enumerate(sentences):
            stripped = _without_punct(sentence)
            if not stripped:
                return False
            last = stripped[-1]
            second_last = stripped[-2] if len(stripped) > 1 else last
            if not T.is_emoji(last) and not T.is_emoji(second_last):
                if i == len(sentences) - 1:
                    return False
                following = _without_punct(sentences[i + 1])
                if not following or not T.is_emoji(following[0]):
                    return False
        return True


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


class LineIndent(Instruction):
    """Each line is indented by more spaces than the line before (blank lines removed as the
    reference removes them)."""

    instruction_id = "format:line_indent"

    def check(self, text: str) -> bool:
        lines = text.split("\n")
        for line in lines:  # mutating while iterating, as the reference does
            if not line.strip():
                lines.remove(line)
        return all(_indent(b) > _indent(a) for a, b in zip(lines, lines[1:]))


class QuoteUnquote(Instruction):
    """No two quotes touch (whitespace ignored) and the text does not end with a quote."""

    instruction_id = "format:quote_unquote"

    def check(self, text: str) -> bool:
        body = text.replace("\u201c", '"').replace("\u201d", '"').replace("'\"'", "")
        body = "".join(body.split())
        if '""' in body:
            return False
        tail = body.strip(_QUOTE_TAIL)
        return not tail or tail[-1] != '"'


class SpecialBullets(Instruction):
    """The separator ``sep`` occurs at least twice."""

    instruction_id = "format:list"
    params = ("sep",)

    def __init__(self, *, sep):
        self.sep = want_text("sep", sep)
        self._pattern = re.compile(re.escape(self.sep))

    def check(self, text: str) -> bool:
        return len(self._pattern.findall(text)) >= 2


class ItalicsThesis(Instruction):
    """A non-blank ``<i>``/``<em>`` span followed by non-blank text."""

    instruction_id = "format:thesis"

    def check(self, text: str) -> bool:
        index = text.find("<i>")
        if index == -1:
            index = text.find("<em>")
            if index == -1:
                return False
        text = text[index:]
        end = text.find("</i>")
        if end == -1:
            end = text.find("</em>")
            if end == -1:
                return False
        return text[3:end].strip() != "" and text[end + 4 :].strip() != ""


class SubBullets(Instruction):
    """Every piece after a ``*`` contains a ``-``."""

    instruction_id = "format:sub-bullets"

    def check(self, text: str) -> bool:
        return all("-" in piece for piece in text.split("*")[1:])


class SentencesThenBullets(Instruction):
    """Lines of at least two sentences, then at least two lines starting with ``*``, nothing after."""

    instruction_id = "format:no_bullets_bullets"

    def check(self, text: str) -> bool:
        accepting: object = True  # the reference reuses one variable for the flag and the sentences
        sentences = bullets = 0
        for line in text.split("\n"):
            if line.strip().startswith("*"):
                accepting = False
                if sentences < 2:
                    return False
                bullets += 1
            elif accepting:
                accepting = T.split_into_sentences(line.strip())
                sentences += len(accepting)
            else:
                return False
        return bullets >= 2


class TitleCase(Instruction):
    """No ``nltk.word_tokenize`` token starts with a lower-case letter followed by cased letters
    of one case (``word``, ``wORD``)."""

    instruction_id = "format:title_case"

    def check(self, text: str) -> bool:
        for word in T.word_tokens(text):
            head, tail = word[0], word[1:]
            if head.isupper() and tail.islower():
                continue
            if head.islower() and (tail.isupper() or tail.islower()):
                return False
        return True


class OutputTemplate(Instruction):
    """Contains "My Answer:", "My Conclusion:" and "Future Outlook:"."""

    instruction_id = "format:output_template"

    def check(self, text: str) -> bool:
        return "My Answer:" in text and "My Conclusion:" in text and "Future Outlook:" in text


class NoWhitespace(Instruction):
    """No whitespace character at all."""

    instruction_id = "format:no_whitespace"

    def check(self, text: str) -> bool:
        return not any(char.isspace() for char in text)


FORMAT_INSTRUCTIONS: tuple[type[Instruction], ...] = (
    NestedParentheses, NestedQuotes, Options, NewlineWords, EmojiSentences, LineIndent,
    QuoteUnquote, SpecialBullets, ItalicsThesis, SubBullets, SentencesThenBullets, TitleCase,
    OutputTemplate, NoWhitespace,
)  # fmt: skip
