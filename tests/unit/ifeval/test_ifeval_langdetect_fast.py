"""The fast langdetect detector must reproduce langdetect exactly (seeded), answer by answer."""

from __future__ import annotations

import langdetect
import pytest
from langdetect import detector_factory

from ifdistill.benchmarks.instruction_following import langdetect_fast
from tests.parity import ifeval_boundary_cases as boundary_cases
from ifdistill.benchmarks.instruction_following.scoring import loose_variants

langdetect.DetectorFactory.seed = 0

TEXTS = [
    *boundary_cases.MULTILINGUAL.values(),
    *(t.upper() for t in boundary_cases.MULTILINGUAL.values()),
    "Hello", "OK", "I", "THE END", "naïve café", "Xin chào thế giới", "中文文本测试", "ΑΒΓ δέλτα",
    "visit https://example.com/x or mail a.b@example.org today please",
    "  spaced   out    text  ", "ÄÖÜ äöü ß", "A B C D E F", "SIÁN SÍ", "e e e E E E",
    "Ph.D. in Mr. Smith's U.S.A. office", "șțȘȚ ăîâ", "ﾃｽﾄ ｶﾀｶﾅ", "ⅫⅪ",
]  # fmt: skip


def corpus():
    rows = boundary_cases.generate(seed=3, per_type=4, combos=40)
    texts = list(TEXTS)
    for row in rows:
        texts.extend(loose_variants(row["response"])[:2])
    return list(dict.fromkeys(texts))


def reference(text):
    detector_factory.init_factory()
    detector = detector_factory._factory.create()
    detector.append(text)
    try:
        return detector.detect(), detector.langprob
    except langdetect.LangDetectException as exc:
        return "error", str(exc)


def fast(text):
    detector = langdetect_fast._detector(text)
    try:
        return detector.detect(), detector.langprob
    except langdetect.LangDetectException as exc:
        return "error", str(exc)


def test_same_probabilities_bit_for_bit():
    texts = corpus()
    assert len(texts) > 300
    mismatches = [t for t in texts if reference(t) != fast(t)]
    assert mismatches == []


def test_is_language_equals_detect():
    for text in corpus()[:200]:
        expected, _ = reference(text)
        for code in ("en", "es", "de", "ja", expected):
            if expected == "error":
                with pytest.raises(langdetect.LangDetectException):
                    langdetect_fast.is_language(text, code)
            else:
                assert langdetect_fast.is_language(text, code) is (expected == code), (text, code)


def test_code_without_profile_is_never_matched():
    assert langdetect_fast.is_language("The weather is lovely today.", "xx") is False
