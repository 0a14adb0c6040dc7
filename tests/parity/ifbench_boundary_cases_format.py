"""Boundary-case generators for IFBench's ``format:*``, ``custom:*`` and ``repeat:*`` constraints.

See :mod:`tests.parity.ifbench_boundary_cases` for how rows are assembled. The custom tasks have one
right answer each, so their generators start from a correct answer and damage it (swap, drop or
duplicate an item, change a header, add an empty field) with some probability.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from ifdistill.benchmarks.ifbench.instructions_custom import EUROPEAN_CAPITALS, REPEAT_SIMPLE
from tests.parity.ifeval_boundary_cases import WORDS, Case, near, pick, sentence, words


def _maybe(rng: random.Random, p: float = 0.35) -> bool:
    return rng.random() < p


def _damage(rng: random.Random, items: list[str]) -> list[str]:
    """A copy with one item swapped, dropped or duplicated (or unchanged)."""
    items = list(items)
    roll = rng.random()
    if roll < 0.15 and len(items) > 1:
        i = rng.randrange(len(items) - 1)
        items[i], items[i + 1] = items[i + 1], items[i]
    elif roll < 0.3 and items:
        items.pop(rng.randrange(len(items)))
    elif roll < 0.4 and items:
        items.insert(rng.randrange(len(items)), pick(rng, items))
    return items


def _parentheses(rng):
    depth = rng.randint(3, 6)
    opening = "".join(rng.choice("([{") for _ in range(depth))
    closing = "".join({"(": ")", "[": "]", "{": "}"}[c] for c in reversed(opening))
    if _maybe(rng, 0.25):
        closing = closing.replace(")", "]", 1)
    return "format:parentheses", {}, f"x {opening}core{closing} y" + rng.choice(("", ")", "(("))


def _quotes(rng):
    depth = rng.randint(2, 4)
    marks = [('"', "'")[(i + rng.randint(0, 1)) % 2] for i in range(depth)]
    text = "core"
    for mark in reversed(marks):
        text = f"{mark}a {text} b{mark}"
    return "format:quotes", {}, rng.choice(("He said ", "don't ", "")) + text


OPTION_BANK = ("yes/no/maybe", "I know or I don't know", "a), b), c), d)")
OPTION_ANSWERS = ("yes", "Yes.", "no!", "maybe", "I know", "I don't know", "i know.", "a)", "b)", "A", "c", "d) because", "no, maybe")


def _options(rng):
    return "format:options", {"options": pick(rng, OPTION_BANK)}, pick(rng, OPTION_ANSWERS)


def _newline(rng):
    items = words(rng, rng.randint(1, 5), WORDS + ["--", "well-known", "a b"])
    sep = rng.choice(("\n", "\n", "\n\n", " ", "\n \n"))
    return "format:newline", {}, sep.join(items)


EMOJI = ("\U0001f600", "\u2764\ufe0f", "\U0001f44d\U0001f3fd", "\u263a", ":)", "\U0001f1fa\U0001f1f8")


def _emoji(rng):
    out = []
    for _ in range(rng.randint(1, 3)):
        s = sentence(rng, 3, rng.choice((".", "!", "")))
        out.append(s + " " + pick(rng, EMOJI) if _maybe(rng, 0.8) else s)
    return "format:emoji", {}, rng.choice((" ", " ", "\n")).join(out)


def _line_indent(rng):
    lines = []
    for i in range(rng.randint(1, 5)):
        indent = i + rng.choice((0, 0, 0, 1, -1))
        lines.append(" " * max(0, indent) + pick(rng, WORDS))
        if _maybe(rng, 0.2):
            lines.append(rng.choice(("", "  ", "\t")))
    return "format:line_indent", {}, "\n".join(lines)


QUOTE_PIECES = ('"wise words" means this', '"a" "b"', "\u201cgood\u201d is fine", 'end "quote"', "'\"'", "123.", '"q" 42.')


def _quote_unquote(rng):
    return "format:quote_unquote", {}, " ".join(pick(rng, QUOTE_PIECES) for _ in range(rng.randint(1, 3)))


def _list(rng):
    sep = pick(rng, ("...", "SEPARATOR", "!?!?", "-"))
    items = [sep + " " + pick(rng, WORDS) for _ in range(near(rng, 2))]
    return "format:list", {"sep": sep}, "\n".join(items) or "nothing"


def _thesis(rng):
    opening, closing = pick(rng, (("<i>", "</i>"), ("<em>", "</em>"), ("<i>", "</em>"), ("<b>", "</b>")))
    body = rng.choice(("Thesis here", " ", ""))
    return "format:thesis", {}, f"{opening}{body}{closing}" + rng.choice((" and more text.", "", "\n ")) 


def _sub_bullets(rng):
    lines = []
    for _ in range(rng.randint(1, 3)):
        lines.append("* " + pick(rng, WORDS))
        lines += ["  - " + pick(rng, WORDS)] * rng.choice((0, 1, 1, 2))
    return "format:sub-bullets", {}, "\n".join(lines)


def _no_bullets_bullets(rng):
    lines = [sentence(rng, 4) + " " + sentence(rng, 3)] if _maybe(rng, 0.7) else [sentence(rng, 4)]
    if _maybe(rng, 0.2):
        lines.append("")
    lines += ["* " + pick(rng, WORDS) for _ in range(rng.randint(1, 3))]
    if _maybe(rng, 0.15):
        lines.append("Trailing text.")
    return "format:no_bullets_bullets", {}, "\n".join(lines)


TITLE_WORDS = ("The", "Quick", "fox", "Of", "a", "USA", "iPhone", "McDonald's", "jUMP", "Hello-World", "42")


def _title_case(rng):
    return "format:title_case", {}, " ".join(words(rng, rng.randint(1, 6), TITLE_WORDS))


def _output_template(rng):
    parts = [p for p in ("My Answer: yes", "My Conclusion: no", "Future Outlook: fine") if _maybe(rng, 0.85)]
    text = " ".join(parts) or "nothing"
    return "format:output_template", {}, text.replace("My Answer:", "my answer:") if _maybe(rng, 0.1) else text


def _no_whitespace(rng):
    return "format:no_whitespace", {}, "".join(words(rng, 3)) + rng.choice(("", "", " x", "\u3000x", "\tx", "\u200bx"))


def _multiples(rng):
    numbers = _damage(rng, [str(i) for i in range(14, 51, 7)])
    return "custom:multiples", {}, rng.choice((", ", ",", " ", "\n")).join(numbers)


def _mcq(rng):
    questions = []
    for i in range(1, near(rng, 4) + 1):
        options = "\n".join(f"{chr(65 + k)}. option {k}" for k in range(near(rng, 5) if _maybe(rng, 0.2) else 5))
        questions.append(f"Question {i}: " + "What " + "very " * (i + rng.choice((0, 0, -2))) + "long?\n" + options)
    prefix = rng.choice(("", "", "", "Here are the questions:\n"))
    return "custom:mcq_count_length", {}, prefix + "\n\n".join(questions)


COUNTRIES = [f"Country{chr(65 + i // 26)}{chr(65 + i % 26)}" for i in range(60)] + ["S\u00e3o Tom\u00e9", "Chad"]


def _reverse_newline(rng):
    lines = sorted(rng.sample(COUNTRIES, near(rng, 53)), reverse=True)
    lines = ["Zimbabwe"] + _damage(rng, lines)
    prefix = rng.choice(("", "", "- ", "* "))
    return "custom:reverse_newline", {}, "\n".join(prefix + line for line in lines)


def _word_reverse(rng):
    text = rng.choice(("eagle bald the is animal The.", "Eagle bald the.", "the bald eagle", "eagle bald, the is it! Yes."))
    return "custom:word_reverse", {}, text


def _character_reverse(rng):
    return "custom:character_reverse", {}, rng.choice(("elgae dlab eht", "ELGAE DLAB", "elgae  dlab", "bald eagle"))


def _sentence_alphabet(rng):
    letters = _damage(rng, [chr(97 + i) for i in range(26)])
    return "custom:sentence_alphabet", {}, " ".join(f"{c.upper()}{pick(rng, WORDS)} went home." for c in letters)


def _capitals(rng):
    names = _damage(rng, list(EUROPEAN_CAPITALS))
    if _maybe(rng, 0.15):
        names[0] = "Reykjav\u00edk"
    return "custom:european_capitals_sort", {}, rng.choice((", ", ",", " , ")).join(names)


def _csv_city(rng):
    header = rng.choice(("ID,Country,City,Year,Count", "ID, Country,City,Year,Count", '"ID",Country,City,Year,Count'))
    cities = ("Paris", '"Lyon, Centre"', "Nice")
    rows = [f"{i},France,{pick(rng, cities)},2020,{i * 3}" for i in range(near(rng, 7))]
    if _maybe(rng, 0.1):
        rows.append('8,"Unclosed,2020,1')
    return "custom:csv_city", {}, "\n".join([header] + rows)


def _csv_special(rng):
    header = rng.choice(("ProductID,Category,Brand,Price,Stock", '"ProductID", Category,Brand,Price,Stock', "ProductID;Category"))
    rows = [f"{i},Tools,Acme,9.99,{i}" for i in range(14 if _maybe(rng, 0.6) else near(rng, 14))]
    if rows and _maybe(rng, 0.8):
        rows[rng.randrange(len(rows))] = rng.choice(('1,"Tools & More",Acme,9.99,3', '1,"Tools",Acme,9.99,3', '1,Tools!,Acme,9.99,3'))
    return "custom:csv_special_character", {}, "\n".join([header] + rows)


def _csv_quotes(rng):
    header = "\t".join(f'"{h}"' for h in ("StudentID", "Subject", "Grade", "Semester", "Score"))
    if _maybe(rng, 0.15):
        header = header.replace('"Subject"', "Subject")
    rows = ["\t".join(f'"{v}"' for v in (i, "Math", "A", "Fall", 90)) for i in range(near(rng, 3))]
    if rows and _maybe(rng, 0.3):
        rows[-1] = rng.choice(('"1"\t"Math"\t\t"Fall"\t"90"', '"1"\tMath\t"A"\t"Fall"\t"90"', '"1"\t"Math"\t"A"\t"Fall"'))
    return "custom:csv_quotes", {}, "\n".join([header] + rows)


DATES = ("1796-04-12", "1805-12-02", "1815-06-18", "1768-01-01", "1822-01-01", "1800-02-30", "1800-13-01", "1800-04-31", "1800-1-1")


def _dates(rng):
    dates = [pick(rng, DATES) for _ in range(rng.randint(1, 4))]
    return "custom:date_format_list", {}, rng.choice((", ", ",", " ,")).join(dates)


def _prompt(rng) -> str:
    return f"Write a short poem about the {pick(rng, WORDS)} and the {pick(rng, WORDS)} today"


def _repeat_change(rng):
    prompt = _prompt(rng)
    first, rest = prompt.split(" ", 1)
    text = rng.choice((f"Compose {rest}", prompt, f"Compose  {rest}", f"Compose {rest}.", f"{first} {rest} extra"))
    return "repeat:repeat_change", {"prompt_to_repeat": prompt}, text


def _repeat_simple(rng):
    text = rng.choice((REPEAT_SIMPLE, REPEAT_SIMPLE.upper(), "  " + REPEAT_SIMPLE + "\n", REPEAT_SIMPLE[:-1], "Sure: " + REPEAT_SIMPLE))
    return "repeat:repeat_simple", {}, text


def _repeat_span(rng):
    prompt = _prompt(rng)
    start = rng.randint(1, 4)
    end = start + rng.randint(1, 5)
    span = prompt.split()[start + rng.choice((0, 0, 0, 1)) : end + rng.choice((0, 0, 0, -1, 1))]
    text = " ".join(w.upper() if _maybe(rng, 0.2) else w for w in span) or "none"
    return "repeat:repeat_span", {"prompt_to_repeat": prompt, "n_start": start, "n_end": end}, text


GENERATORS: dict[str, Callable[[random.Random], Case]] = {
    "format:parentheses": _parentheses, "format:quotes": _quotes, "format:options": _options,
    "format:newline": _newline, "format:emoji": _emoji, "format:line_indent": _line_indent,
    "format:quote_unquote": _quote_unquote, "format:list": _list, "format:thesis": _thesis,
    "format:sub-bullets": _sub_bullets, "format:no_bullets_bullets": _no_bullets_bullets,
    "format:title_case": _title_case, "format:output_template": _output_template,
    "format:no_whitespace": _no_whitespace, "custom:multiples": _multiples, "custom:mcq_count_length": _mcq,
    "custom:reverse_newline": _reverse_newline, "custom:word_reverse": _word_reverse,
    "custom:character_reverse": _character_reverse, "custom:sentence_alphabet": _sentence_alphabet,
    "custom:european_capitals_sort": _capitals, "custom:csv_city": _csv_city,
    "custom:csv_special_character": _csv_special, "custom:csv_quotes": _csv_quotes,
    "custom:date_format_list": _dates, "repeat:repeat_change": _repeat_change,
    "repeat:repeat_simple": _repeat_simple, "repeat:repeat_span": _repeat_span,
}  # fmt: skip
