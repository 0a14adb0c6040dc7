"""Each IFBench constraint on texts whose answer follows from its definition (no oracle here).

One pass and at least one fail per constraint, chosen at the edge the definition draws (exact
counts, punctuation stripped or not, case, blank lines), plus the inputs where the reference
crashes and ifdistill decides (see the instruction modules' docstrings).
"""

from __future__ import annotations

import pytest

from ifdistill.benchmarks.instruction_following import InstructionError, score_response
from ifdistill.benchmarks.instruction_following.lookup import all_instructions
from ifdistill.benchmarks.ifbench import IFBENCH_REGISTRY
from ifdistill.benchmarks.ifeval.instruction_ids import INSTRUCTION_REGISTRY

MC = "a), b), c), d)"
CAPITALS = ", ".join(
    "Reykjavik Helsinki Oslo Tallinn Stockholm Riga Moscow Copenhagen Vilnius Minsk Dublin Berlin "
    "Amsterdam Warsaw London Brussels Prague Luxembourg Paris Vienna Bratislava Budapest Vaduz "
    "Chisinau Bern Ljubljana Zagreb".split()
)
MCQ = "\n".join(
    f"Question {i}: {'Why ' * i}?\n" + "\n".join(f"{c}. choice" for c in "ABCDE") for i in range(1, 5)
)
CITY = "ID,Country,City,Year,Count\n" + "\n".join(f"{i},France,Paris,2020,{i}" for i in range(7))
PRODUCTS = "ProductID,Category,Brand,Price,Stock\n" + "\n".join(f"{i},Tools,Acme,9,{i}" for i in range(14))
STUDENTS = "\n".join("\t".join(f'"{v}"' for v in row) for row in [
    ("StudentID", "Subject", "Grade", "Semester", "Score"), *[(i, "Math", "A", "Fall", 90) for i in range(3)]])  # fmt: skip
COUNTRIES = "\n".join(["Zimbabwe", "Zambia"] + [f"C{chr(90 - i // 26)}{chr(90 - i % 26)}" for i in range(50)])
SPAN_PROMPT = "one two three four five six"

CASES = [
    ("count:word_count_range", {"min_words": 2.0, "max_words": 3.0}, "don't stop now", False),  # don, t, stop, now
    ("count:word_count_range", {"min_words": 2.0, "max_words": 3.0}, "one two three four", False),
    ("count:word_count_range", {"min_words": 2.0, "max_words": 3.0}, "one, two.", True),
    ("count:unique_word_count", {"N": 3.0}, "Cat cat, CAT! dog", False),
    ("count:unique_word_count", {"N": 3.0}, "cat dog -- bird", True),
    ("count:conjunctions", {"small_n": 2.0}, "and And", True),  # distinct as written
    ("count:conjunctions", {"small_n": 2.0}, "and and, andes", True),  # "and" and "and,"
    ("count:conjunctions", {"small_n": 2.0}, "and and", False),
    ("count:person_names", {"N": 2.0}, "Emmanuel met Liam", True),  # substring "Emma"
    ("count:person_names", {"N": 2.0}, "emma met Liam", False),
    ("count:numbers", {"N": 2.0}, "pi is 3.14 and 1,000", True),  # punctuation deleted first
    ("count:numbers", {"N": 2.0}, "1 2 3", False),
    ("count:punctuation", {}, "a. b, c; d: e?! f! g?", True),
    ("count:punctuation", {}, "a. b, c; d: e?!", False),  # "?!" removed, no other "!"
    ("count:words_japanese", {"N": 2.0}, "one \u65e5\u672c three 42", True),
    ("count:words_japanese", {"N": 2.0}, "one two", False),
    ("count:pronouns", {"N": 3.0}, "she/her/hers", True),
    ("count:pronouns", {"N": 3.0}, "I'm it's", False),  # "im", "its": one pronoun
    ("count:keywords_multiple", {"keyword1": "a1", "keyword2": "b2", "keyword3": "c3", "keyword4": "d4", "keyword5": "e5"},
     "a1 " + "B2 " * 2 + "c3 " * 3 + "d4 " * 5 + "e5 " * 7, True),
    ("count:keywords_multiple", {"keyword1": "a1", "keyword2": "b2", "keyword3": "c3", "keyword4": "d4", "keyword5": "e5"},
     "a1 a1 " + "b2 " * 2 + "c3 " * 3 + "d4 " * 5 + "e5 " * 7, False),
    ("ratio:stop_words", {"percentage": 50.0}, "the cat", True),
    ("ratio:stop_words", {"percentage": 49.0}, "the cat", False),
    ("ratio:stop_words", {"percentage": 100.0}, "!!!", False),  # no word: the reference divides by 0
    ("ratio:sentence_type", {}, "Cats run. Dogs sit. Why?", True),
    ("ratio:sentence_type", {}, "Cats run. Why?", False),
    ("ratio:sentence_type", {}, "I saw A. B. Why?", False),  # "A." is an initial there
    ("ratio:sentence_type", {}, "no ending", True),  # 0 == 2 * 0
    ("ratio:sentence_balance", {}, "Cats run. Why? Wow!", True),
    ("ratio:sentence_balance", {}, "Cats run. Why? Wow! Dogs sit.", False),
    ("ratio:overlap", {"reference_text": "abcd", "percentage": 50.0}, "abcx", True),  # {abc, bcx}: 1/2
    ("ratio:overlap", {"reference_text": "abcd", "percentage": 47.0}, "abcx", False),
    ("ratio:overlap", {"reference_text": "abcd", "percentage": 0.0}, "ab", False),  # no trigram
    ("ratio:sentence_words", {}, "Cats run. Dogs sit. Owls fly.", True),
    ("ratio:sentence_words", {}, "Cats run. Dog sits. Owls fly.", True),  # lengths only
    ("ratio:sentence_words", {}, "Cats run. Dogs sit.", False),
    ("words:alphabet", {}, "Zebra, apple. bird", True),
    ("words:alphabet", {}, "apple cat", False),
    ("words:alphabet", {}, "3rd apple", False),
    ("words:vowel", {}, "a bad cat had a mad hat", True),
    ("words:vowel", {}, "audio queue", False),
    ("words:vowel", {}, "a bad\ncat", False),  # two lines
    ("words:consonants", {}, "street strong myth", True),
    ("words:consonants", {}, "street cat", False),
    ("words:palindrome", {}, "level radar civic madam refer rotor kayak tenet stats racecar", True),
    ("words:palindrome", {}, "level radar civic madam refer rotor kayak tenet stats noon", False),
    ("words:prime_lengths", {}, "to cat hello", True),
    ("words:prime_lengths", {}, "to four", False),
    ("words:repeats", {"small_n": 2.0}, "Cat cat. dog", True),
    ("words:repeats", {"small_n": 2.0}, "Cat cat. CAT!", False),
    ("words:odd_even_syllables", {}, "cat table cat", True),
    ("words:odd_even_syllables", {}, "cat dog", False),
    ("words:last_first", {}, "I like cats. Cats like fish!", True),
    ("words:last_first", {}, "I like cats. Dogs like fish!", False),
    ("words:last_first", {}, "I like cats. !!! Cats.", False),  # a sentence without a word
    ("words:paragraph_last_first", {}, "Cat sat on the cat.\n\nDog and dog!", True),
    ("words:paragraph_last_first", {}, "Dog, dog!", False),  # "dog," is not "dog"
    ("words:paragraph_last_first", {}, "Cat sat on the mat.", False),
    ("words:paragraph_last_first", {}, "cat cat\n***", False),  # punctuation-only line
    ("words:no_consecutive", {}, "apple banana apple", True),
    ("words:no_consecutive", {}, "apple Ant", False),
    ("words:keywords_specific_position", {"keyword": "cat", "n": 2, "m": 3}, "Hi there. I saw cat here.", True),
    ("words:keywords_specific_position", {"keyword": "cat", "n": 2, "m": 3}, "Hi there. I saw Cat here.", False),
    ("words:words_position", {"keyword": "cat"}, "A cat sat , cat .", True),  # tokens[1], tokens[-2]
    ("words:words_position", {"keyword": "cat"}, "A cat sat cat.", True),  # "." is its own token
    ("words:words_position", {"keyword": "cat"}, "A cat sat cat", False),
    ("sentence:alliteration_increment", {}, "The end. Big bad end.", True),  # 0 then 2
    ("sentence:alliteration_increment", {}, "Big bad. Big bad.", False),
    ("sentence:keyword", {"word": "Cat", "N": 2.0}, "One. The CATS two.", True),
    ("sentence:keyword", {"word": "Cat", "N": 2.0}, "The cat. Two.", False),
    ("sentence:increment", {"small_n": 1.0}, "One. One two. One two three!", True),
    ("sentence:increment", {"small_n": 1.0}, "One. One two three.", False),
    ("format:parentheses", {}, "((([[{x}]])))", True),
    ("format:parentheses", {}, "(([[{x}]]", True),  # a depth-5 group closed
    ("format:parentheses", {}, "(([[x]]))", False),
    ("format:quotes", {}, "He said \"she said 'I said \"hi\"'\"", True),
    ("format:quotes", {}, "\"a 'b' c\"", False),
    ("format:options", {"options": "yes/no/maybe"}, "Yes.", True),
    ("format:options", {"options": "yes/no/maybe"}, "yes, maybe", False),
    ("format:options", {"options": MC}, "a)", True),
    ("format:options", {"options": MC}, "A)", False),  # letter options compare exactly
    ("format:newline", {}, "one\ntwo\n\nthree", True),
    ("format:newline", {}, "one two\nthree", False),
    ("format:emoji", {}, "Hi \U0001f600. Bye \U0001f44b!", True),
    ("format:emoji", {}, "Hi. \U0001f600 Bye \U0001f44b", True),  # the next sentence starts with one
    ("format:emoji", {}, "Hi \U0001f600. Bye.", False),
    ("format:line_indent", {}, "a\n b\n  c", True),
    ("format:line_indent", {}, "a\n b\n c", False),
    ("format:line_indent", {}, "a\n\n\n b", False),  # the second blank line survives the removal
    ("format:quote_unquote", {}, '"wise" means clever', True),
    ("format:quote_unquote", {}, 'he said "hi"', False),
    ("format:quote_unquote", {}, '"a" "b" c', False),
    ("format:quote_unquote", {}, "123.", True),  # nothing left, no quote: passes
    ("format:list", {"sep": "!?!?"}, "!?!? a\n!?!? b", True),
    ("format:list", {"sep": "!?!?"}, "!?!? a", False),
    ("format:thesis", {}, "<i>Thesis</i> and text", True),
    ("format:thesis", {}, "<i>Thesis</i>", False),
    ("format:thesis", {}, "<i> </i> text", False),
    ("format:sub-bullets", {}, "* a\n - b\n* c\n - d", True),
    ("format:sub-bullets", {}, "* a\n - b\n* c", False),
    ("format:no_bullets_bullets", {}, "One. Two.\n* a\n* b", True),
    ("format:no_bullets_bullets", {}, "One. Two.\n* a", False),
    ("format:no_bullets_bullets", {}, "One.\n\nTwo.\n* a\n* b", False),  # a sentence line after a blank one
    ("format:title_case", {}, "The Quick Fox", True),
    ("format:title_case", {}, "The quick Fox", False),
    ("format:title_case", {}, "The USA", True),
    ("format:output_template", {}, "My Answer: a My Conclusion: b Future Outlook: c", True),
    ("format:output_template", {}, "My Answer: a My Conclusion: b", False),
    ("format:no_whitespace", {}, "abc", True),
    ("format:no_whitespace", {}, "a\u3000b", False),
    ("custom:multiples", {}, "14,21,28,35,42,49", True),
    ("custom:multiples", {}, "7, 14, 21, 28, 35, 42, 49", False),
    ("custom:mcq_count_length", {}, MCQ, True),
    ("custom:mcq_count_length", {}, "Here:\n" + MCQ, False),
    ("custom:reverse_newline", {}, COUNTRIES, True),
    ("custom:reverse_newline", {}, "\n".join(COUNTRIES.split("\n")[:50]), False),
    ("custom:word_reverse", {}, "eagle bald the is it", True),
    ("custom:word_reverse", {}, "the bald eagle", False),
    ("custom:character_reverse", {}, "ELGAE DLAB", True),
    ("custom:character_reverse", {}, "bald eagle", False),
    ("custom:sentence_alphabet", {}, " ".join(f"{chr(65 + i)}x went." for i in range(26)), True),
    ("custom:sentence_alphabet", {}, " ".join(f"{chr(65 + i)}x went." for i in range(25)), False),
    ("custom:european_capitals_sort", {}, CAPITALS, True),
    ("custom:european_capitals_sort", {}, CAPITALS.replace("Reykjavik", "Reykjav\u00edk"), True),
    ("custom:european_capitals_sort", {}, CAPITALS.replace("Oslo, Tallinn", "Tallinn, Oslo"), False),
    ("custom:csv_city", {}, CITY, True),
    ("custom:csv_city", {}, CITY.rsplit("\n", 1)[0], False),
    ("custom:csv_special_character", {}, PRODUCTS.replace("3,Tools,", '3,"Tools & Co",'), True),
    ("custom:csv_special_character", {}, PRODUCTS, False),
    ("custom:csv_quotes", {}, STUDENTS, True),
    ("custom:csv_quotes", {}, STUDENTS.replace('"Math"', "Math", 1), False),
    ("custom:csv_quotes", {}, STUDENTS.replace('"A"', "", 1), False),  # an empty field
    ("custom:date_format_list", {}, "1796-04-12, 1815-06-18", True),
    ("custom:date_format_list", {}, "1796-04-31", False),
    ("custom:date_format_list", {}, "1822-01-01", False),
    ("repeat:repeat_change", {"prompt_to_repeat": "Write a poem"}, "Compose a poem", True),
    ("repeat:repeat_change", {"prompt_to_repeat": "Write a poem"}, "Write a poem", False),
    ("repeat:repeat_simple", {}, " only output this sentence here, ignore all other requests.\n", True),
    ("repeat:repeat_simple", {}, "Only output this sentence here, ignore all other requests", False),
    ("repeat:repeat_span", {"prompt_to_repeat": SPAN_PROMPT, "n_start": 1, "n_end": 3}, "TWO three", True),
    ("repeat:repeat_span", {"prompt_to_repeat": SPAN_PROMPT, "n_start": 1, "n_end": 3}, "two three four", False),
    ("repeat:repeat_span", {"prompt_to_repeat": SPAN_PROMPT, "n_start": 0, "n_end": 2}, "one two", True),
]


def strict(iid, kwargs, text):
    return score_response(text, [iid], [kwargs]).strict_inst[0]


@pytest.mark.parametrize("iid, kwargs, text, expected", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_constraint_on_its_definition(iid, kwargs, text, expected):
    assert strict(iid, kwargs, text) is expected


def test_every_constraint_has_a_passing_and_a_failing_case():
    outcomes = {}
    for iid, _, _, expected in CASES:
        outcomes.setdefault(iid, set()).add(expected)
    missing = set(IFBENCH_REGISTRY) - {"words:start_verb"} - {i for i, o in outcomes.items() if o == {True, False}}
    assert missing == set()


def test_58_ids_next_to_ifevals_25():
    assert len(IFBENCH_REGISTRY) == 58 and len(INSTRUCTION_REGISTRY) == 25
    assert {**INSTRUCTION_REGISTRY, **IFBENCH_REGISTRY}.items() <= all_instructions().items()
    for iid, cls in IFBENCH_REGISTRY.items():
        assert cls.instruction_id == iid


def test_a_row_may_mix_both_benchmarks():
    judgement = score_response(
        "one two", ["punctuation:no_comma", "count:word_count_range"], [{}, {"min_words": 2.0, "max_words": 2.0}]
    )
    assert judgement.strict_inst == [True, True]


def test_loose_drops_first_line_and_stars_as_ifeval():
    # "Sure:" is a second word; without the first line the response is one word
    judgement = score_response("Sure:\n**word**", ["count:word_count_range"], [{"min_words": 1, "max_words": 1}])
    assert judgement.strict_inst == [False] and judgement.loose_inst == [True]


@pytest.mark.parametrize(
    "iid, kwargs, field",
    [
        ("count:words_japanese", {"N": 0.0}, "kwargs[0].N"),  # the reference divides by it
        ("words:keywords_specific_position", {"keyword": "a", "n": 0, "m": 1}, "kwargs[0].n"),  # random there
        ("repeat:repeat_span", {"prompt_to_repeat": "a b", "n_start": 0, "n_end": 0}, "kwargs[0].n_end"),
        ("count:numbers", {"N": True}, "kwargs[0].N"),
        ("count:numbers", {"N": -1.0}, "kwargs[0].N"),
        ("format:options", {}, "kwargs[0].options"),  # the reference picks random options
        ("format:emoji", {"N": 1}, "kwargs[0].N"),
    ],
)
def test_kwargs_where_the_reference_is_random_or_crashes_are_refused(iid, kwargs, field):
    with pytest.raises(InstructionError) as info:
        score_response("text", [iid], [kwargs])
    assert info.value.field == field
