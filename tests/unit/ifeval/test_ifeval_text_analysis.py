"""The memoised measurements equal nltk's own functions (the ones the reference calls)."""

from __future__ import annotations

import re

import nltk

from ifdistill.benchmarks.instruction_following import text_analysis
from tests.parity import ifeval_boundary_cases as boundary_cases
from tests.parity.ifeval_reference_data import load_gpt4_rows
from ifdistill.benchmarks.instruction_following.scoring import loose_variants


def texts():
    out = []
    for row in load_gpt4_rows()[:60] + boundary_cases.generate(seed=5, per_type=3, combos=20):
        out.extend(loose_variants(row["response"]))
    return out


def test_sentences_words_and_capitals_equal_nltk():
    punkt = nltk.data.load("nltk:tokenizers/punkt/english.pickle")  # what the reference loads
    words = nltk.tokenize.RegexpTokenizer(r"\w+")
    for text in texts():
        assert text_analysis.count_sentences(text) == len(punkt.tokenize(text)), text
        assert text_analysis.count_words(text) == len(words.tokenize(text)), text
        capitals = sum(1 for token in nltk.word_tokenize(text) if token.isupper())
        assert text_analysis.count_capital_words(text) == capitals, text


def test_caches_do_not_change_answers():
    sample = texts()[:80]
    first = [(text_analysis.count_sentences(t), text_analysis.language_matches(t, "en")) for t in sample]
    again = [(text_analysis.count_sentences(t), text_analysis.language_matches(t, "en")) for t in sample]
    text_analysis.clear_caches()
    cold = [(text_analysis.count_sentences(t), text_analysis.language_matches(t, "en")) for t in sample]
    assert first == again == cold


def test_detect_language_is_seeded_and_stable():
    text = "THE WEATHER IS LOVELY TODAY AND WE ARE GOING TO THE PARK WITH OUR FRIENDS."
    answers = set()
    for _ in range(5):
        text_analysis.clear_caches()
        answers.add(text_analysis.detect_language(text))
    assert len(answers) == 1
    assert text_analysis.detect_language("1234 5678") is None  # no letters: undecidable
    assert text_analysis.language_matches("1234 5678", "fr") is True


def test_words_follow_nltks_regex_engine_not_re():
    assert text_analysis.count_words("naïve café, don't") == 4
    # nltk >= 3.10 matches \w with the `regex` engine, which keeps combining vowel signs in the word
    hindi = "नमस्ते दुनिया"
    assert text_analysis.count_words(hindi) == 2
    assert len(re.findall(r"\w+", hindi)) > 2  # Python's re would split them
