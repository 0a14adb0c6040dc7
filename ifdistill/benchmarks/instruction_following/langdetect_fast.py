"""langdetect with the same answers in a fraction of the time: a ``Detector`` with tighter loops.

Why: language detection is most of the scorer's time (three instruction types ask for it, and loose
mode asks again for each variant of a failed response), and langdetect spends it in pure-Python
loops over its 55 languages. This subclass keeps langdetect's profiles, its seeded random stream and
the order of every floating-point operation, and changes only how the work is done:

* ``append``: runs of spaces collapsed with a regex instead of a character loop;
* ``cleaning_text``: counting with regexes. langdetect compares ``unicode_block(ch)`` (an int) with
  the *string* ``'Latin Extended Additional'``, which is never equal, so every character from
  U+0300 up counts as non-Latin; that is reproduced here;
* ``_extract_ngrams``: langdetect's 3-character buffer restarts at every space, so what a word
  emits depends on the word alone; characters are normalised with ``str.translate`` (the table is
  filled from ``NGram.normalize``) and each distinct word's n-grams are memoised;
* ``_detect_block`` (as ``_trials``): the update ``prob[i] *= weight + p(word)[i]`` runs as chained
  ``map(mul, ..., map(add, ...))`` over the five draws between two normalisations (or, for short
  texts that draw the same n-grams again and again, with the factors kept per trial). Every
  element sees the same IEEE operations in the same order as in langdetect, ``sum`` is the same
  builtin, and the generator is drawn in the same sequence (one ``gauss`` per trial, one
  ``choice`` per draw), so the probabilities are bit-identical;
* :meth:`FastDetector.is_language` answers the only question the checkers ask, "is it language
  X?", and stops after the trial where the remaining ones can no longer change that answer
  (usually after 4 of the 7).

``tests/unit/ifeval/test_ifeval_langdetect_fast.py`` checks bit-identical probabilities against
langdetect's own detector and ``is_language`` against ``detect() == code`` on several hundred texts;
the parity tests check every decision against lm-eval. Seeding is the caller's job
(:mod:`ifdistill.benchmarks.instruction_following.text_analysis` sets ``DetectorFactory.seed = 0``); unseeded, the results
are as random as langdetect's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import repeat
from operator import add, mul, truediv

from langdetect import detector_factory
from langdetect.detector import Detector
from langdetect.lang_detect_exception import ErrorCode, LangDetectException
from langdetect.utils.ngram import NGram

_SPACE_RUN_RE = re.compile(" {2,}")
_LATIN_RE = re.compile("[A-z]")  # langdetect's 'A' <= ch <= 'z' (includes [\]^_`)
_NON_LATIN_RE = re.compile("[\u0300-\U0010ffff]")
_NORMALIZED: dict[str, str] = {}  # NGram.normalize per character
_TRANSLATION: dict[int, str] = {}  # the same, as a str.translate table
_WORD_NGRAMS: dict[str, tuple[str, ...]] = {}  # " word " -> the n-grams langdetect emits for it
_WORD_CACHE_SIZE = 200_000
_MARGIN = 1e-9
_REUSE_LIMIT = 256


class FastDetector(Detector):
    """A drop-in ``langdetect.detector.Detector`` (same results, see the module docstring)."""

    def append(self, text: str) -> None:
        text = self.URL_RE.sub(" ", text)
        text = self.MAIL_RE.sub(" ", text)
        text = NGram.normalize_vi(text)
        text = text[: self.max_text_length]
        # langdetect keeps a space only when the previous character was not a space. Its "previous
        # character" starts as 0 (not ' '), and self.text may already hold text from an earlier
        # append, which langdetect does not look at either.
        self.text += _SPACE_RUN_RE.sub(" ", text)

    def cleaning_text(self) -> None:
        latin_count = len(_LATIN_RE.findall(self.text))
        non_latin_count = len(_NON_LATIN_RE.findall(self.text))
        if latin_count * 2 < non_latin_count:
            self.text = _LATIN_RE.sub("", self.text)

    def _extract_ngrams(self) -> list[str]:
        # langdetect feeds normalised characters through a 3-character buffer that restarts after
        # each space (runs of spaces count once; leading spaces are skipped) and skips positions
        # where this and the previous character are both upper case. What a word emits therefore
        # depends on the word alone, so the n-grams of " word " are computed once and memoised.
        text = self.text
        missing = set(text).difference(_NORMALIZED)
        for ch in missing:
            _NORMALIZED[ch] = NGram.normalize(ch)
            _TRANSLATION[ord(ch)] = _NORMALIZED[ch]
        normalized = text.translate(_TRANSLATION)
        words = [w for w in normalized.split(" ") if w]
        if not words:
            return []
        result: list[str] = []
        cache = _WORD_NGRAMS
        word_map = self.word_lang_prob_map
        last_index = len(words) - 1
        for index, word in enumerate(words):
            key = " " + word + " " if index < last_index or normalized.endswith(" ") else " " + word
            grams = cache.get(key)
            if grams is None:
                grams = _word_ngrams(key, word_map)
                if len(cache) < _WORD_CACHE_SIZE:
                    cache[key] = grams
            result.extend(grams)
        return result

    def _trials(self) -> Iterator[tuple[int, list[float]]]:
        """langdetect's ``_detect_block``, yielding ``(trials done, accumulated langprob)``."""
        self.cleaning_text()
        ngrams = self._extract_ngrams()
        if not ngrams:
            raise LangDetectException(ErrorCode.CantDetectError, "No features in text.")
        word_map = self.word_lang_prob_map
        n_trial = self.n_trial
        n_lang = len(self.langlist)
        conv = self.CONV_THRESHOLD
        limit = self.ITERATION_LIMIT
        langprob = [0.0] * n_lang
        rand = self.random
        rand.seed(self.seed)
        choice = rand.choice
        # Short texts draw the same few n-grams again and again: there, the factors
        # weight + p(word) are kept per trial; long texts rarely repeat one, so they are
        # computed lazily inside the products instead (both give the same floats).
        reuse = len(set(ngrams)) <= _REUSE_LIMIT
        for trial in range(n_trial):
            prob = self._init_probability()
            alpha = self.alpha + rand.gauss(0.0, 1.0) * self.ALPHA_WIDTH
            w = [alpha / self.BASE_FREQ] * n_lang
            factors: dict[str, list[float]] = {}

            def factor(word: str) -> list[float]:
                f = factors.get(word)
                if f is None:
                    f = factors[word] = list(map(add, w, word_map[word]))  # noqa: B023
                return f

            # langdetect multiplies prob[i] *= weight + p(word)[i] once per draw and normalises
            # (checking convergence) after draws 0, 5, 10, ...: so the first block is one draw,
            # then blocks of five, chained through lazy maps in the same order of operations.
            prob = list(map(mul, prob, map(add, w, word_map[choice(ngrams)])))
            i = 0
            while True:
                prob = list(map(truediv, prob, repeat(sum(prob), n_lang)))
                # All p >= 0 (a zero total raises, as in langdetect), so max() is langdetect's
                # running maximum started at 0.0.
                if max(prob) > conv or i >= limit:
                    break
                if reuse:
                    f1, f2, f3, f4, f5 = [factor(choice(ngrams)) for _ in range(5)]
                else:
                    p1, p2, p3, p4, p5 = [word_map[choice(ngrams)] for _ in range(5)]
                    f1, f2, f3, f4, f5 = (
                        map(add, w, p1), map(add, w, p2), map(add, w, p3), map(add, w, p4),
                        map(add, w, p5),
                    )  # fmt: skip
                prob = list(map(mul, map(mul, map(mul, map(mul, map(mul, prob, f1), f2), f3), f4), f5))
                i += 5
            langprob = list(map(add, langprob, map(truediv, prob, repeat(n_trial, n_lang))))
            yield trial + 1, langprob

    def _detect_block(self) -> None:
        for _, langprob in self._trials():
            pass
        self.langprob = langprob

    def is_language(self, code: str) -> bool:
        """``self.detect() == code``, stopping once the remaining trials cannot change the answer.

        After a trial, each language's final probability is its running sum plus what the
        remaining trials add, and each trial adds between 0 and ``1 / n_trial`` (its probabilities
        are normalised). So if another language already leads ``code`` by more than the remaining
        trials could add, the answer is no; if ``code`` leads every other language by more than
        that and is above langdetect's 0.1 reporting threshold, the answer is yes. A margin of
        1e-9 keeps rounding of the sums out of the decision; close calls run all trials.
        """
        target = self.langlist.index(code) if code in self.langlist else -1
        n_trial = self.n_trial
        for done, langprob in self._trials():
            if target < 0:
                return False  # langdetect cannot answer a code it has no profile for
            slack = (n_trial - done) / n_trial + _MARGIN
            mine = langprob[target]
            best_other = max(p for j, p in enumerate(langprob) if j != target)
            if best_other > mine + slack:
                return False
            if mine > best_other + slack and mine > self.PROB_THRESHOLD + _MARGIN:
                return True
        self.langprob = langprob
        return self.detect() == code


def _word_ngrams(key: str, word_map: dict) -> tuple[str, ...]:
    """The n-grams langdetect emits for one space-delimited word (``key`` = " word" or " word ")."""
    out = []
    for k in range(1, len(key)):
        ch = key[k]
        if ch.isupper() and key[k - 1].isupper():
            continue  # inside an all-capitals run: langdetect's "capitalword"
        if ch != " " and ch in word_map:
            out.append(ch)
        gram = key[k - 1 : k + 1]
        if gram in word_map:
            out.append(gram)
        if k >= 2:
            gram = key[k - 2 : k + 1]
            if gram in word_map:
                out.append(gram)
    return tuple(out)


def clear_caches() -> None:
    """Forget the memoised normalisation and per-word n-grams (for cold-start benchmarks)."""
    _NORMALIZED.clear()
    _TRANSLATION.clear()
    _WORD_NGRAMS.clear()


def _detector(text: str) -> FastDetector:
    detector_factory.init_factory()
    detector = FastDetector(detector_factory._factory)
    detector.append(text)
    return detector


def detect(text: str) -> str:
    """Like ``langdetect.detect``: the most probable language code, or ``'unknown'``.

    Raises ``LangDetectException`` where langdetect does (no usable n-gram in the text).
    """
    return _detector(text).detect()


def is_language(text: str, code: str) -> bool:
    """``langdetect.detect(text) == code``, usually after fewer of langdetect's 7 trials.

    Raises ``LangDetectException`` where langdetect does.
    """
    return _detector(text).is_language(code)
