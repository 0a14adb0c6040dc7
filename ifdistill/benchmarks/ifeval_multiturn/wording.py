"""The new constraint of a conversation's third turn: an IFEval instruction's kwargs, drawn, and its wording.

One :class:`Wording` per instruction type the third turn may add. Each draws the instruction's kwargs with
the conversation's own random generator (values in the ranges google's IFEval draws its own from) and says
them in a sentence in the style of IFEval's prompts, so IFEval's checker of that id, built from the same
kwargs, judges the reply. The turn reads ``Please revise your answer. <sentence>``: it asks for a new
version of the previous answer with one more constraint and does not repeat turn 1's, which the revision must
keep following (persistence).

Left out: ``detectable_format:constrained_response`` and the two ``combination`` types (IFEval's conflict
table has them conflict with nearly everything) and ``length_constraints:nth_paragraph_first_word`` (a first
word fitting any topic is a guess). Keywords to include come from a list of common words and words to avoid
from a list of fillers, so a fitting revision exists whatever turn 1 asked about.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any, Callable

TURN = "Please revise your answer. {instruction}"

_END_PHRASES = ("Any other questions?", "Is there anything else I can help with?",
                "Let me know if you have additional questions.")
_COMMON_WORDS = ("example", "important", "future", "simple", "together", "history", "reason", "change",
                 "people", "world", "idea", "result")
_FILLER_WORDS = ("very", "really", "just", "actually", "basically", "however", "also", "thing")
_LANGUAGES = {"de": "German", "fr": "French", "es": "Spanish", "it": "Italian", "pt": "Portuguese"}
_LETTERS = "aeinorst"


@dataclasses.dataclass(frozen=True)
class Wording:
    """An instruction id, how its kwargs are drawn, and the sentence that states them."""

    instruction_id: str
    draw: Callable[[random.Random], dict[str, Any]]
    text: str  # a str.format template over the drawn kwargs (a list kwarg is joined first)

    def make(self, rng: random.Random) -> tuple[dict[str, Any], str]:
        """The drawn kwargs and the third turn's text that states them."""
        kwargs = self.draw(rng)
        shown = {k: ", ".join(v) if isinstance(v, list) else v for k, v in kwargs.items()}
        if "language" in kwargs:
            shown["language"] = _LANGUAGES[kwargs["language"]]
        return kwargs, TURN.format(instruction=self.text.format(**shown))


def _none(rng: random.Random) -> dict[str, Any]:
    return {}


def _relation(rng: random.Random) -> str:
    return rng.choice(("less than", "at least"))


_ALL = (
    Wording("punctuation:no_comma", _none, "In your entire response, refrain from using any commas."),
    Wording("change_case:english_lowercase", _none,
            "Your entire response should be in English, in all lowercase letters. No capital letters are allowed."),
    Wording("change_case:english_capital", _none,
            "Your entire response should be in English, in all capital letters."),
    Wording("detectable_format:title", _none,
            "Your answer must contain a title, wrapped in double angular brackets, such as <<poem of joy>>."),
    Wording("startend:quotation", _none, "Wrap your entire response in double quotation marks."),
    Wording("detectable_format:json_format", _none,
            "Your entire output should be wrapped in JSON format. You can use markdown ticks such as ```."),
    Wording("startend:end_checker", lambda rng: {"end_phrase": rng.choice(_END_PHRASES)},
            "Finish your response with this exact phrase: {end_phrase} No other words should follow it."),
    Wording("detectable_content:postscript", lambda rng: {"postscript_marker": rng.choice(("P.S.", "P.P.S"))},
            "At the end of your response, add a postscript starting with {postscript_marker}"),
    Wording("keywords:existence", lambda rng: {"keywords": sorted(rng.sample(_COMMON_WORDS, 2))},
            "Include the keywords {keywords} in your response."),
    Wording("keywords:forbidden_words", lambda rng: {"forbidden_words": sorted(rng.sample(_FILLER_WORDS, 2))},
            "Do not include the words {forbidden_words} in your response."),
    Wording("keywords:frequency",
            lambda rng: {"keyword": rng.choice(_COMMON_WORDS), "frequency": rng.randint(2, 3), "relation": "at least"},
            "In your response, the word {keyword} should appear {relation} {frequency} times."),
    Wording("keywords:letter_frequency",
            lambda rng: {"letter": rng.choice(_LETTERS), "let_frequency": rng.randint(2, 10),
                         "let_relation": _relation(rng)},
            "In your response, the letter {letter} should appear {let_relation} {let_frequency} times."),
    Wording("language:response_language", lambda rng: {"language": rng.choice(sorted(_LANGUAGES))},
            "Your ENTIRE response should be in {language}; no other language is allowed."),
    Wording("length_constraints:number_words",
            lambda rng: {"num_words": rng.randrange(50, 301, 10), "relation": _relation(rng)},
            "Answer with {relation} {num_words} words."),
    Wording("length_constraints:number_sentences",
            lambda rng: {"num_sentences": rng.randint(2, 10), "relation": _relation(rng)},
            "Your response should contain {relation} {num_sentences} sentences."),
    Wording("length_constraints:number_paragraphs", lambda rng: {"num_paragraphs": rng.randint(2, 5)},
            "There should be {num_paragraphs} paragraphs. Paragraphs are separated from each other by the "
            "markdown divider: ***"),
    Wording("detectable_format:number_bullet_lists", lambda rng: {"num_bullets": rng.randint(2, 5)},
            "Your answer must contain exactly {num_bullets} bullet points. Use markdown bullet points such as:\n"
            "* This is point 1.\n* This is point 2"),
    Wording("detectable_format:number_highlighted_sections", lambda rng: {"num_highlights": rng.randint(1, 4)},
            "Highlight at least {num_highlights} sections in your answer with markdown, i.e. *highlighted section*."),
    Wording("detectable_format:multiple_sections",
            lambda rng: {"section_spliter": rng.choice(("Section", "SECTION")), "num_sections": rng.randint(2, 4)},
            "Your response must have {num_sections} sections. Mark the beginning of each section with "
            "{section_spliter} X, such as:\n{section_spliter} 1\n[content of section 1]\n{section_spliter} 2\n"
            "[content of section 2]"),
    Wording("detectable_content:number_placeholders", lambda rng: {"num_placeholders": rng.randint(1, 4)},
            "The response must contain at least {num_placeholders} placeholders represented by square brackets, "
            "such as [address]."),
    Wording("change_case:capital_word_frequency",
            lambda rng: {"capital_frequency": rng.randint(2, 10), "capital_relation": _relation(rng)},
            "In your response, words with all capital letters should appear {capital_relation} "
            "{capital_frequency} times."),
)

#: Instruction id -> its wording: the types a third turn may add.
WORDINGS: dict[str, Wording] = {w.instruction_id: w for w in _ALL}
