"""The embedded default data: deterministic verifiable-instruction prompts with compliant answers.

Why synthetic data: tests, CI and the CPU demo cannot download ``argilla/ifeval-like-data``, and a
tiny random-init model cannot learn real IFEval prompts in minutes. This generator writes prompts in
the IFEval schema (``key``, ``prompt``, ``instruction_id_list``, ``kwargs``) over instruction types
a tiny model can learn -- lowercase, bullet counts, P.S., end phrase, title, no commas, JSON wrapping,
quotation, sections, paragraphs, highlights, placeholders, word counts, keywords, repeat-the-prompt,
two responses, yes/no/maybe -- with a response that follows *every* instruction (the test suite
checks each one with ifdistill's IFEval scorer in strict mode).

Splits: ``train`` (2,400 rows with ``response``), ``eval`` (120 prompts, IFEval schema without
responses, on topics that never occur in train, so the prompts are disjoint by construction), and
``chat`` (3,000 generic question/answer conversations in the ``messages`` layout, the replay source).

How a row is built: pick one *structure* (plain, bullets, sections, paragraphs, JSON, two responses,
yes/no/maybe) and up to three *modifiers* that do not conflict with it or with each other (the
``_CONFLICTS`` table), write the body, then apply the modifiers in a fixed order (repeat the request,
title, P.S., end phrase, remove commas, lowercase, quotes). Instructions whose arguments depend on the
final text (word counts, keywords, forbidden words) are decided last from that text.

Determinism: one ``random.Random`` per split seeded with a string (stable across Python versions and
platforms). :func:`synthetic_paths` writes the splits to ``cache_dir()/synthetic/<hash>`` where the
hash covers :data:`GENERATOR_VERSION` and the sizes; bump the version whenever any output changes.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ifdistill.data import synthetic_text as T
from ifdistill.paths import cache_dir

GENERATOR_VERSION = "1"
SIZES = {"train": 2400, "eval": 120, "chat": 3000}
TRAIN_KEY_BASE, EVAL_KEY_BASE = 100000, 900000

STRUCTURES = ("plain", "bullets", "sections", "paragraphs", "json", "two_responses", "constrained")
MODIFIERS = ("lowercase", "no_comma", "title", "postscript", "end_phrase", "quotation", "highlights",
             "placeholders", "number_words", "keywords", "forbidden", "repeat_prompt")
IDS = {
    "bullets": "detectable_format:number_bullet_lists", "sections": "detectable_format:multiple_sections",
    "paragraphs": "length_constraints:number_paragraphs", "json": "detectable_format:json_format",
    "two_responses": "combination:two_responses", "constrained": "detectable_format:constrained_response",
    "lowercase": "change_case:english_lowercase", "no_comma": "punctuation:no_comma",
    "title": "detectable_format:title", "postscript": "detectable_content:postscript",
    "end_phrase": "startend:end_checker", "quotation": "startend:quotation",
    "highlights": "detectable_format:number_highlighted_sections",
    "placeholders": "detectable_content:number_placeholders", "number_words": "length_constraints:number_words",
    "keywords": "keywords:existence", "forbidden": "keywords:forbidden_words",
    "repeat_prompt": "combination:repeat_prompt",
}
_FORMATTING = {"title", "postscript", "end_phrase", "quotation", "highlights", "placeholders", "no_comma",
               "repeat_prompt"}
_CONFLICTS = {
    "json": _FORMATTING,
    "two_responses": {"title", "postscript", "end_phrase", "quotation", "placeholders", "repeat_prompt"},
    "constrained": {"lowercase"},  # the answer phrases are case-sensitive
    "sections": {"lowercase"},  # so is the section word
    # the repeated request would add commas, quotes, *** dividers or words the counts did not see
    "repeat_prompt": {"quotation", "no_comma", "number_words", "keywords", "forbidden", "title", "paragraphs"},
}
for _a, _bs in list(_CONFLICTS.items()):  # make the table symmetric
    for _b in _bs:
        _CONFLICTS.setdefault(_b, set()).add(_a)

# Instruction descriptions, IFEval's wording (a few variants each).
DESCRIPTIONS = {
    "bullets": ("Your answer must contain exactly {n} bullet points. Use the markdown bullet points such as: "
                "* This is point 1.", "Include exactly {n} bullet points in your response, in markdown: * item."),
    "sections": ("Your response must have {n} sections. Mark the beginning of each section with {s} X, "
                 "such as: {s} 1",),
    "paragraphs": ("There should be {n} paragraphs. Paragraphs are separated with the markdown divider: ***",),
    "json": ("Entire output should be wrapped in JSON format. You can use markdown ticks such as ```.",),
    "two_responses": ("Give two different responses. Responses and only responses should be separated by "
                      "6 asterisk symbols: ******.",),
    "constrained": ("Answer with one of the following options: ('My answer is yes.', 'My answer is no.', "
                    "'My answer is maybe.')",),
    "lowercase": ("Your entire response should be in English, and in all lowercase letters. No capital "
                  "letters are allowed.", "Please reply in English using only lowercase letters."),
    "no_comma": ("In your entire response, refrain from the use of any commas.", "Do not use any commas."),
    "title": ("Your answer must contain a title, wrapped in double angular brackets, such as <<poem of joy>>.",),
    "postscript": ("At the end of your response, please explicitly add a postscript starting with {m}",),
    "end_phrase": ("Finish your response with this exact phrase {e} No other words should follow this phrase.",),
    "quotation": ("Wrap your entire response with double quotation marks.",),
    "highlights": ("Highlight at least {n} sections in your answer with markdown, i.e. *highlighted section*.",),
    "placeholders": ("The response must contain at least {n} placeholders represented by square brackets, "
                     "such as [address].",),
    "number_words": ("Answer with {r} {n} words.",),
    "keywords": ("Include keywords {k} in the response.",),
    "forbidden": ("Do not include keywords {k} in the response.",),
    "repeat_prompt": ("First repeat the request word for word without change, then give your answer (1. do not "
                      "say any words or characters before repeating the request; 2. the request you need to "
                      "repeat does not include this sentence)",),
}


def _choose_instructions(rng: random.Random) -> tuple[str, list[str]]:
    structure = rng.choice(STRUCTURES)
    blocked = set(_CONFLICTS.get(structure, ()))
    n_mod = rng.choice((0, 1, 1, 2, 2, 3)) if structure != "plain" else rng.choice((1, 1, 2, 2, 3))
    mods: list[str] = []
    for m in rng.sample(MODIFIERS, len(MODIFIERS)):
        if len(mods) == n_mod:
            break
        if m in blocked:
            continue
        mods.append(m)
        blocked |= _CONFLICTS.get(m, set())
    return structure, mods


def _sentences(rng: random.Random, topic: str, points: list[str], highlights: int) -> list[str]:
    out = []
    for i, p in enumerate(points):
        p = f"*{p}*" if i < highlights else p
        out.append(rng.choice(T.FRAMES).format(p=p))
    return [T.cap(s) for s in out]


def _body(rng, structure: str, topic: str, points: list[str], args: dict[str, Any], mods: list[str]) -> Any:
    hl = args.get("highlights", 0)
    fill = dict(topic=topic, Topic=T.cap(topic))
    intro = rng.choice(T.INTROS).format(**fill)
    if "placeholders" in mods:
        intro += " " + T.PLACEHOLDER_LINES[args["placeholders"] - 1]
    outro = rng.choice(T.OUTROS).format(**fill)
    if structure == "plain":
        return " ".join([intro, *_sentences(rng, topic, points[:3], hl), outro])
    if structure == "bullets":
        n = args["bullets"]
        lines = [f"* {s}" for s in _sentences(rng, topic, points[:n], hl)]
        return intro + "\n\n" + "\n".join(lines) + "\n\n" + outro
    if structure == "sections":
        word, n = args["sections"]
        sent = _sentences(rng, topic, points[:n], hl)
        return intro + "\n\n" + "\n\n".join(f"{word} {i + 1}\n{s}" for i, s in enumerate(sent))
    if structure == "paragraphs":
        n = args["paragraphs"]
        sent = _sentences(rng, topic, points[:n], hl)
        sent[0] = intro + " " + sent[0]
        return "\n\n***\n\n".join(sent)
    if structure == "two_responses":
        a = " ".join(_sentences(rng, topic, points[:2], hl))
        b = " ".join(_sentences(rng, topic, points[2:4], max(0, hl - 2)))
        return f"{a}\n******\n{b}"
    if structure == "constrained":
        head = args["answer"] + (" " + T.PLACEHOLDER_LINES[args["placeholders"] - 1] if "placeholders" in mods else "")
        return " ".join([head, *_sentences(rng, topic, points[:3], hl)])
    assert structure == "json"
    return {"topic": topic, "points": [T.cap(p) + "." for p in points[:3]], "summary": outro}


def make_row(rng: random.Random, topic: str, points: tuple[str, ...], key: int) -> dict[str, Any]:
    """One IFEval-schema row whose ``response`` follows every listed instruction."""
    structure, mods = _choose_instructions(rng)
    audience = rng.choice(T.AUDIENCES)
    pts = rng.sample(points, len(points))
    args: dict[str, Any] = {}
    kw: dict[str, dict[str, Any]] = {}
    if structure == "bullets":
        args["bullets"] = rng.randrange(2, 6)
        kw["bullets"] = {"num_bullets": args["bullets"]}
    elif structure == "sections":
        args["sections"] = (rng.choice(("Section", "SECTION", "Part")), rng.randrange(2, 5))
        kw["sections"] = {"section_spliter": args["sections"][0], "num_sections": args["sections"][1]}
    elif structure == "paragraphs":
        args["paragraphs"] = rng.randrange(2, 5)
        kw["paragraphs"] = {"num_paragraphs": args["paragraphs"]}
    elif structure == "constrained":
        args["answer"] = rng.choice(T.ANSWERS)
    if "highlights" in mods:
        args["highlights"] = rng.randrange(1, 3)
        kw["highlights"] = {"num_highlights": args["highlights"]}
    if "placeholders" in mods:
        args["placeholders"] = rng.randrange(1, 4)
        kw["placeholders"] = {"num_placeholders": args["placeholders"]}
    ask = rng.choice(T.QUESTIONS if structure == "constrained" else T.TASKS)
    request = ask.format(topic=topic, audience=audience)

    body = _body(rng, structure, topic, pts, args, mods)
    if structure == "json":
        if "lowercase" in mods:
            body = json.loads(json.dumps(body).lower())
        text = "```json\n" + json.dumps(body, indent=2) + "\n```"
    else:
        text = body
    if "postscript" in mods:
        kw["postscript"] = {"postscript_marker": rng.choice(("P.S.", "P.P.S"))}
    if "end_phrase" in mods:
        kw["end_phrase"] = {"end_phrase": rng.choice(T.END_PHRASES)}

    # The prompt's descriptions (those that depend on the final text are added further down).
    descs = []
    for name in [structure, *mods] if structure != "plain" else mods:
        if name in ("number_words", "keywords", "forbidden", "repeat_prompt"):
            continue
        a = kw.get(name, {})
        descs.append(rng.choice(DESCRIPTIONS[name]).format(
            n=a.get("num_sections", next(iter(a.values()), "")), s=a.get("section_spliter", ""),
            m=a.get("postscript_marker", ""), e=a.get("end_phrase", "")))
    if "repeat_prompt" in mods:
        kw["repeat_prompt"] = {"prompt_to_repeat": " ".join([request] + descs)}

    # The response: modifiers in a fixed order, so that each one sees what the previous ones wrote.
    if "title" in mods:
        text = "<<" + rng.choice(T.TITLES).format(Topic=T.title_case(topic)) + ">>\n\n" + text
    if "postscript" in mods:
        text += f"\n\n{kw['postscript']['postscript_marker']} {rng.choice(T.PS_LINES)}"
    if "end_phrase" in mods:
        text += "\n\n" + kw["end_phrase"]["end_phrase"]
    if "repeat_prompt" in mods:
        text = kw["repeat_prompt"]["prompt_to_repeat"] + "\n\n" + text
    if "no_comma" in mods:
        text = text.replace(", ", " ").replace(",", "")
    if "lowercase" in mods:
        text = text.lower()
    if "quotation" in mods:
        text = f'"{text}"'

    words = len(re.findall(r"\w+", text))
    if "number_words" in mods:
        relation = rng.choice(("at least", "less than"))
        n = max(5, words // 10 * 10) if relation == "at least" else (words // 10 + 2) * 10
        if relation == "at least" and n > words:
            relation, n = "less than", (words // 10 + 2) * 10
        kw["number_words"] = {"relation": relation, "num_words": n}
        descs.append(DESCRIPTIONS["number_words"][0].format(r=relation, n=n))
    if "keywords" in mods:
        vocab = sorted({w.lower() for w in re.findall(r"[A-Za-z]{5,}", body if isinstance(body, str) else text)})
        ks = rng.sample(vocab, min(2, len(vocab)))
        kw["keywords"] = {"keywords": ks}
        descs.append(DESCRIPTIONS["keywords"][0].format(k=", ".join(ks)))
    if "forbidden" in mods:
        absent = [w for w in T.FORBIDDEN_POOL if not re.search(r"\b" + w + r"\b", text, re.IGNORECASE)]
        ks = rng.sample(absent, 2)
        kw["forbidden"] = {"forbidden_words": ks}
        descs.append(DESCRIPTIONS["forbidden"][0].format(k=", ".join(ks)))

    head = [request] + rng.sample(descs, len(descs))
    prompt = " ".join(head)
    if "repeat_prompt" in mods:  # the request to repeat comes after the instruction, as in IFEval
        prompt = DESCRIPTIONS["repeat_prompt"][0] + "\n\n" + kw["repeat_prompt"]["prompt_to_repeat"]
    names = [n for n in [structure, *mods] if n != "plain"]
    return {"key": key, "prompt": prompt, "instruction_id_list": [IDS[n] for n in names],
            "kwargs": [kw.get(n, {}) for n in names], "response": text}


def generate(split: str, n: int | None = None, *, with_responses: bool | None = None) -> list[dict[str, Any]]:
    """The rows of one split (``train``, ``eval`` or ``chat``), deterministic for a given version.

    ``eval`` rows are written without ``response`` (the IFEval input schema) unless
    ``with_responses=True`` (the tests score those reference answers too).
    """
    if split not in SIZES:
        raise ValueError(f"unknown synthetic split {split!r}; expected one of {tuple(SIZES)}")
    n = SIZES[split] if n is None else n
    rng = random.Random(f"ifdistill-synthetic-v{GENERATOR_VERSION}-{split}")
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    if split == "chat":
        while len(rows) < n:
            q, a = T.chat_example(rng)
            if q in seen:
                continue
            seen.add(q)
            messages = [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
            if rng.random() < 0.3:
                messages.insert(0, {"role": "system", "content": "You are a helpful assistant."})
            rows.append({"id": f"chat-{len(rows):05d}", "messages": messages})
        return rows
    topics = T.TRAIN_TOPICS if split == "train" else T.EVAL_TOPICS
    base = TRAIN_KEY_BASE if split == "train" else EVAL_KEY_BASE
    while len(rows) < n:
        topic, points = rng.choice(topics)
        row = make_row(rng, topic, points, key=base + len(rows))
        if row["prompt"] in seen:
            continue
        seen.add(row["prompt"])
        if not (with_responses if with_responses is not None else split == "train"):
            row.pop("response")
        rows.append(row)
    return rows


def _fingerprint() -> str:
    blob = json.dumps({"version": GENERATOR_VERSION, "sizes": SIZES}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def synthetic_paths(root: Path | None = None) -> dict[str, Path]:
    """Write the splits as JSONL (once) and return ``{"train": ..., "eval": ..., "chat": ...}``.

    The directory name is a hash of the generator version and sizes; it is filled in a temporary
    sibling directory and renamed into place, so a concurrent or interrupted writer never leaves a
    half-written split behind (the loser of a race simply discards its copy).
    """
    root = Path(root) if root is not None else cache_dir() / "synthetic"
    final = root / f"v{GENERATOR_VERSION}-{_fingerprint()}"
    paths = {split: final / f"{split}.jsonl" for split in SIZES}
    if all(p.is_file() for p in paths.values()):
        return paths
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    try:
        sums = {}
        for split in SIZES:
            data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in generate(split)).encode()
            (tmp / f"{split}.jsonl").write_bytes(data)
            sums[split] = hashlib.sha256(data).hexdigest()
        meta = {"generator_version": GENERATOR_VERSION, "sizes": SIZES, "sha256": sums}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        try:
            os.rename(tmp, final)
        except OSError:  # another process got there first (or a stale incomplete dir exists)
            if not all(p.is_file() for p in paths.values()):
                shutil.rmtree(final, ignore_errors=True)
                os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return paths
