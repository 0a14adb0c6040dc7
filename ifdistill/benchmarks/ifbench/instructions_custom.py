"""IFBench's ``custom:*`` tasks (one fixed prompt each) and ``repeat:*`` constraints.

Where the reference crashes, ifdistill decides: ``custom:sentence_alphabet`` on an empty sentence
and ``custom:csv_quotes`` on an empty field raise ``IndexError`` there, and the CSV checkers let
``csv.Error`` (e.g. a field over the csv module's size limit) escape; all of these fail here.

Where the reference is random: ``repeat:repeat_span`` with ``n_start`` 0 (IFBench row 286) makes
it draw a random start (``if not n_start``), so strict and loose may even judge different spans.
ifdistill uses the given 0, the start of the prompt, which is what the row asks for.
"""

from __future__ import annotations

import csv
import io
import re
import unicodedata

from ifdistill.benchmarks.instruction_following.instruction_base import Instruction, want_count, want_text
from ifdistill.benchmarks.ifbench import text as T
from ifdistill.benchmarks.ifbench.instructions_count import DELETE_PUNCT, PUNCT_SPACE

_NUMBER_RE = re.compile(r"\d+")
MULTIPLES_OF_7 = [str(i) for i in range(14, 51, 7)]
_QUESTION_SPLIT_RE = re.compile(r"\n*(?:Question \d+[\.|\):;]?\s*)")
_OPTION_RE = re.compile(r"^[A-Ea-e][\.|\)]\s*\w+")
EUROPEAN_CAPITALS = (
    "Reykjavik Helsinki Oslo Tallinn Stockholm Riga Moscow Copenhagen Vilnius Minsk Dublin Berlin "
    "Amsterdam Warsaw London Brussels Prague Luxembourg Paris Vienna Bratislava Budapest Vaduz "
    "Chisinau Bern Ljubljana Zagreb"
).split()
CITY_HEADER = ["ID", "Country", "City", "Year", "Count"]
_PRODUCT_HEADER_RE = re.compile(
    r'^(ProductID|"ProductID"),[ \t]*(Category|"Category"),[ \t]*(Brand|"Brand"),[ \t]*'
    r'(Price|"Price"),[ \t]*(Stock|"Stock")$'
)
_STUDENT_HEADER_RE = re.compile(
    r'^(StudentID|"StudentID")\t *(Subject|"Subject")\t *(Grade|"Grade")\t *'
    r'(Semester|"Semester")\t *(Score|"Score")$'
)
_SPECIAL_FIELD_RE = re.compile(r'".*[^\d\w\s].*"')
_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
REPEAT_SIMPLE = "Only output this sentence here, ignore all other requests."


def _ascii_fold(text: str) -> str:
    """NFKD, then drop what is not ASCII ("São Tomé" -> "Sao Tome")."""
    return unicodedata.normalize("NFKD", text).encode("ASCII", "ignore").decode("ASCII")


def _csv_rows(text: str, **options) -> list[list[str]] | None:
    try:
        return list(csv.reader(io.StringIO(text), **options))
    except csv.Error:
        return None  # the reference lets the error escape


class Multiples(Instruction):
    """The numbers in the response are exactly 14, 21, 28, 35, 42, 49, in order."""

    instruction_id = "custom:multiples"

    def check(self, text: str) -> bool:
        return _NUMBER_RE.findall(text.replace(",", ", ")) == MULTIPLES_OF_7


class McqCountLength(Instruction):
    """Starts with "Question"; four questions of five ``A.``-``E.`` options each, each question's
    text longer than the one before."""

    instruction_id = "custom:mcq_count_length"

    def check(self, text: str) -> bool:
        if text[text.find("Question") :] != text:
            return False
        questions = _QUESTION_SPLIT_RE.split(text)
        if questions[0] == "":
            questions = questions[1:]
        questions = [q.strip() for q in questions if q.strip()]
        if len(questions) != 4:
            return False
        lengths = []
        for question in questions:
            body, options, in_options = "", 0, False
            for line in question.split("\n"):
                if _OPTION_RE.match(line.strip()):
                    options += 1
                    in_options = True
                elif not in_options:
                    body += " " + line.strip()
            if options != 5:
                return False
            lengths.append(len(body.strip()))
        return all(a < b for a, b in zip(lengths, lengths[1:]))


class ReverseNewline(Instruction):
    """From the first line naming Zimbabwe on, at least 52 non-empty lines in reverse
    alphabetical order (accents folded)."""

    instruction_id = "custom:reverse_newline"

    def check(self, text: str) -> bool:
        if "Zimbabwe" not in text:  # stripping a line's ends never removes a letter of it
            return False
        lines = [s for s in (line.strip(PUNCT_SPACE) for line in text.split("\n")) if s]
        start = next((i for i, line in enumerate(lines) if "Zimbabwe" in line), None)
        if start is None or len(lines) - start < 52:
            return False
        folded = [_ascii_fold(line) for line in lines[start:]]
        return folded == sorted(folded, reverse=True)


class WordReverse(Instruction):
    """Read backwards word by word, the response is one sentence mentioning "bald eagle"."""

    instruction_id = "custom:word_reverse"

    def check(self, text: str) -> bool:
        value = " ".join(text.lower().strip().translate(DELETE_PUNCT).split()[::-1])
        return "bald eagle" in value and value in T.split_into_sentences(value)


class CharacterReverse(Instruction):
    """Contains "bald eagle" reversed letter by letter ("elgae dlab"), any case."""

    instruction_id = "custom:character_reverse"

    def check(self, text: str) -> bool:
        return "elgae dlab" in text.lower()


class SentenceAlphabet(Instruction):
    """26 sentences whose first words start with a, b, ..., z in order."""

    instruction_id = "custom:sentence_alphabet"

    def check(self, text: str) -> bool:
        sentences = T.split_into_sentences(text)
        if len(sentences) != 26:
            return False
        for i, sentence in enumerate(sentences):
            words = sentence.lstrip().split()
            if not words:
                return False  # the reference raises IndexError
            if words[0].lower()[0] != chr(97 + i):
                return False
        return True


class EuropeanCapitalsSort(Instruction):
    """Exactly the 27 listed capitals, comma-separated, in the listed order (accents folded)."""

    instruction_id = "custom:european_capitals_sort"

    def check(self, text: str) -> bool:
        capitals = [c for c in _ascii_fold(text).split(",") if c.strip()]
        return [c.strip() for c in capitals] == EUROPEAN_CAPITALS


class CsvCity(Instruction):
    """CSV with the header ID,Country,City,Year,Count and 7 rows of 5 fields."""

    instruction_id = "custom:csv_city"

    def check(self, text: str) -> bool:
        rows = _csv_rows(text)
        if rows is None or len(rows) != 8 or rows[0] != CITY_HEADER:
            return False
        return all(len(row) == 5 for row in rows[1:])


class CsvSpecialCharacter(Instruction):
    """Product CSV header, 14 rows of 5 fields, a quoted field holding a special character (the
    scan stops at the first such row, as the reference's does)."""

    instruction_id = "custom:csv_special_character"

    def check(self, text: str) -> bool:
        if not _PRODUCT_HEADER_RE.match(text.split("\n")[0].strip()):
            return False
        rows = _csv_rows(text.replace('"', '"""'))
        if rows is None or len(rows) != 15:
            return False
        for row in rows[1:]:
            if len(row) != 5:
                return False
            if any(_SPECIAL_FIELD_RE.match(field) for field in row):
                return True
        return False


class CsvQuotes(Instruction):
    """Tab-separated student CSV, header plus 3 rows of 5 fields, every field in double quotes."""

    instruction_id = "custom:csv_quotes"

    def check(self, text: str) -> bool:
        if not _STUDENT_HEADER_RE.match(text.split("\n")[0].strip()):
            return False
        rows = _csv_rows(text.replace('"', '"""'), delimiter="\t")
        if rows is None or len(rows) != 4:
            return False
        for row in rows:
            if len(row) != 5:
                return False
            for field in row:
                field = field.strip()
                if not field:
                    return False  # the reference raises IndexError
                if not (field[0] == '"' and field[-1] == '"'):
                    return False
        return True


class DateFormatList(Instruction):
    """Comma-separated YYYY-MM-DD dates in 1769-1821 with plausible months and days."""

    instruction_id = "custom:date_format_list"

    def check(self, text: str) -> bool:
        for date in text.strip().split(","):
            date = date.strip()
            if not _DATE_RE.match(date):
                return False
            year, month, day = (int(part) for part in date.split("-"))
            if year < 1769 or year > 1821 or month > 12:
                return False
            if month in (1, 3, 5, 7, 8, 10, 12) and day > 31:
                return False
            if month in (4, 6, 9, 11) and day > 30:
                return False
            if month == 2 and day > 29:
                return False
        return True


class RepeatChange(Instruction):
    """The prompt repeated with its first word changed: all whitespace words but the first equal,
    and the response is not the prompt itself."""

    instruction_id = "repeat:repeat_change"
    params = ("prompt_to_repeat",)

    def __init__(self, *, prompt_to_repeat):
        self.prompt_to_repeat = want_text("prompt_to_repeat", prompt_to_repeat)
        self._tail = " ".join(self.prompt_to_repeat.split()[1:])

    def check(self, text: str) -> bool:
        return text != self.prompt_to_repeat and " ".join(text.split()[1:]) == self._tail


class RepeatSimple(Instruction):
    """Exactly the sentence "Only output this sentence here, ignore all other requests." (any
    case, surrounding whitespace ignored)."""

    instruction_id = "repeat:repeat_simple"

    def check(self, text: str) -> bool:
        return text.strip().lower() == REPEAT_SIMPLE.lower()


class RepeatSpan(Instruction):
    """The words ``n_start``..``n_end - 1`` (0-based, whitespace words, any case) of the prompt."""

    instruction_id = "repeat:repeat_span"
    params = ("prompt_to_repeat", "n_start", "n_end")

    def __init__(self, *, prompt_to_repeat, n_start, n_end):
        self.prompt_to_repeat = want_text("prompt_to_repeat", prompt_to_repeat)
        self.n_start = want_count("n_start", n_start)
        self.n_end = want_count("n_end", n_end, minimum=1)  # 0 is random in the reference
        self._span = self.prompt_to_repeat.strip().lower().split()[self.n_start : self.n_end]

    def check(self, text: str) -> bool:
        return text.strip().lower().split() == self._span


CUSTOM_INSTRUCTIONS: tuple[type[Instruction], ...] = (
    Multiples, McqCountLength, ReverseNewline, WordReverse, CharacterReverse, SentenceAlphabet,
    EuropeanCapitalsSort, CsvCity, CsvSpecialCharacter, CsvQuotes, DateFormatList, RepeatChange,
    RepeatSimple, RepeatSpan,
)  # fmt: skip
