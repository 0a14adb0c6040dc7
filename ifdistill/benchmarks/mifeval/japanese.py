"""M-IFEval's Japanese instructions (``ja:``): 33 ids, 4 of them IFEval's checkers.

Keywords are janome token surfaces, compared exactly (a keyword janome splits, such as ``創造性``, is
never found); sentences are ja_sentence_segmenter's segments (:mod:`.tools`). Relations: ``以上`` is
``>=``, ``未満`` ``<``. The text's own marks replace IFEval's: bullets ``・``, highlights ``《…》``, titles
``『…』``, sections ``第N章``, quotations ``「…」``, the comma ``、``. Character classes are code-point ranges
(kanji U+4E00–U+9FAF, hiragana U+3041–U+3093, katakana U+30A1–U+30F3), not Unicode properties.
"""

from __future__ import annotations

import re
import unicodedata

from ifdistill.benchmarks.instruction_following.instruction_base import (
    Instruction,
    InvalidKwargsError,
    want_count,
    want_regex,
    want_text,
    want_text_list,
)
from ifdistill.benchmarks.mifeval import tools
from ifdistill.benchmarks.mifeval.common import Counted, FirstWordBase, IdTable, LanguageOf, options_checker

_KANJI_RUN_RE = re.compile(r"[\u4E00-\u9FAF]+")
_KANJI_RE = re.compile(r"[\u4E00-\u9FAF]")
_RUBY_RE = re.compile(r"[\u4E00-\u9FAF]+（[ぁ-ん]+）")
_QUOTED_RE = (re.compile(r"「[^\n]*?」"), re.compile(r"『[^\n]*?』"))
_BULLET_RE = re.compile(r"^\s*・[^・].*$", re.MULTILINE)
_NUMBERED_RE = re.compile(r"^\s*\d+\.\s.*$", re.MULTILINE)
_HIGHLIGHT_RE = re.compile(r"《[^\n《》]*》")
_TITLE_RE = re.compile(r"『[^\n]+』")
_DIGIT_RE = re.compile(r"\d")
_TERMINATORS_RE = re.compile(r"[。！？]")


def _unquoted(text: str) -> str:
    """The text without its ``「…」`` spans, then without its ``『…』`` spans (each within a line)."""
    for pattern in _QUOTED_RE:
        text = pattern.sub("", text)
    return text


def _surfaces(text: str) -> list[str]:
    return [surface for surface, _ in tools.japanese_tokens(text)]


class KeywordExistence(Instruction):
    """Every keyword is the surface of some janome token."""

    instruction_id = "ja:keywords:existence"
    params = ("keywords",)

    def __init__(self, *, keywords):
        self.keywords = want_text_list("keywords", keywords)

    def check(self, text: str) -> bool:
        return set(self.keywords) <= set(_surfaces(text))


class KeywordFrequency(Counted):
    """janome tokens whose surface is the keyword."""

    instruction_id = "ja:keywords:frequency"
    language = "ja"
    params = ("frequency", "relation", "keyword")

    def setup(self, *, keyword) -> None:
        want_text("keyword", keyword)

    def measure(self, text: str) -> int:
        return _surfaces(text).count(self.keyword)


class ForbiddenWords(Instruction):
    """No janome token's surface is a forbidden word."""

    instruction_id = "ja:keywords:forbidden_words"
    params = ("forbidden_words",)

    def __init__(self, *, forbidden_words):
        self.forbidden_words = want_text_list("forbidden_words", forbidden_words)

    def check(self, text: str) -> bool:
        return set(self.forbidden_words).isdisjoint(_surfaces(text))


class LetterFrequency(Counted):
    """Occurrences of the hiragana ``letter`` and of its full-width katakana (``し`` + ``シ``)."""

    instruction_id = "ja:keywords:letter_frequency"
    language = "ja"
    params = ("let_frequency", "let_relation", "letter")

    def setup(self, *, letter) -> None:
        if not isinstance(letter, str) or len(letter) != 1 or not "ぁ" <= letter <= "ん":
            raise InvalidKwargsError("letter", f"expected one hiragana (ぁ…ん), got {letter!r}")
        self._katakana = chr(ord(letter) + 0x60)

    def measure(self, text: str) -> int:
        return text.count(self.letter) + text.count(self._katakana)


class ResponseLanguage(LanguageOf):
    instruction_id = "ja:language:response_language"


class NthParagraphFirstWord(FirstWordBase):
    """The paragraph, without leading ``「`` then ``『``, begins with ``first_word`` (no word segmentation)."""

    instruction_id = "ja:length_constraints:nth_paragraph_first_word"

    def starts_with(self, paragraph: str) -> bool:
        return paragraph.lstrip("「").lstrip("『").startswith(self.first_word.lower())


class NumberOfLetters(Counted):
    """Code points of the whole response (spaces, newlines and Markdown included)."""

    instruction_id = "ja:length_constraints:number_letters"
    language = "ja"
    params = ("num_letters", "relation")

    def measure(self, text: str) -> int:
        return len(text)


class NumberOfSentences(Counted):
    """ja_sentence_segmenter's segments (a line is a sentence unless it ends with ``の``)."""

    instruction_id = "ja:length_constraints:number_sentences"
    language = "ja"
    params = ("num_sentences", "relation")

    def measure(self, text: str) -> int:
        return tools.count_japanese_sentences(text)


class Postscript(Instruction):
    """A postscript marker anywhere, ignoring case: ``P.S.`` and ``P.P.S`` as IFEval's patterns, any other
    marker (``P.P.S.``, ``追伸``) literally."""

    instruction_id = "ja:detectable_content:postscript"
    params = ("postscript_marker",)

    def __init__(self, *, postscript_marker):
        self.postscript_marker = want_text("postscript_marker", postscript_marker, strip=True)
        marker = {"P.S.": r"p\.\s?s\.", "P.P.S": r"p\.\s?p\.\s?s"}.get(self.postscript_marker,
                                                                       re.escape(self.postscript_marker))
        self._pattern = want_regex("postscript_marker", r"\s*" + marker + r".*$", re.MULTILINE | re.IGNORECASE)

    def check(self, text: str) -> bool:
        return self._pattern.search(text) is not None


class _Lines(Instruction):
    """Exactly as many lines of ``pattern`` as the one kwarg says (subclasses: the pattern, the kwarg)."""

    pattern: re.Pattern[str]

    def __init__(self, **kwargs):
        (name,) = self.params
        setattr(self, name, want_count(name, kwargs[name]))
        self._wanted = kwargs[name]

    def check(self, text: str) -> bool:
        return len(self.pattern.findall(text)) == self._wanted


class BulletLists(_Lines):
    """Exactly ``num_bullets`` ``・`` bullet lines (``*``, ``-``, ``•`` do not count)."""

    instruction_id = "ja:detectable_format:number_bullet_lists"
    params = ("num_bullets",)
    pattern = _BULLET_RE


class NumberedLists(_Lines):
    """Exactly ``num_items`` lines ``<digits>. item`` (``1．``, ``1)``, ``①`` do not count)."""

    instruction_id = "ja:detectable_format:number_numbered_lists"
    params = ("num_items",)
    pattern = _NUMBERED_RE


class HighlightedSections(Instruction):
    """At least ``num_highlights`` non-blank ``《…》`` spans within a line."""

    instruction_id = "ja:detectable_format:number_highlighted_sections"
    params = ("num_highlights",)

    def __init__(self, *, num_highlights):
        self.num_highlights = want_count("num_highlights", num_highlights)

    def check(self, text: str) -> bool:
        return sum(1 for m in _HIGHLIGHT_RE.findall(text) if m[1:-1].strip()) >= self.num_highlights


class MultipleSections(Instruction):
    """At least ``num_sections`` sections opened by ``第<digits><section_spliter>`` (``第1章``; not ``第一章``)."""

    instruction_id = "ja:detectable_format:multiple_sections"
    params = ("section_spliter", "num_sections")

    def __init__(self, *, section_spliter, num_sections):
        self.section_spliter = want_text("section_spliter", section_spliter, strip=True)
        self.num_sections = want_count("num_sections", num_sections)
        self._pattern = want_regex("section_spliter", r"\s?第[\d\uFF10-\uFF19]+" + self.section_spliter + r"\s?")

    def check(self, text: str) -> bool:
        return len(self._pattern.split(text)) - 1 >= self.num_sections


class Title(Instruction):
    """A ``『…』`` span on one line with non-blank content."""

    instruction_id = "ja:detectable_format:title"

    def check(self, text: str) -> bool:
        return any(m.lstrip("『").rstrip("』").strip() for m in _TITLE_RE.findall(text))


class NominalEnding(Instruction):
    """At least ``count`` sentences (outside quotes) whose ``。``/``！``/``？`` follows a noun (janome's POS)."""

    instruction_id = "ja:detectable_format:nominal_ending"
    params = ("count",)

    def __init__(self, *, count):
        self.count = want_count("count", count)

    def check(self, text: str) -> bool:
        tokens = tools.japanese_tokens(_unquoted(text))
        found = sum(1 for (_, before), (surface, _) in zip(tokens, tokens[1:])
                    if surface and surface in "。！？" and before.startswith("名詞"))
        return found >= self.count


class RepeatPrompt(Instruction):
    """The stripped response starts with the stripped ``prompt_to_repeat`` (case-sensitive)."""

    instruction_id = "ja:combination:repeat_prompt"
    params = ("prompt_to_repeat",)

    def __init__(self, *, prompt_to_repeat):
        self.prompt_to_repeat = want_text("prompt_to_repeat", prompt_to_repeat)

    def check(self, text: str) -> bool:
        return text.strip().startswith(self.prompt_to_repeat.strip())


class EndPhrase(Instruction):
    """The response ends with ``end_phrase``, each stripped of whitespace and then of ``」``/``』``."""

    instruction_id = "ja:startend:end_checker"
    params = ("end_phrase",)

    def __init__(self, *, end_phrase):
        self.end_phrase = want_text("end_phrase", end_phrase, strip=True)

    def check(self, text: str) -> bool:
        return text.strip().strip("」』").endswith(self.end_phrase.strip("」』"))


class Quotation(Instruction):
    """The stripped response is wrapped in ``「…」``."""

    instruction_id = "ja:startend:quotation"

    def check(self, text: str) -> bool:
        body = text.strip()
        return len(body) > 1 and body[0] == "「" and body[-1] == "」"


class SentenceUnifiedEnd(Instruction):
    """Outside quotes, every piece between ``。``/``！``/``？`` that is not empty ends with ``ending`` (a final
    newline after the last ``。`` is such a piece)."""

    instruction_id = "ja:startend:sentence_unified_end"
    params = ("ending",)

    def __init__(self, *, ending):
        self.ending = want_text("ending", ending)

    def check(self, text: str) -> bool:
        return all(p.endswith(self.ending) for p in _TERMINATORS_RE.split(_unquoted(text)) if p)


def _characters(instruction_id: str, doc: str, test) -> type[Instruction]:
    """An instruction that holds when ``test(text)`` does."""
    return type(instruction_id.rsplit(":", 1)[1].title().replace("_", ""), (Instruction,), {
        "instruction_id": instruction_id, "__doc__": doc, "__module__": __name__,
        "check": lambda self, text: test(text)})


def _free(char: str) -> bool:
    """Not a letter (digits, punctuation, spaces, symbols, emoji are allowed in an "only" instruction)."""
    return not unicodedata.category(char).startswith("L")


NoComma = _characters("ja:punctuation:no_comma", "No ideographic comma ``、``.", lambda t: "、" not in t)
NoPeriod = _characters("ja:punctuation:no_period", "No ideographic full stop ``。``.", lambda t: "。" not in t)
Kansuuji = _characters("ja:letters:kansuuji", "No decimal digit of any script (numbers in kanji).",
                       lambda t: _DIGIT_RE.search(t) is None)
Furigana = _characters(
    "ja:letters:furigana", "Every kanji run is followed by its reading in hiragana in ``（…）``.",
    lambda t: len(_KANJI_RUN_RE.findall(t)) == len(_RUBY_RE.findall(t)))
NoHiragana = _characters("ja:letters:no_hiragana", "No hiragana (U+3041–U+3096).",
                         lambda t: not any("\u3041" <= c <= "\u3096" for c in t))
HiraganaOnly = _characters("ja:letters:hiragana_only", "Every letter is a hiragana (U+3041–U+3093) or ``ー``.",
                           lambda t: all("\u3041" <= c <= "\u3093" or c == "ー" or _free(c) for c in t))
NoKatakana = _characters("ja:letters:no_katakana", "No katakana (U+30A1–U+30FA, half-width U+FF66–U+FF9F).",
                         lambda t: not any("\u30a1" <= c <= "\u30fa" or "\uff66" <= c <= "\uff9f" for c in t))
KatakanaOnly = _characters(
    "ja:letters:katakana_only", "Every letter is a katakana (U+30A1–U+30F3, U+FF66–U+FF9F), ``ー`` or ``・``.",
    lambda t: all("\u30a1" <= c <= "\u30f3" or c in "ー・" or "\uff66" <= c <= "\uff9f" or _free(c) for c in t))


class Kanji(Counted):
    """Kanji (U+4E00–U+9FAF; ``々`` is not counted)."""

    instruction_id = "ja:letters:kanji"
    language = "ja"
    params = ("kanji_limit", "relation")

    def measure(self, text: str) -> int:
        return len(_KANJI_RE.findall(text))


ConstrainedResponse = options_checker("ja:detectable_format:constrained_response",
                                      ("はい、そうです。", "いいえ、違います。", "どちらとも言えません。"))

#: ``ja:`` id -> checker.
JAPANESE = IdTable("ja", (
    KeywordExistence, KeywordFrequency, ForbiddenWords, LetterFrequency, ResponseLanguage, NthParagraphFirstWord,
    NumberOfLetters, NumberOfSentences, Postscript, BulletLists, NumberedLists, HighlightedSections,
    MultipleSections, Title, NominalEnding, RepeatPrompt, EndPhrase, Quotation, SentenceUnifiedEnd, NoComma,
    NoPeriod, Kansuuji, Furigana, NoHiragana, HiraganaOnly, NoKatakana, KatakanaOnly, Kanji, ConstrainedResponse,
), same=(
    "combination:two_responses", "detectable_content:number_placeholders", "detectable_format:json_format",
    "length_constraints:number_paragraphs",
))
