"""Deterministic responses that sit on the checkers' boundaries, for parity tests and benchmarks.

Real model responses rarely probe the corners where two implementations of IFEval could differ:
off-by-one counts, letter case, code fences around JSON, ``P.S.`` spellings, the first/last line
that loose mode strips, ``*`` that loose mode deletes, blank responses, non-English text, ``***``
dividers, placeholders, ``---`` bullets, highlights, sections and so on. :func:`generate` builds a
few thousand such rows (``prompt``, ``instruction_id_list``, ``kwargs``, ``response``) from a seed,
with only :class:`random.Random` (no set or dict-order dependence), so the same seed always gives
the same rows.

kwargs stay where the reference is deterministic: no count of 0 and no empty string (lm-eval turns
falsy kwargs into random ones) and letters a-z only for ``letter_frequency`` (lm-eval draws a
random letter for anything else). Those cases are covered by the hand-written tests instead.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ifdistill.benchmarks.ifeval.instructions_case_language import LANGUAGE_CODES

Case = tuple[str, dict[str, Any], str]  # (instruction id, kwargs, response)

WORDS = (
    "apple banana river mountain cat dog house light music paper stone cloud garden window "
    "friend market summer winter ocean forest bridge travel coffee letter secret"
).split()
FILLER = (
    "The quick brown fox jumps over the lazy dog. It was a bright cold day in April. "
    "Dr. Smith arrived at 5 p.m. and met Mr. Jones. Prices rose 3.5% in the U.S. last year! "
    "Why not? Well... maybe later. She said \"hello.\" Then she left. e.g. this one, i.e. that."
).split(" ")
MULTILINGUAL = {
    "en": "The weather is lovely today and we are going to the park with our friends.",
    "es": "El tiempo es muy agradable hoy y vamos al parque con nuestros amigos.",
    "fr": "Il fait très beau aujourd'hui et nous allons au parc avec nos amis.",
    "de": "Das Wetter ist heute sehr schön und wir gehen mit unseren Freunden in den Park.",
    "it": "Il tempo è molto bello oggi e andiamo al parco con i nostri amici.",
    "pt": "O tempo está muito agradável hoje e vamos ao parque com os nossos amigos.",
    "ru": "Сегодня прекрасная погода, и мы идём в парк с нашими друзьями.",
    "uk": "Сьогодні чудова погода, і ми йдемо до парку з нашими друзями.",
    "bg": "Днес времето е прекрасно и отиваме в парка с нашите приятели.",
    "pl": "Dzisiaj jest piękna pogoda i idziemy do parku z naszymi przyjaciółmi.",
    "fi": "Tänään on kaunis sää ja menemme puistoon ystäviemme kanssa.",
    "ja": "今日はとても良い天気なので、友達と一緒に公園に行きます。",
    "ko": "오늘은 날씨가 아주 좋아서 친구들과 함께 공원에 갑니다.",
    "hi": "आज मौसम बहुत अच्छा है और हम अपने दोस्तों के साथ पार्क जा रहे हैं।",
    "ar": "الطقس جميل جدا اليوم ونحن ذاهبون إلى الحديقة مع أصدقائنا.",
    "fa": "امروز هوا بسیار خوب است و ما با دوستانمان به پارک می رویم.",
    "he": "מזג האוויר נפלא היום ואנחנו הולכים לפארק עם החברים שלנו.",
    "th": "วันนี้อากาศดีมากและเรากำลังจะไปสวนสาธารณะกับเพื่อนๆ",
    "vi": "Hôm nay thời tiết rất đẹp và chúng tôi sẽ đi công viên với bạn bè.",
    "sw": "Hali ya hewa ni nzuri sana leo na tunaenda bustanini na marafiki zetu.",
    "bn": "আজ আবহাওয়া খুব সুন্দর এবং আমরা বন্ধুদের সাথে পার্কে যাচ্ছি।",
    "ta": "இன்று வானிலை மிகவும் அழகாக இருக்கிறது, நாங்கள் நண்பர்களுடன் பூங்காவிற்கு செல்கிறோம்.",
}
INTROS = ("Sure! Here is my answer:", "Of course.", "**Answer**", "Here you go, my friend:", "OK")
OUTROS = ("Hope this helps!", "Let me know if you need more.", "*Thanks*", "P.S. bye", "---")


def pick(rng: random.Random, items):
    return items[rng.randrange(len(items))]


def words(rng: random.Random, n: int, pool=WORDS) -> list[str]:
    """``n`` words drawn from ``pool`` (shared with the IFBench generators)."""
    return [pick(rng, pool) for _ in range(n)]


def sentence(rng: random.Random, n: int, end: str = ".") -> str:
    """A capitalised sentence of ``max(1, n)`` words from :data:`WORDS` ending in ``end``."""
    return " ".join(words(rng, max(1, n))).capitalize() + end


def _sentence(rng: random.Random, n_words: int) -> str:
    return " ".join(pick(rng, FILLER) for _ in range(n_words)).strip()


def near(rng: random.Random, threshold: int) -> int:
    """A count at, just below or just above ``threshold`` (never negative)."""
    return max(0, threshold + rng.choice((-2, -1, -1, 0, 0, 0, 1, 1, 2)))


def _relation(rng: random.Random) -> str:
    return rng.choice(("less than", "at least"))


def _keywords(rng: random.Random) -> Case:
    kws = rng.sample(WORDS, rng.randint(1, 3))
    parts = [_sentence(rng, 6)]
    for kw in kws:
        if rng.random() < 0.7:
            form = rng.choice((kw, kw.upper(), kw.title(), "un" + kw + "s", kw[:1] + "*" + kw[1:]))
            parts.insert(rng.randrange(len(parts) + 1), form)
    return "keywords:existence", {"keywords": kws}, "\n".join(parts)


def _frequency(rng: random.Random) -> Case:
    kw, freq = pick(rng, WORDS), rng.randint(1, 5)
    chunks = [rng.choice((kw, kw.upper(), f"**{kw}**", kw + "s")) for _ in range(near(rng, freq))]
    chunks += [_sentence(rng, 4) for _ in range(rng.randint(1, 3))]
    rng.shuffle(chunks)
    kwargs = {"keyword": kw, "frequency": freq, "relation": _relation(rng)}
    return "keywords:frequency", kwargs, rng.choice((" ", "\n")).join(chunks)


def _forbidden(rng: random.Random) -> Case:
    words = rng.sample(WORDS, rng.randint(1, 3))
    w = words[0]
    form = rng.choice((w, w.upper(), w + "s", "re" + w, f"{w}.", f"({w})", w[:2] + "*" + w[2:], "x"))
    lines = [_sentence(rng, 5), form + " " + _sentence(rng, 3), _sentence(rng, 4)]
    rng.shuffle(lines)
    return "keywords:forbidden_words", {"forbidden_words": words}, "\n".join(lines)


def _letter(rng: random.Random) -> Case:
    letter = rng.choice("abcdefghijklmnopqrstuvwxyzAEZ")
    freq = rng.randint(1, 12)
    body = "".join(rng.choice((letter.lower(), letter.upper())) + " " for _ in range(near(rng, freq)))
    noise = "".join(rng.choice("0123456789 .,;:-") for _ in range(rng.randint(1, 20)))
    kwargs = {"letter": letter, "let_frequency": freq, "let_relation": _relation(rng)}
    return "keywords:letter_frequency", kwargs, noise + "\n" + body + "\n" + noise


def _language(rng: random.Random) -> Case:
    lang = rng.choice(sorted(MULTILINGUAL))
    text = MULTILINGUAL[lang]
    roll = rng.random()
    if roll < 0.2:
        text = MULTILINGUAL["en"] + "\n" + text
    elif roll < 0.3:
        text = text.upper()
    elif roll < 0.4:
        text = rng.choice(("12345 678", "!!! ???", "\U0001f600\U0001f600", "3.14"))
    want = rng.choice((lang, lang, "en", rng.choice(sorted(LANGUAGE_CODES))))
    return "language:response_language", {"language": want}, text


def _sentences(rng: random.Random) -> Case:
    n = rng.randint(1, 8)
    text = " ".join(_sentence(rng, rng.randint(3, 9)) for _ in range(near(rng, n)))
    return "length_constraints:number_sentences", {"num_sentences": n, "relation": _relation(rng)}, text


WORD_PIECES = (
    "word", "don't", "well-known", "3.14", "e-mail", "_", "na\u00efve", "x_y", "\u2014",
    "\u0928\u092e\u0938\u094d\u0924\u0947", "\u0cb9\u0ccc\u0ca6\u0cc1", "cafe\u0301", "\u65e5\u672c\u8a9e",
)  # fmt: skip  (Hindi and Kannada words with combining vowel signs, a combining accent, Japanese)


def _words(rng: random.Random) -> Case:
    n = rng.randint(1, 40)
    if rng.random() < 0.3:  # scripts whose words contain combining marks
        text = MULTILINGUAL[rng.choice(("hi", "bn", "ta", "th", "vi", "ko", "ar", "ja"))]
    else:
        text = " ".join(pick(rng, WORD_PIECES) for _ in range(near(rng, n)))
    return "length_constraints:number_words", {"num_words": n, "relation": _relation(rng)}, text


def _paragraphs_stars(rng: random.Random) -> Case:
    n = rng.randint(1, 5)
    sep = rng.choice(("\n***\n", "***", " *** ", "\n\n***\n\n", "\n****\n", "\n* * *\n"))
    text = sep.join(_sentence(rng, 5) for _ in range(near(rng, n) or 1))
    roll = rng.random()
    if roll < 0.15:
        text = "***\n" + text
    elif roll < 0.3:
        text = text + "\n***"
    elif roll < 0.4:
        text = text.replace(sep, sep + sep, 1)
    return "length_constraints:number_paragraphs", {"num_paragraphs": n}, text


def _nth_paragraph(rng: random.Random) -> Case:
    n = rng.randint(1, 5)
    nth = rng.randint(1, n)
    word = pick(rng, WORDS)
    paras = [_sentence(rng, 6) for _ in range(near(rng, n) or 1)]
    if nth <= len(paras):
        forms = (word, word.title(), f'"{word}', f"'{word}", f"{word}.", f"{word},", word + "s", f"**{word}**")
        paras[nth - 1] = rng.choice(forms) + " " + paras[nth - 1]
    text = rng.choice(("\n\n", "\n\n", "\n\n\n", "\n")).join(paras)
    if rng.random() < 0.2:
        text = "\n\n" + text + "\n\n"
    kwargs = {"num_paragraphs": n, "nth_paragraph": nth, "first_word": rng.choice((word, word.upper()))}
    return "length_constraints:nth_paragraph_first_word", kwargs, text


def _placeholders(rng: random.Random) -> Case:
    n = rng.randint(1, 6)
    forms = ("[name]", "[]", "[a [b] c]", "[multi\nline]", "[[x]]", "[x]y]")
    items = [rng.choice(forms) for _ in range(near(rng, n))]
    return "detectable_content:number_placeholders", {"num_placeholders": n}, " text ".join(items) + " end"


POSTSCRIPTS = (
    "P.S. note", "p.s. note", "P. S. note", "PS note", "P.S note", "P.P.S note", "P. P. S. note",
    "p.p.s", "helP.S.x", "P.\nS. x", "no postscript", "P.P.S. and P.S.",
)  # fmt: skip


def _postscript(rng: random.Random) -> Case:
    marker = rng.choice(("P.S.", "P.P.S"))
    text = _sentence(rng, 6) + "\n" + pick(rng, POSTSCRIPTS)
    return "detectable_content:postscript", {"postscript_marker": marker}, text


BULLET_LINES = ("* item", "- item", "  * item", "---", "**bold** line", "*", "1. item", "-", "*item*")


def _bullets(rng: random.Random) -> Case:
    n = rng.randint(1, 6)
    lines = [pick(rng, BULLET_LINES) for _ in range(near(rng, n))]
    return "detectable_format:number_bullet_lists", {"num_bullets": n}, "Intro\n" + "\n".join(lines)


ANSWERS = (
    "My answer is yes.", "My answer is no.", "My answer is maybe.", "my answer is yes.",
    "My answer is yes", "My answer is no!",
)  # fmt: skip


def _constrained(rng: random.Random) -> Case:
    text = rng.choice(("", "Well. ", "**")) + pick(rng, ANSWERS) + rng.choice(("", " Because.", "**"))
    return "detectable_format:constrained_response", {}, text


def _highlights(rng: random.Random) -> Case:
    n = rng.randint(1, 5)
    forms = ("*one*", "**two**", "* *", "** **", "*a\nb*", "***x***", "*x", "**")
    spans = [rng.choice(forms) for _ in range(near(rng, n))]
    return "detectable_format:number_highlighted_sections", {"num_highlights": n}, " and ".join(spans) or "none"


def _sections(rng: random.Random) -> Case:
    spliter = rng.choice(("Section", "SECTION", "Chapter", "PARAGRAPH", "Part"))
    n = rng.randint(1, 5)
    heads = []
    for i in range(1, near(rng, n) + 1):
        forms = (f"{spliter} {i}", f"{spliter}{i}", f"{spliter.lower()} {i}", f"{spliter} X", f"{spliter} {i}:")
        heads.append(rng.choice(forms))
    text = "\n".join(h + "\n" + _sentence(rng, 4) for h in heads)
    return "detectable_format:multiple_sections", {"section_spliter": spliter, "num_sections": n}, text


JSON_BODIES = ('{"a": 1}', "[1, 2]", "42", "null", '{"a": 1', "{'a': 1}", '{"k": "*v*"}', "{}")
JSON_WRAPPERS = (
    "@", "```json\n@\n```", "```JSON\n@\n```", "```Json\n@\n```", "```\n@\n```",
    "```python\n@\n```", "Here:\n@", "@\nDone.", "```json@```",
)  # fmt: skip


def _json(rng: random.Random) -> Case:
    text = pick(rng, JSON_WRAPPERS).replace("@", pick(rng, JSON_BODIES))
    return "detectable_format:json_format", {}, text


TITLES = ("<<A Title>>", "<< >>", "<<>>", "<<a\nb>>", "<title>", "<<<x>>>", "<<x>> and <<y>>", "none", "<<*>>")


def _title(rng: random.Random) -> Case:
    return "detectable_format:title", {}, pick(rng, TITLES) + "\n" + _sentence(rng, 5)


TWO_RESPONSES = (
    "{a}\n******\n{b}", "{a}******{a}", "{a}\n*******\n{b}", "******\n{a}\n******\n{b}",
    "{a}\n******\n\n******\n{b}", "{a} ****** {b} ****** {a}", "{a}\n***\n{b}", "{a}\n******\n{b}\n******",
)  # fmt: skip


def _two_responses(rng: random.Random) -> Case:
    text = pick(rng, TWO_RESPONSES).format(a=_sentence(rng, 4), b=_sentence(rng, 4))
    return "combination:two_responses", {}, text


def _repeat(rng: random.Random) -> Case:
    prompt = "Write a " + pick(rng, WORDS) + " poem about the " + pick(rng, WORDS) + "."
    forms = (prompt, prompt.upper(), "  " + prompt, "Sure!\n" + prompt, prompt[:-1], prompt.replace(" ", "  ", 1))
    text = rng.choice(forms + ("*" + prompt,)) + "\n" + _sentence(rng, 6)
    return "combination:repeat_prompt", {"prompt_to_repeat": prompt}, text


def _end(rng: random.Random) -> Case:
    phrase = rng.choice(("Any other questions?", "Is there anything else I can help with?", "Peace out."))
    tails = (phrase, phrase.lower(), f'"{phrase}"', phrase + " ", phrase + "\n", phrase[:-1], phrase + "!")
    tail = rng.choice(tails + (f"**{phrase}**", phrase + "\nBye"))
    return "startend:end_checker", {"end_phrase": phrase}, _sentence(rng, 6) + "\n" + tail


CAPITAL_WORDS = ("WOW", "I", "DON'T", "U.S.A.", "WELL-KNOWN", "A1", "NASA's", "OK")


def _capital_words(rng: random.Random) -> Case:
    n = rng.randint(1, 12)
    caps = [pick(rng, CAPITAL_WORDS) for _ in range(near(rng, n))]
    text = " ".join(caps + _sentence(rng, 6).lower().split())
    kwargs = {"capital_frequency": n, "capital_relation": _relation(rng)}
    return "change_case:capital_word_frequency", kwargs, text


def _english_case(rng: random.Random) -> Case:
    upper = rng.random() < 0.5
    iid = "change_case:english_capital" if upper else "change_case:english_lowercase"
    base = rng.choice((MULTILINGUAL["en"], MULTILINGUAL["en"], MULTILINGUAL["es"], MULTILINGUAL["de"],
                       _sentence(rng, 10), "12345"))  # fmt: skip
    if rng.random() < 0.2:
        upper = not upper  # the wrong case
    text = base.upper() if upper else base.lower()
    roll = rng.random()
    if roll < 0.25:
        text = "Sure, here it is:\n" + text
    elif roll < 0.4:
        text = text + "\nThanks!"
    return iid, {}, text


def _no_comma(rng: random.Random) -> Case:
    tail = rng.choice(("", ",", "\uff0c", " and so on", "\nHi, there"))
    return "punctuation:no_comma", {}, _sentence(rng, 8).replace(",", "") + tail


QUOTED = ('"{s}"', '  "{s}"  \n', "\u201c{s}\u201d", '"', '""', '"{s}', 'Sure:\n"{s}"', '**"{s}"**')


def _quotation(rng: random.Random) -> Case:
    return "startend:quotation", {}, pick(rng, QUOTED).format(s=_sentence(rng, 5))


GENERATORS: dict[str, Callable[[random.Random], Case]] = {
    "keywords:existence": _keywords,
    "keywords:frequency": _frequency,
    "keywords:forbidden_words": _forbidden,
    "keywords:letter_frequency": _letter,
    "language:response_language": _language,
    "length_constraints:number_sentences": _sentences,
    "length_constraints:number_words": _words,
    "length_constraints:number_paragraphs": _paragraphs_stars,
    "length_constraints:nth_paragraph_first_word": _nth_paragraph,
    "detectable_content:number_placeholders": _placeholders,
    "detectable_content:postscript": _postscript,
    "detectable_format:number_bullet_lists": _bullets,
    "detectable_format:constrained_response": _constrained,
    "detectable_format:number_highlighted_sections": _highlights,
    "detectable_format:multiple_sections": _sections,
    "detectable_format:json_format": _json,
    "detectable_format:title": _title,
    "combination:two_responses": _two_responses,
    "combination:repeat_prompt": _repeat,
    "startend:end_checker": _end,
    "change_case:capital_word_frequency": _capital_words,
    "change_case:english_capital": _english_case,
    "punctuation:no_comma": _no_comma,
    "startend:quotation": _quotation,
}


def loose_noise(rng: random.Random, text: str) -> str:
    """Perturb what loose mode looks at: first/last lines, ``*`` markup, surrounding whitespace."""
    roll = rng.random()
    if roll < 0.15:
        text = pick(rng, INTROS) + "\n" + text
    elif roll < 0.3:
        text = text + "\n" + pick(rng, OUTROS)
    elif roll < 0.4:
        text = pick(rng, INTROS) + "\n" + text + "\n" + pick(rng, OUTROS)
    elif roll < 0.45:
        text = "**" + text + "**"
    elif roll < 0.5:
        text = rng.choice((" ", "\n", "\n\n", "\t")) + text + rng.choice((" ", "\n", ""))
    elif roll < 0.53:
        text = text.replace("\n", "\r\n")
    return text


SPECIAL_RESPONSES = (
    "", " ", "\n\n", "\t \n", "*", "**", "***", "\n*\n", "a", ".", "-", "<<>>", "{}", '"', "P.S.", "\u3000",
)  # fmt: skip


def assemble(
    generators: Mapping[str, Callable[[random.Random], Case]],
    *,
    seed: int,
    per_type: int,
    combos: int,
    special_responses: Sequence[str] = SPECIAL_RESPONSES,
    companions: Mapping[str, Sequence[str]] | None = None,
) -> list[dict[str, Any]]:
    """Rows ``{key, prompt, instruction_id_list, kwargs, response}`` from a benchmark's generators.

    ``per_type`` single-instruction rows per generator (with :func:`loose_noise`), ``combos`` rows
    combining 2-3 instructions on one response, and each generator's instruction on every one of
    ``special_responses``; ``companions`` names ids without kwargs that share a generator (IFEval's
    english_lowercase shares english_capital's) and are added on the special responses too.
    """
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []

    def add(cases: list[Case], response: str) -> None:
        rows.append(
            {
                "key": len(rows),
                "prompt": "boundary case %d" % len(rows),
                "instruction_id_list": [c[0] for c in cases],
                "kwargs": [c[1] for c in cases],
                "response": response,
            }
        )

    names = list(generators)
    for name in names:
        for _ in range(per_type):
            case = generators[name](rng)
            add([case], loose_noise(rng, case[2]))
    for _ in range(combos):
        cases = [generators[pick(rng, names)](rng) for _ in range(rng.randint(2, 3))]
        add(cases, loose_noise(rng, "\n".join(c[2] for c in cases)))
    for special in special_responses:
        for name in names:
            iid, kwargs, _ = generators[name](rng)
            add([(iid, kwargs, "")], special)
            for companion in (companions or {}).get(iid, ()):
                add([(companion, {}, "")], special)
    return rows


def generate(seed: int = 0, per_type: int = 110, combos: int = 400) -> list[dict[str, Any]]:
    """IFEval's boundary rows: ``per_type`` rows for each of the 25 types (english_lowercase shares
    a generator with english_capital), ``combos`` combined rows, and every special response."""
    return assemble(
        GENERATORS, seed=seed, per_type=per_type, combos=combos,
        companions={"change_case:english_capital": ("change_case:english_lowercase",)},
    )  # fmt: skip
