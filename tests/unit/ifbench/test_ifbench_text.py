"""IFBench's text helpers, boundary cases and offline import."""

from __future__ import annotations

import pytest

from ifdistill.benchmarks.ifbench import IFBENCH_REGISTRY, scorer_version
from tests.parity import ifbench_boundary_cases as boundary_cases
from ifdistill.benchmarks.instruction_following import score_response, score_rows
from ifdistill.benchmarks.ifbench import text as T
from ifdistill.benchmarks.ifbench.verbs import looks_like_verb
from ifdistill.paths import shared_data_dir
from tests.support import run_python


def test_import_is_light_and_offline():
    code = """
        import sys, socket
        def no_network(*a, **k):
            raise AssertionError("network")
        socket.socket.connect = no_network
        import ifdistill.benchmarks.ifbench, ifdistill.benchmarks.ifbench.instruction_ids
        from ifdistill.benchmarks.instruction_following import score_response
        print([m for m in ("nltk", "emoji", "syllapy", "spacy", "ifbench") if m in sys.modules])
        score_response("Hi \\U0001f600. Cat table cat.", ["format:emoji", "words:odd_even_syllables"], [{}, {}])
        print(sorted(m for m in ("spacy", "ifbench") if m in sys.modules))
    """
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["[]", "[]"]


def test_stopwords_are_the_shared_nltk_list():
    path = shared_data_dir() / "ifbench" / "nltk_data" / "corpora" / "stopwords" / "english"
    assert T.STOPWORDS == frozenset(path.read_text(encoding="utf-8").split())
    assert len(T.STOPWORDS) == 198


@pytest.mark.parametrize(
    "text, sentences",
    [
        ("Hello there. How are you? Fine!", ("Hello there.", "How are you?", "Fine!")),
        ("Mr. Smith met Dr. Who at 3.5 p.m. today.", ("Mr. Smith met Dr. Who at 3.5 p.m. today.",)),
        ("Wait... what?", ("Wait...", "what?")),
        ('He said "stop." Then left.', ('He said "stop".', "Then left.")),
        ("no ending", ("no ending",)),
        ("", ()),
    ],
)
def test_ifbench_sentence_splitter(text, sentences):
    assert T.split_into_sentences(text) == sentences


def test_edge_word_tokens_equal_the_ends_of_word_tokenize():
    for text in ("A cat sat. On the mat, cat.", "One.", "Two words", "Hi. There. You."):
        tokens = T.word_tokens(text)
        head, tail = T.edge_word_tokens(text, 2)
        assert head == tokens[:2] and tail == tokens[-2:]


def test_verb_lexicon_route_and_its_version():
    assert looks_like_verb("Write") and looks_like_verb("creating") and looks_like_verb("stopped")
    assert not looks_like_verb("The") and not looks_like_verb("Sure")
    route = T.start_verb_route()
    assert scorer_version() == f"ifbench-1+{route}"
    if route == "verb-lexicon":
        assert score_response("Write it.", ["words:start_verb"], [{}]).strict_inst == [True]
        assert score_response("The end.", ["words:start_verb"], [{}]).strict_inst == [False]


@pytest.fixture(scope="module")
def rows():
    return boundary_cases.generate()


def test_boundary_cases_are_deterministic_and_cover_every_constraint(rows):
    assert rows == boundary_cases.generate(seed=0) and rows != boundary_cases.generate(seed=1)
    assert 3000 <= len(rows) <= 5000
    assert {iid for r in rows for iid in r["instruction_id_list"]} == set(IFBENCH_REGISTRY)
    assert any(not r["response"].strip() for r in rows)


def test_boundary_cases_reach_both_outcomes_for_every_constraint(rows):
    seen = {}
    for r in score_rows(rows).rows:
        for iid, s, lo in zip(r["instruction_id_list"], r["strict_inst"], r["loose_inst"]):
            seen.setdefault(iid, set()).update({("strict", s), ("loose", lo)})
    for iid, outcomes in seen.items():
        assert outcomes == {("strict", True), ("strict", False), ("loose", True), ("loose", False)}, iid
