"""Offline, deterministic, cached text measurements shared by the checkers (nltk and langdetect).

Why this module exists:

* **No network, ever.** nltk is imported only here and only at first use, after
  :func:`ifdistill.paths.ensure_nltk_data` has pointed ``NLTK_DATA`` at a folder holding punkt_tab.
  A missing model raises :class:`ifdistill.paths.MissingResourceError` saying how to install it;
  nltk is never asked to download. Importing :mod:`ifdistill.benchmarks.instruction_following` or a benchmark's checkers
  imports neither nltk nor langdetect.
* **Same tokenizers as the reference.** Sentences are counted with punkt's English model: the
  reference loads ``nltk:tokenizers/punkt/english.pickle``, which nltk >= 3.9 serves as
  ``PunktTokenizer("english")`` from punkt_tab, so that is what is built here. Capital words are
  counted on ``nltk.word_tokenize``'s tokens: punkt sentences, each split by nltk's
  ``NLTKWordTokenizer`` (the two steps are done here so each can be memoised). Words are the
  tokens of nltk's ``RegexpTokenizer(r"\\w+")`` (see :func:`count_words` for why nltk's and not
  ``re``'s ``\\w``).
* **Deterministic language detection.** langdetect samples n-grams at random; unseeded (as in
  lm-eval) its answer for a text can change from run to run, mostly for all-capital English.
  ``langdetect.DetectorFactory.seed = 0`` is set before the first detection, as the reference does;
  each detection then re-seeds its own generator, so the answer for a text does not depend on
  what was detected before. That is what makes the per-text cache below safe. Detection runs
  through :mod:`ifdistill.benchmarks.instruction_following.langdetect_fast`, langdetect's detector with faster loops and
  bit-identical probabilities.
* **Speed.** Loose scoring judges up to 8 variants of each response, and several instructions of a
  prompt may measure the same text, so the expensive measurements are memoised with bounded
  caches: sentences and language per text, capital tokens per sentence, and punkt's sentence-break
  decision per candidate context (the variants of a response share almost all of them). Each
  memoised function is pure, so no cache can change a decision.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from ifdistill.paths import MissingResourceError, ensure_nltk_data

_CACHE_SIZE = 2048

_lock = threading.Lock()
_punkt: Any = None
_treebank: Any = None
_words: Any = None
_SENTBREAKS: dict[str, bool] = {}
_SENTBREAK_CACHE_SIZE = 200_000
_fast: Any = None
_detect_error: type[BaseException] | None = None


def _load_nltk() -> None:
    """Import nltk after NLTK_DATA is set and build the punkt English tokenizer once."""
    global _punkt, _treebank, _words
    with _lock:
        if _punkt is not None:
            return
        ensure_nltk_data()
        from nltk.tokenize import (  # noqa: PLC0415 - lazy on purpose
            NLTKWordTokenizer,
            PunktTokenizer,
            RegexpTokenizer,
        )

        class MemoPunkt(PunktTokenizer):
            """punkt with its per-candidate sentence-break decision memoised by context.

            ``text_contains_sentbreak(context)`` depends only on the context string and the fixed
            model parameters, and it is most of punkt's time. Loose variants of one response share
            nearly all their candidate contexts, so memoising it saves most of the work.
            """

            def text_contains_sentbreak(self, text: str) -> bool:
                decision = _SENTBREAKS.get(text)
                if decision is None:
                    decision = super().text_contains_sentbreak(text)
                    if len(_SENTBREAKS) < _SENTBREAK_CACHE_SIZE:
                        _SENTBREAKS[text] = decision
                return decision

        try:
            punkt = MemoPunkt("english")
        except LookupError as exc:
            raise MissingResourceError(
                "nltk could not load the English punkt_tab model and ifdistill never downloads it. "
                "Run `make setup`, or set NLTK_DATA to a folder holding tokenizers/punkt_tab/english "
                f"(python -m nltk.downloader -d DIR punkt_tab). nltk said: {exc}"
            ) from None
        _treebank = _without_timeout_guard(NLTKWordTokenizer())
        _words = RegexpTokenizer(r"\w+")
        _punkt = punkt


def _without_timeout_guard(tokenizer: Any) -> Any:
    """The Treebank tokenizer with its patterns unwrapped from nltk's ``redos`` guard.

    nltk >= 3.10 wraps each compiled ``regex`` pattern in a ``TimedPattern`` that passes a timeout
    to every call (a guard against catastrophic backtracking on hostile input). The tokenizer runs
    about 25 substitutions per sentence, and the wrapper costs about a third of its time. The
    unwrapped patterns are the same compiled objects, so the tokens are the same; the parity tests
    compare them with the references' through every checker that tokenizes words.
    """

    def bare(pattern: Any) -> Any:
        return getattr(pattern, "_rx", pattern)

    for name in ("STARTING_QUOTES", "ENDING_QUOTES", "PUNCTUATION", "CONVERT_PARENTHESES"):
        setattr(tokenizer, name, [(bare(p), sub) for p, sub in getattr(tokenizer, name)])
    for name in ("PARENS_BRACKETS", "DOUBLE_DASHES"):
        pattern, sub = getattr(tokenizer, name)
        setattr(tokenizer, name, (bare(pattern), sub))
    for name in ("CONTRACTIONS2", "CONTRACTIONS3"):
        setattr(tokenizer, name, [bare(p) for p in getattr(tokenizer, name)])
    return tokenizer


def _load_langdetect() -> None:
    """Import langdetect and seed it (before any detection) so its answers are reproducible."""
    global _fast, _detect_error
    with _lock:
        if _fast is not None:
            return
        import langdetect  # noqa: PLC0415

        from ifdistill.benchmarks.instruction_following import langdetect_fast  # noqa: PLC0415 - imports langdetect

        langdetect.DetectorFactory.seed = 0
        _detect_error = langdetect.LangDetectException
        _fast = langdetect_fast


def count_words(text: str) -> int:
    """Number of tokens of nltk's ``RegexpTokenizer(r"\\w+")``, not a whitespace split.

    nltk's own tokenizer is used, not Python's ``re``: nltk >= 3.10 compiles its patterns with the
    ``regex`` engine, whose ``\\w`` also matches combining marks, so "हैं" or "ಹೌದು" is one word
    there and two or three with ``re``.
    """
    if _punkt is None:
        _load_nltk()
    return len(_words.tokenize(text))


@functools.lru_cache(maxsize=_CACHE_SIZE)
def sentences(text: str) -> tuple[str, ...]:
    """punkt's English sentences of the raw text (what ``nltk.sent_tokenize`` returns)."""
    if _punkt is None:
        _load_nltk()
    return tuple(_punkt.tokenize(text))


def count_sentences(text: str) -> int:
    """Number of punkt English sentences of the raw text."""
    return len(sentences(text))


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _treebank_tokens(sentence: str) -> tuple[str, ...]:
    return tuple(_treebank.tokenize(sentence))


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _capital_tokens_in_sentence(sentence: str) -> int:
    return sum(1 for token in _treebank_tokens(sentence) if token.isupper())


@functools.lru_cache(maxsize=_CACHE_SIZE)
def word_tokens(text: str) -> tuple[str, ...]:
    """``nltk.word_tokenize(text)``: punkt's English sentences, each split by the Treebank tokenizer
    (memoised per sentence, so loose variants that share sentences tokenize them once)."""
    return tuple(tok for s in sentences(text) for tok in _treebank_tokens(s))


def edge_word_tokens(text: str, count: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The first and the last ``count`` tokens of ``nltk.word_tokenize(text)``, tokenizing only
    the sentences at either end that hold them (the two may overlap on a short text)."""
    parts = sentences(text)
    head: list[str] = []
    for s in parts:
        head.extend(_treebank_tokens(s))
        if len(head) >= count:
            break
    tail: list[str] = []
    for s in reversed(parts):
        tail[:0] = _treebank_tokens(s)
        if len(tail) >= count:
            break
    return tuple(head[:count]), tuple(tail[-count:])


def words(text: str) -> list[str]:
    """The ``\\w+`` tokens of nltk's RegexpTokenizer (see :func:`count_words`)."""
    if _punkt is None:
        _load_nltk()
    return _words.tokenize(text)


def count_capital_words(text: str) -> int:
    """Tokens of ``nltk.word_tokenize`` for which ``str.isupper()`` holds (so "I" and "USA" count).

    ``word_tokenize`` is punkt's sentences, each split by nltk's Treebank word tokenizer; the
    sentences are memoised, so loose variants that share sentences tokenize them once.
    """
    return sum(_capital_tokens_in_sentence(s) for s in sentences(text))


@functools.lru_cache(maxsize=_CACHE_SIZE)
def detect_language(text: str) -> str | None:
    """langdetect's language code for ``text`` (seeded), or ``None`` where it cannot tell.

    ``None`` stands for ``LangDetectException`` (e.g. a text without letters).
    """
    if _fast is None:
        _load_langdetect()
    try:
        return _fast.detect(text)
    except _detect_error:  # type: ignore[misc]
        return None


@functools.lru_cache(maxsize=_CACHE_SIZE)
def language_matches(text: str, code: str) -> bool:
    """Whether langdetect (seeded) says ``text`` is in ``code``; ``True`` where it cannot tell.

    The checkers' question is always "is it this language?", which langdetect's trials usually
    settle before the last one (see ``FastDetector.is_language``). An undecidable text
    (``LangDetectException``, e.g. no letters at all) counts as followed, as in the reference.
    """
    if _fast is None:
        _load_langdetect()
    try:
        return _fast.is_language(text, code)
    except _detect_error:  # type: ignore[misc]
        return True


def clear_caches() -> None:
    """Forget memoised measurements (for benchmarks that must not reuse earlier work)."""
    sentences.cache_clear()
    _capital_tokens_in_sentence.cache_clear()
    _treebank_tokens.cache_clear()
    word_tokens.cache_clear()
    detect_language.cache_clear()
    language_matches.cache_clear()
    _SENTBREAKS.clear()
    if _fast is not None:
        from ifdistill.benchmarks.instruction_following import langdetect_fast  # noqa: PLC0415

        langdetect_fast.clear_caches()
