"""Deterministic IFBench responses on the constraints' boundaries, for parity tests and benchmarks.

One generator per constraint makes a response at, just below or just above what the constraint
asks (counts off by one, punctuation glued to words, case variants, ASCII vs Unicode look-alikes,
empty sentences and fields where the reference crashes), from :class:`random.Random` only. The rows
are assembled as IFEval's are (:func:`tests.parity.ifeval_boundary_cases.assemble`: loose-mode noise
on the first/last line and ``*``, combinations, blank and markup-only responses). The ``count:*``,
``ratio:*``, ``words:*`` and ``sentence:*`` generators are here; ``format:*``, ``custom:*`` and
``repeat:*`` in :mod:`tests.parity.ifbench_boundary_cases_format`.

kwargs stay where the reference is deterministic: ``repeat:repeat_span`` never starts at 0.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from ifdistill.benchmarks.ifbench.instructions_count import CONJUNCTIONS, PERSON_NAMES, PRONOUNS
from ifdistill.benchmarks.ifbench.text import STOPWORDS
from tests.parity.ifbench_boundary_cases_format import GENERATORS as FORMAT_GENERATORS
from tests.parity.ifeval_boundary_cases import WORDS, Case, assemble, near, pick, sentence, words

PIECES = ("word", "don't", "well-known", "3.14", "e-mail", "--", "...", "na\u00efve", "x_y", "\u2014", "1,000", "(a)")
_STOP = sorted(w for w in STOPWORDS if "'" not in w)


def _count(rng: random.Random) -> int:
    return rng.randint(1, 8)


def _as_float(rng: random.Random, n: int) -> int | float:
    """Counts appear as floats in the benchmark data (``12.0``) and as ints elsewhere."""
    return float(n) if rng.random() < 0.7 else n


def _word_count_range(rng):
    lo = rng.randint(1, 25)
    hi = lo + rng.randint(0, 4)
    n = near(rng, rng.choice((lo, hi)))
    kwargs = {"min_words": _as_float(rng, lo), "max_words": _as_float(rng, hi)}
    return "count:word_count_range", kwargs, " ".join(words(rng, n, WORDS + list(PIECES)))


def _unique_words(rng):
    n = rng.randint(1, 12)
    vocab = words(rng, near(rng, n)) or ["x"]
    forms = [rng.choice((w, w.upper(), w + ",", "(" + w + ")", w + "'s", "--")) for w in vocab]
    forms += words(rng, rng.randint(0, 4), vocab)
    rng.shuffle(forms)
    return "count:unique_word_count", {"N": _as_float(rng, n)}, " ".join(forms)


def _conjunctions(rng):
    n = rng.randint(1, 7)
    forms = sorted(CONJUNCTIONS) + ["And", "and,", "(or)", "so.", "YET", "nor;", "andes", "for-"]
    picked = [pick(rng, forms) for _ in range(near(rng, n))]
    return "count:conjunctions", {"small_n": _as_float(rng, n)}, " ".join(picked + words(rng, 4))


def _person_names(rng):
    n = rng.randint(1, 6)
    names = rng.sample(PERSON_NAMES, near(rng, n)) + rng.sample(("Emmanuel", "emma", "LIAM", "Leonard", "Ava"), 2)
    rng.shuffle(names)
    return "count:person_names", {"N": _as_float(rng, n)}, " met ".join(names)


NUMBER_FORMS = ("3.14", "1,000", "42", "x2", "\u0663", "-5", "1st", "2024-01-01", "7%", "0.5")


def _numbers(rng):
    n = rng.randint(1, 8)
    items = [pick(rng, NUMBER_FORMS) for _ in range(near(rng, n))] + words(rng, 3)
    rng.shuffle(items)
    return "count:numbers", {"N": _as_float(rng, n)}, " ".join(items)


def _punctuation(rng):
    marks = [m for m in (".", ",", ";", ":", "!", "?", "?!", "!?", "\u203d") if rng.random() < 0.75]
    return "count:punctuation", {}, " ".join(w + m for w, m in zip(words(rng, len(marks)), marks)) or "none"


JAPANESE = ("\u65e5\u672c", "\u30ab\u30bf\u30ab\u30ca", "\u3072\u3089\u304c\u306a", "\u6f22\u5b57!", "\u4e2d")


def _japanese(rng):
    n = rng.randint(1, 4)
    items = []
    for i in range(1, rng.randint(3, 14)):
        ok = i % n == 0 and rng.random() < 0.85
        items.append(pick(rng, JAPANESE) if ok else rng.choice(words(rng, 1) + ["123", "--", "\uff01"]))
    return "count:words_japanese", {"N": _as_float(rng, n)}, " ".join(items)


def _pronouns(rng):
    n = rng.randint(1, 10)
    forms = sorted(PRONOUNS) + ["she/her", "It's", "THEY.", "us!", "i'm", "hisself"]
    items = [pick(rng, forms) for _ in range(near(rng, n))] + words(rng, 3)
    rng.shuffle(items)
    return "count:pronouns", {"N": _as_float(rng, n)}, " ".join(items)


def _keywords_multiple(rng):
    kws = rng.sample(WORDS, 5)
    parts = []
    for kw, n in zip(kws, (1, 2, 3, 5, 7)):
        parts += [rng.choice((kw, kw.upper(), kw + "s", "un" + kw)) for _ in range(near(rng, n) if rng.random() < 0.3 else n)]
    rng.shuffle(parts)
    kwargs = {f"keyword{i}": rng.choice((k, " " + k + " ")) for i, k in enumerate(kws, start=1)}
    return "count:keywords_multiple", kwargs, " ".join(parts)


def _stop_words(rng):
    total = rng.randint(1, 12)
    stops = rng.randint(0, total)
    items = words(rng, stops, _STOP) + words(rng, total - stops)
    rng.shuffle(items)
    pct = round(100 * stops / total) + rng.choice((-1, 0, 0, 1))
    text = " ".join(items) if rng.random() < 0.9 else rng.choice(("!!!", "--- ...", "\u2014"))
    return "ratio:stop_words", {"percentage": _as_float(rng, max(0, pct))}, text


def _endings(rng, counts: tuple[int, int, int]) -> str:
    marks = ["."] * counts[0] + ["?"] * counts[1] + ["!"] * counts[2]
    rng.shuffle(marks)
    return " ".join(sentence(rng, rng.randint(1, 5), m) for m in marks) or "no end"


def _sentence_type(rng):
    q = rng.randint(0, 3)
    counts = (max(0, 2 * q + rng.choice((-1, 0, 0, 1))), q, rng.randint(0, 1))
    text = _endings(rng, counts)
    if rng.random() < 0.2:
        text = text.replace(".", ' said "Mr. Smith."', 1)
    return "ratio:sentence_type", {}, text


def _sentence_balance(rng):
    k = rng.randint(0, 3)
    counts = tuple(max(0, k + rng.choice((-1, 0, 0, 0, 1))) for _ in range(3))
    return "ratio:sentence_balance", {}, _endings(rng, counts)


def _trigram_share(text: str, reference: str) -> float:
    mine = set(zip(text, text[1:], text[2:]))
    ref = set(zip(reference, reference[1:], reference[2:]))
    return 100 * len(mine & ref) / len(mine) if mine else 0.0


def _overlap(rng):
    reference = " ".join(sentence(rng, 8) for _ in range(2))
    cut = rng.randint(0, len(reference))
    text = reference[:cut] + " " + " ".join(words(rng, rng.randint(0, 10)))
    if rng.random() < 0.1:
        text = rng.choice(("ab", "x"))
    pct = round(_trigram_share(text, reference)) + rng.choice((-3, -2, -1, 0, 1, 2, 3))
    return "ratio:overlap", {"reference_text": reference, "percentage": _as_float(rng, max(0, pct))}, text


def _sentence_words(rng):
    base = rng.choice((("Cats run.", "Dogs sit.", "Owls fly."), ("I am here.", "We go now.", "Hi there!")))
    items = list(base)[: rng.choice((2, 3, 3, 3, 4))] + ([] if rng.random() < 0.8 else ["More words."])
    if rng.random() < 0.3:
        items[0] = items[0].replace(".", "s.")
    return "ratio:sentence_words", {}, " ".join(items)


def _alphabet(rng):
    start = rng.randrange(26)
    items = []
    for i in range(rng.randint(1, 8)):
        letter = chr(97 + (start + i) % 26)
        word = letter + pick(rng, WORDS)[1:]
        if rng.random() < 0.08:
            word = rng.choice(("zebra", "3rd", "--", word.upper(), "'" + word))
        items.append(word + rng.choice(("", "", ",", ".")))
    return "words:alphabet", {}, " ".join(items)


def _vowel(rng):
    pools = ("a bad cat had a mad hat", "the red pen fell", "to do or not", "audio queue", "I sit in it")
    lines = [pick(rng, pools) for _ in range(rng.choice((1, 1, 1, 2)))]
    return "words:vowel", {}, rng.choice(("\n", "\n\n")).join(lines)


def _consonants(rng):
    pool = ("street", "strong", "myth", "cat", "a", "blast", "tree", "bottle", "I", "rhythm", "go-to", "x")
    return "words:consonants", {}, " ".join(words(rng, rng.randint(1, 6), pool))


PALINDROMES = ("level", "radar", "racecar", "civic", "madam", "refer", "rotor", "kayak", "Level!", "noon", "tenet")


def _palindrome(rng):
    items = words(rng, near(rng, 10), PALINDROMES) + words(rng, 3)
    rng.shuffle(items)
    return "words:palindrome", {}, " ".join(items)


def _prime_lengths(rng):
    pool = ("to", "cat", "hello", "seventh", "a", "four", "wordy", "don't", "eleven-char", "xxxxxxxxxxx")
    return "words:prime_lengths", {}, " ".join(words(rng, rng.randint(1, 6), pool))


VERB_STARTS = ("Write", "Imagine", "Running", "The", "Sure", "Explain", "Walked", "I", "Create", "Good", "Is")


def _start_verb(rng):
    return "words:start_verb", {}, pick(rng, VERB_STARTS) + " " + sentence(rng, 5)


def _repeats(rng):
    n = rng.randint(1, 4)
    w = pick(rng, WORDS)
    items = [rng.choice((w, w.upper(), w + ".", w + "'")) for _ in range(near(rng, n))] + words(rng, 4)
    rng.shuffle(items)
    return "words:repeats", {"small_n": _as_float(rng, n)}, " ".join(items)


SYLLABLES = ("cat", "table", "banana", "dog", "apple", "elephant", "go", "mountain", "the", "beautiful")


def _odd_even(rng):
    items = words(rng, rng.randint(1, 7), SYLLABLES)
    return "words:odd_even_syllables", {}, " ".join(items)


def _last_first(rng):
    w = words(rng, 6)
    items = [f"{w[0]} is {w[1]}.", f"{w[1].title()} likes {w[2]}!", f"{w[2]} sees {w[3]}?"]
    if rng.random() < 0.4:
        items.insert(rng.randrange(1, 3), rng.choice((f"{w[4]} went home.", "!!!", "...", '"Quote."')))
    return "words:last_first", {}, " ".join(items[: rng.randint(1, len(items))])


def _paragraph_last_first(rng):
    lines = []
    for _ in range(rng.randint(1, 4)):
        w = pick(rng, WORDS)
        end = w if rng.random() < 0.8 else pick(rng, WORDS)
        lines.append(rng.choice((f"{w} is near the {end}.", f"{w.title()}, oh {end}!", "***", "", f"{w}")))
    return "words:paragraph_last_first", {}, "\n".join(lines)


def _no_consecutive(rng):
    return "words:no_consecutive", {}, " ".join(words(rng, rng.randint(1, 6), WORDS + ["A", "an", "--"]))


def _keywords_position(rng):
    n, m, kw = rng.randint(1, 3), rng.randint(1, 5), pick(rng, WORDS)
    sentences = [words(rng, rng.randint(3, 7)) for _ in range(near(rng, n) or 1)]
    if len(sentences) >= n:
        target = sentences[n - 1]
        target.insert(min(len(target), max(0, m - 1 + rng.choice((-1, 0, 0, 0, 1)))), rng.choice((kw, kw, kw.title(), kw + ",")))
    text = " ".join(" ".join(s).capitalize() + "." for s in sentences)
    return "words:keywords_specific_position", {"keyword": kw, "n": n, "m": m}, text


def _words_position(rng):
    kw = pick(rng, WORDS)
    items = words(rng, rng.randint(2, 6))
    items.insert(1, rng.choice((kw, kw, kw.upper(), kw + ".")))
    items.insert(len(items) - rng.choice((1, 1, 0, 2)), rng.choice((kw, kw, kw + "'s")))
    return "words:words_position", {"keyword": rng.choice((kw, " " + kw))}, " ".join(items)


def _alliteration(rng):
    out = []
    for run in sorted(rng.randint(0, 4) for _ in range(rng.randint(1, 3))):
        letter = rng.choice("bcdfst")
        out.append(" ".join([letter + "ig"] * run + ["the", "end"]) + ".")
    return "sentence:alliteration_increment", {}, " ".join(out)


def _sentence_keyword(rng):
    n, kw = rng.randint(1, 4), pick(rng, WORDS)
    sentences = [words(rng, 4) for _ in range(near(rng, n) or 1)]
    place = min(len(sentences), max(1, n + rng.choice((-1, 0, 0, 1)))) - 1
    sentences[place].append(rng.choice((kw, kw.upper(), kw + "s")))
    text = " ".join(" ".join(s).capitalize() + pick(rng, (".", "!", "?")) for s in sentences)
    return "sentence:keyword", {"word": kw, "N": _as_float(rng, n)}, text


def _increment(rng):
    step = rng.randint(1, 3)
    counts = [rng.randint(1, 3)]
    for _ in range(rng.randint(0, 3)):
        counts.append(counts[-1] + step + rng.choice((0, 0, 0, -1, 1)))
    text = " ".join(sentence(rng, c) for c in counts)
    return "sentence:increment", {"small_n": _as_float(rng, step)}, text


GENERATORS: dict[str, Callable[[random.Random], Case]] = {
    "count:word_count_range": _word_count_range, "count:unique_word_count": _unique_words,
    "count:conjunctions": _conjunctions, "count:person_names": _person_names, "count:numbers": _numbers,
    "count:punctuation": _punctuation, "count:words_japanese": _japanese, "count:pronouns": _pronouns,
    "count:keywords_multiple": _keywords_multiple, "ratio:stop_words": _stop_words,
    "ratio:sentence_type": _sentence_type, "ratio:sentence_balance": _sentence_balance,
    "ratio:overlap": _overlap, "ratio:sentence_words": _sentence_words, "words:alphabet": _alphabet,
    "words:vowel": _vowel, "words:consonants": _consonants, "words:palindrome": _palindrome,
    "words:prime_lengths": _prime_lengths, "words:start_verb": _start_verb, "words:repeats": _repeats,
    "words:odd_even_syllables": _odd_even, "words:last_first": _last_first,
    "words:paragraph_last_first": _paragraph_last_first, "words:no_consecutive": _no_consecutive,
    "words:keywords_specific_position": _keywords_position, "words:words_position": _words_position,
    "sentence:alliteration_increment": _alliteration, "sentence:keyword": _sentence_keyword,
    "sentence:increment": _increment,
}  # fmt: skip


def generate(seed: int = 0, per_type: int = 50, combos: int = 300) -> list[dict[str, Any]]:
    """``per_type`` rows per IFBench constraint, ``combos`` combined rows, and each constraint on
    every special response (blank, lone markup, ...): about 4,100 rows with the defaults."""
    return assemble({**GENERATORS, **FORMAT_GENERATORS}, seed=seed, per_type=per_type, combos=combos)
