"""Hand-written cases for each of the 25 IFEval instruction types.

Every expected value follows from the instruction's definition (google's IFEval, as summarised in
../shared/notes/ifeval-reference.md), not from running the code: e.g. keywords match as
case-insensitive substrings, forbidden words as whole words, "less than" is ``<`` and "at least"
is ``>=``, loose mode also tries the response without its first/last line and without ``*``.
"""

from __future__ import annotations

import pytest

from ifdistill.benchmarks.instruction_following import score_response
from ifdistill.benchmarks.instruction_following.instruction_base import InvalidKwargsError
from ifdistill.benchmarks.ifeval.instruction_ids import INSTRUCTION_REGISTRY

LESS, AT_LEAST = "less than", "at least"


def check(instruction_id: str, text: str, **kwargs) -> bool:
    return INSTRUCTION_REGISTRY[instruction_id].from_kwargs(kwargs).check(text)


def strict_loose(instruction_id: str, text: str, **kwargs) -> tuple[bool, bool]:
    j = score_response(text, [instruction_id], [kwargs])
    return j.strict_inst[0], j.loose_inst[0]


def test_registry_has_the_25_benchmark_types():
    assert len(INSTRUCTION_REGISTRY) == 25
    assert "punctuation:no_comma" in INSTRUCTION_REGISTRY
    for iid, cls in INSTRUCTION_REGISTRY.items():
        assert cls.instruction_id == iid


# keywords:* -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, keywords, expected",
    [
        ("I like Apples a lot", ["apple"], True),  # case-insensitive, substring
        ("Let us concatenate them", ["cat"], True),  # no word boundaries
        ("a cat only", ["cat", "dog"], False),  # every keyword is needed
        ("DOG and cat", ["cat", "dog"], True),
    ],
)
def test_keyword_existence(text, keywords, expected):
    assert check("keywords:existence", text, keywords=keywords) is expected


def test_keyword_existence_loose_removes_stars():
    assert strict_loose("keywords:existence", "a c*at here", keywords=["cat"]) == (False, True)


@pytest.mark.parametrize(
    "text, relation, frequency, expected",
    [
        ("The cat and the dog", AT_LEAST, 2, True),  # "The" and "the"
        ("The cat and the dog", LESS, 2, False),
        ("the cat", AT_LEAST, 2, False),
        ("the other", AT_LEAST, 2, True),  # "other" contains "the"
        ("the the", LESS, 3, True),
        ("the the the", LESS, 3, False),
    ],
)
def test_keyword_frequency(text, relation, frequency, expected):
    kw = {"keyword": "the", "frequency": frequency, "relation": relation}
    assert check("keywords:frequency", text, **kw) is expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("This is bad.", False),
        ("This is BAD", False),  # case-insensitive
        ("It went badly", True),  # whole words only
        ("A bad-tempered cat", False),  # "-" is a word boundary
        ("Nothing wrong", True),
    ],
)
def test_forbidden_words(text, expected):
    assert check("keywords:forbidden_words", text, forbidden_words=["bad", "evil"]) is expected


def test_forbidden_words_loose_drops_last_line():
    assert strict_loose("keywords:forbidden_words", "All fine here\nbad", forbidden_words=["bad"]) == (
        False,
        True,
    )


@pytest.mark.parametrize(
    "text, letter, relation, frequency, expected",
    [
        ("banana", "a", AT_LEAST, 3, True),
        ("banana", "a", LESS, 3, False),
        ("banana", "a", LESS, 4, True),
        ("AAa", "a", AT_LEAST, 3, True),  # the response is lower-cased
        ("AAa", "A", AT_LEAST, 3, True),  # and so is the letter
        ("# # #", "#", AT_LEAST, 3, True),  # google's current rule: the literal character
        ("# # #", "#", LESS, 3, False),
        ("wow!", "!", AT_LEAST, 1, True),
    ],
)
def test_letter_frequency(text, letter, relation, frequency, expected):
    kw = {"letter": letter, "let_frequency": frequency, "let_relation": relation}
    assert check("keywords:letter_frequency", text, **kw) is expected


def test_letter_frequency_needs_one_character():
    with pytest.raises(InvalidKwargsError):
        INSTRUCTION_REGISTRY["keywords:letter_frequency"].from_kwargs(
            {"letter": "ab", "let_frequency": 1, "let_relation": AT_LEAST}
        )


# language and case ---------------------------------------------------------------------------

SPANISH = "El tiempo es muy agradable hoy y vamos al parque con nuestros amigos."
ENGLISH = "The weather is lovely today and we are going to the park with our friends."


def test_response_language():
    assert check("language:response_language", SPANISH, language="es") is True
    assert check("language:response_language", ENGLISH, language="es") is False
    assert check("language:response_language", ENGLISH, language="en") is True
    # langdetect cannot tell (no letters): counted as followed
    assert check("language:response_language", "12345 678", language="fr") is True


def test_response_language_rejects_unknown_code():
    with pytest.raises(InvalidKwargsError):
        INSTRUCTION_REGISTRY["language:response_language"].from_kwargs({"language": "xx"})


def test_english_capital():
    assert check("change_case:english_capital", ENGLISH.upper()) is True
    assert check("change_case:english_capital", ENGLISH) is False  # not all capitals
    assert check("change_case:english_capital", "12345") is False  # no cased letter at all


def test_english_capital_loose_drops_a_lowercase_first_line():
    text = "Sure, here it is:\n" + ENGLISH.upper()
    assert strict_loose("change_case:english_capital", text) == (False, True)


def test_english_lowercase():
    assert check("change_case:english_lowercase", ENGLISH.lower()) is True
    assert check("change_case:english_lowercase", ENGLISH) is False  # "The" has a capital
    assert check("change_case:english_lowercase", SPANISH.lower()) is False  # not English
    assert check("change_case:english_lowercase", "12345") is False


@pytest.mark.parametrize(
    "text, relation, frequency, expected",
    [
        ("I LOVE NASA", AT_LEAST, 3, True),  # "I" counts as a capital word
        ("I LOVE NASA", LESS, 3, False),
        ("I LOVE NASA", LESS, 4, True),
        ("Hello World", AT_LEAST, 1, False),  # capitalised is not all capitals
        ("DON'T STOP", AT_LEAST, 3, True),  # nltk splits DON'T into DO + N'T
    ],
)
def test_capital_word_frequency(text, relation, frequency, expected):
    kw = {"capital_frequency": frequency, "capital_relation": relation}
    assert check("change_case:capital_word_frequency", text, **kw) is expected


# length_constraints:* -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "relation, n, expected",
    [(AT_LEAST, 3, True), (AT_LEAST, 4, False), (LESS, 3, False), (LESS, 4, True)],
)
def test_number_sentences(relation, n, expected):
    text = "Hello world. How are you? I am fine!"
    assert check("length_constraints:number_sentences", text, num_sentences=n, relation=relation) is expected


@pytest.mark.parametrize(
    "text, n, expected",
    [
        ("one two three", 3, True),
        ("don't stop", 3, True),  # \w+ tokens: don, t, stop
        ("well-known fact", 3, True),
        ("one two", 3, False),
        ("नमस्ते दुनिया", 3, False),  # two words: a combining vowel sign does not split a word
        ("नमस्ते दुनिया", 2, True),
    ],
)
def test_number_words_at_least(text, n, expected):
    assert check("length_constraints:number_words", text, num_words=n, relation=AT_LEAST) is expected


def test_number_words_less_than():
    assert check("length_constraints:number_words", "a b", num_words=3, relation=LESS) is True
    assert check("length_constraints:number_words", "a b c", num_words=3, relation=LESS) is False


@pytest.mark.parametrize(
    "text, n, expected",
    [
        ("A\n***\nB\n***\nC", 3, True),
        ("A\n***\nB\n***\nC", 2, False),  # the count must be exact
        ("***\nA\n***\nB", 2, True),  # an empty piece at the start is ignored
        ("A\n***\nB\n***", 2, True),  # and at the end
        ("A\n***\n***\nB", 2, False),  # an empty paragraph in the middle fails
        ("Just one", 1, True),
    ],
)
def test_number_paragraphs(text, n, expected):
    assert check("length_constraints:number_paragraphs", text, num_paragraphs=n) is expected


def test_number_paragraphs_loose_removes_the_dividers():
    # Without "*" the two paragraphs become one, which is what num_paragraphs=1 asks for.
    assert strict_loose("length_constraints:number_paragraphs", "A\n***\nB", num_paragraphs=1) == (False, True)


NTH = "length_constraints:nth_paragraph_first_word"


@pytest.mark.parametrize(
    "text, num, nth, word, expected",
    [
        ("Hello there.\n\nSecond one here.\n\nThird.", 3, 2, "second", True),  # case-insensitive
        ("Hello there.\n\nSecond one here.\n\nThird.", 2, 2, "second", False),  # wrong count
        ("Hello there.\n\nSecond one here.\n\nThird.", 3, 1, "second", False),  # wrong paragraph
        ('Hi.\n\n"Second," he said.', 2, 2, "second", True),  # quote and comma are dropped
        ("Hi.\n\nSeconds later.", 2, 2, "second", False),  # a longer word is another word
        ("A.\n\n\n\nB.", 2, 2, "b", False),  # the blank piece still takes position 2
        ("A.\n\nB.\n\n", 2, 2, "b", True),  # a trailing blank piece is not counted
    ],
)
def test_nth_paragraph_first_word(text, num, nth, word, expected):
    assert check(NTH, text, num_paragraphs=num, nth_paragraph=nth, first_word=word) is expected


def test_nth_paragraph_must_exist():
    with pytest.raises(InvalidKwargsError):
        INSTRUCTION_REGISTRY[NTH].from_kwargs({"num_paragraphs": 2, "nth_paragraph": 3, "first_word": "x"})


# detectable_content / detectable_format -------------------------------------------------------


@pytest.mark.parametrize(
    "text, n, expected",
    [
        ("[name] lives at [address]", 2, True),
        ("[name] lives at [address]", 3, False),
        ("[] and []", 2, True),  # empty brackets count
        ("[a\nb] only", 1, False),  # a placeholder stays within a line
    ],
)
def test_number_placeholders(text, n, expected):
    assert check("detectable_content:number_placeholders", text, num_placeholders=n) is expected


@pytest.mark.parametrize(
    "text, marker, expected",
    [
        ("Thanks.\nP.S. See you", "P.S.", True),
        ("Thanks.\np.s. see you", "P.S.", True),  # case-insensitive
        ("Thanks.\nP. S. See you", "P.S.", True),  # one space after a dot is allowed
        ("Thanks.\nPS see you", "P.S.", False),
        ("Thanks. help.s. x", "P.S.", True),  # anywhere, no line-start anchor
        ("Thanks.\nP.P.S. more", "P.P.S", True),
        ("Thanks.\nP.S. more", "P.P.S", False),
    ],
)
def test_postscript(text, marker, expected):
    assert check("detectable_content:postscript", text, postscript_marker=marker) is expected


@pytest.mark.parametrize(
    "text, n, expected",
    [
        ("Intro\n* one\n* two\n- three", 3, True),
        ("Intro\n* one\n* two\n- three", 2, False),  # exact count
        ("* one\n---", 2, True),  # a --- line counts as a "-" bullet
        ("**Bold** line\n* one", 1, True),  # "**" does not start a bullet
        ("  * indented", 1, True),
        ("1. numbered", 1, False),
    ],
)
def test_number_bullet_lists(text, n, expected):
    assert check("detectable_format:number_bullet_lists", text, num_bullets=n) is expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("My answer is yes.", True),
        ("Well. My answer is maybe. Because.", True),
        ("My answer is Yes.", False),  # case as written
        ("My answer is no", False),  # the period is part of the phrase
    ],
)
def test_constrained_response(text, expected):
    assert check("detectable_format:constrained_response", text) is expected


@pytest.mark.parametrize(
    "text, n, expected",
    [
        ("*one* and *two*", 2, True),
        ("*one* and *two*", 3, False),
        ("**bold**", 1, True),  # a **...** span counts once
        ("**bold**", 2, False),  # (the single-star pattern only finds the empty "**" pairs)
        ("* * and ** **", 1, False),  # blank highlights do not count
        ("*a\nb*", 1, False),  # a highlight stays within a line
    ],
)
def test_number_highlighted_sections(text, n, expected):
    assert check("detectable_format:number_highlighted_sections", text, num_highlights=n) is expected


@pytest.mark.parametrize(
    "text, n, expected",
    [
        ("Section 1\nIntro\nSection 2\nBody", 2, True),
        ("Section 1\nIntro\nSection 2\nBody", 3, False),
        ("section 1\nIntro\nsection 2\nBody", 1, False),  # the splitter's case matters
        ("SECTION 1\nIntro", 1, False),
        ("Section X\nIntro", 1, False),  # a number must follow
    ],
)
def test_multiple_sections(text, n, expected):
    kw = {"section_spliter": "Section", "num_sections": n}
    assert check("detectable_format:multiple_sections", text, **kw) is expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"a": 1}', True),
        ('```json\n{"a": 1}\n```', True),
        ('```JSON\n{"a": 1}\n```', True),
        ('```\n[1, 2]\n```', True),
        ("{'a': 1}", False),  # not JSON
        ('```python\n{"a": 1}\n```', False),  # "python" is left in front of the object
        ('{"a": 1', False),
    ],
)
def test_json_format(text, expected):
    assert check("detectable_format:json_format", text) is expected


def test_json_format_loose_drops_a_preamble_line():
    assert strict_loose("detectable_format:json_format", 'Here it is:\n{"a": 1}') == (False, True)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<<My Title>>\nText", True),
        ("<< >>\nText", False),  # blank title
        ("<<My\nTitle>>", False),  # on one line only
        ("<Title>", False),
    ],
)
def test_title(text, expected):
    assert check("detectable_format:title", text) is expected


# combination / startend / punctuation ---------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("First answer.\n******\nSecond answer.", True),
        ("Same.\n******\nSame.", False),  # the two must differ
        ("A\n******\nB\n******\nC", False),  # exactly two
        ("******\nA\n******\nB", True),  # blank piece at the start is allowed
        ("A\n******\n\n******\nB", False),  # but not in the middle
    ],
)
def test_two_responses(text, expected):
    assert check("combination:two_responses", text) is expected


def test_repeat_prompt():
    kw = {"prompt_to_repeat": "Write a poem about cats."}
    assert check("combination:repeat_prompt", "write a poem about cats. Here it is...", **kw) is True
    assert check("combination:repeat_prompt", "  Write a poem about cats.\nMeow", **kw) is True
    assert check("combination:repeat_prompt", "Sure! Write a poem about cats.", **kw) is False
    assert strict_loose("combination:repeat_prompt", "Sure!\nWrite a poem about cats.\nMeow", **kw) == (
        False,
        True,
    )


def test_repeat_prompt_ignores_the_row_prompt():
    """Only the ``prompt_to_repeat`` kwarg counts, never the row's own prompt text."""
    rows = [
        {
            "prompt": "Something else entirely",
            "instruction_id_list": ["combination:repeat_prompt"],
            "kwargs": [{"prompt_to_repeat": "Say hi."}],
            "response": "Say hi. Hi!",
        }
    ]
    from ifdistill.benchmarks.instruction_following import score_rows

    assert score_rows(rows).rows[0]["strict_inst"] == [True]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Bla bla.\nAny other questions?", True),
        ('Bla bla. "Any other questions?"', True),  # quotes around the end are ignored
        ("bla. any other QUESTIONS?  \n", True),  # case and trailing space are ignored
        ("Bla bla. Any other questions?!", False),
        ("Bla bla. Any other questions", False),
    ],
)
def test_end_checker(text, expected):
    assert check("startend:end_checker", text, end_phrase="Any other questions?") is expected


def test_end_checker_loose_drops_last_line():
    kw = {"end_phrase": "Any other questions?"}
    assert strict_loose("startend:end_checker", "Text.\nAny other questions?\nBye", **kw) == (False, True)


@pytest.mark.parametrize(
    "text, expected",
    [
        ('"Hello there"', True),
        ('  "Hello there"  \n', True),  # surrounding whitespace is stripped
        ('""', True),
        ('"', False),  # longer than one character
        ("\u201cHello\u201d", False),  # typographic quotes are not '"'
        ('"Hello', False),
    ],
)
def test_quotation(text, expected):
    assert check("startend:quotation", text) is expected


@pytest.mark.parametrize(
    "text, expected",
    [("No commas here", True), ("One, two", False), ("Full-width \uff0c is fine", True)],
)
def test_no_comma(text, expected):
    assert check("punctuation:no_comma", text) is expected


def test_no_comma_loose_drops_first_line():
    assert strict_loose("punctuation:no_comma", "Hi, there\nno commas below\nnone", ) == (False, True)
