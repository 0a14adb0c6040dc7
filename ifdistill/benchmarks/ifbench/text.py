"""Text measurements shared by the IFBench checkers: offline, deterministic and memoised.

* :func:`split_into_sentences` is IFBench's own regular-expression sentence splitter (not punkt),
  reproduced step by step; the checkers that count, compare or index sentences use it.
* Word counts and ``nltk.word_tokenize`` come from :mod:`ifdistill.benchmarks.instruction_following.text_analysis` (one home
  for nltk; punkt_tab is found locally and nltk never downloads).
* :data:`STOPWORDS` is NLTK's English stopword list (198 entries), kept here so that scoring needs no
  corpus on disk; a test checks it against ``shared/data/ifbench/nltk_data``. ``ratio:stop_words``
  looks up ``\\w+`` tokens, which never hold an apostrophe, so the 19 contractions never match.
* ``emoji`` and ``syllapy`` (pure Python, pinned) are imported at first use, so importing the
  scorer stays light.
* ``words:start_verb`` needs NLTK's ``averaged_perceptron_tagger_eng``, which cannot be fetched on
  the machines ifdistill is tested on. :func:`starts_with_verb` uses that tagger exactly as the
  reference does when nltk finds it locally (``NLTK_DATA``), and otherwise a documented lexicon
  rule (:mod:`ifdistill.benchmarks.ifbench.verbs`); :func:`start_verb_route` says which, and it enters the
  scorer version so that scores from the two routes never share an ``eval_config_hash``.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from ifdistill.benchmarks.instruction_following import text_analysis

_CACHE_SIZE = 4096

STOPWORDS = frozenset(
    """a about above after again against ain all am an and any are aren aren't as at be because been
    before being below between both but by can couldn couldn't d did didn didn't do does doesn doesn't
    doing don don't down during each few for from further had hadn hadn't has hasn hasn't have haven
    haven't having he he'd he'll her here hers herself he's him himself his how i i'd if i'll i'm in
    into is isn isn't it it'd it'll it's its itself i've just ll m ma me mightn mightn't more most
    mustn mustn't my myself needn needn't no nor not now o of off on once only or other our ours
    ourselves out over own re s same shan shan't she she'd she'll she's should shouldn shouldn't
    should've so some such t than that that'll the their theirs them themselves then there these
    they they'd they'll they're they've this those through to too under until up ve very was wasn
    wasn't we we'd we'll we're were weren weren't we've what when where which while who whom why
    will with won won't wouldn wouldn't y you you'd you'll your you're yours yourself yourselves
    you've""".split()
)

# IFBench's sentence splitter, step by step (instructions_util.split_into_sentences).
_ALPHABETS = "([A-Za-z])"
_STARTERS = (
    r"(Mr|Mrs|Ms|Dr|Prof|Capt|Cpt|Lt|He\s|She\s|It\s|They\s|Their\s|Our\s|We\s|But\s|However\s"
    r"|That\s|This\s|Wherever)"
)
_SUFFIXES = "(Inc|Ltd|Jr|Sr|Co)"
_PREFIXES_RE = re.compile("(Mr|St|Mrs|Ms|Dr)[.]")
_WEBSITES_RE = re.compile("[.](com|net|org|io|gov|edu|me)")
_DIGITS_RE = re.compile("([0-9])[.]([0-9])")
_MULTIPLE_DOTS_RE = re.compile(r"\.{2,}")
_SINGLE_LETTER_RE = re.compile(r"\s" + _ALPHABETS + "[.] ")
_ACRONYM_STARTER_RE = re.compile("([A-Z][.][A-Z][.](?:[A-Z][.])?)" + " " + _STARTERS)
_THREE_LETTERS_RE = re.compile(_ALPHABETS + "[.]" + _ALPHABETS + "[.]" + _ALPHABETS + "[.]")
_TWO_LETTERS_RE = re.compile(_ALPHABETS + "[.]" + _ALPHABETS + "[.]")
_SUFFIX_STARTER_RE = re.compile(" " + _SUFFIXES + "[.] " + _STARTERS)
_SUFFIX_RE = re.compile(" " + _SUFFIXES + "[.]")
_LETTER_DOT_RE = re.compile(" " + _ALPHABETS + "[.]")


@functools.lru_cache(maxsize=_CACHE_SIZE)
def split_into_sentences(text: str) -> tuple[str, ...]:
    """IFBench's sentences of ``text``: protect abbreviations, split after ``.?!``, strip pieces,
    drop a blank last piece. Literal ``<prd>``/``<stop>`` in the text act as markers, as there."""
    text = " " + text + "  "
    text = text.replace("\n", " ")
    if "." in text:  # every step up to the quote swaps needs a "." (none adds one)
        text = _protect_dots(text)
    if '"' in text:
        text = text.replace('."', '".')
    if "!" in text:
        text = text.replace('!"', '"!')
    if "?" in text:
        text = text.replace('?"', '"?')
    text = text.replace(".", ".<stop>").replace("?", "?<stop>").replace("!", "!<stop>")
    text = text.replace("<prd>", ".")
    pieces = [s.strip() for s in text.split("<stop>")]
    if pieces and not pieces[-1]:
        pieces = pieces[:-1]
    return tuple(pieces)


def _protect_dots(text: str) -> str:
    """The splitter's steps that turn the dots of abbreviations, numbers and ellipses into
    ``<prd>`` (and end a sentence before some starters), in the reference's order. A step is
    skipped where a substring its pattern needs is absent (it would change nothing); replacements
    are functions of the match (every group always takes part), which spares ``re`` expanding a
    template on each call."""
    if "r." in text or "t." in text or "s." in text:  # Mr. St. Mrs. Ms. Dr.
        text = _PREFIXES_RE.sub(lambda m: m[1] + "<prd>", text)
    text = _WEBSITES_RE.sub(lambda m: "<prd>" + m[1], text)
    text = _DIGITS_RE.sub(lambda m: m[1] + "<prd>" + m[2], text)
    if ".." in text:
        text = _MULTIPLE_DOTS_RE.sub(lambda m: "<prd>" * len(m.group(0)) + "<stop>", text)
    if "Ph.D" in text:
        text = text.replace("Ph.D.", "Ph<prd>D<prd>")
    if ". " in text:  # a lone letter's dot, or an acronym's, followed by a space
        text = _SINGLE_LETTER_RE.sub(lambda m: " " + m[1] + "<prd> ", text)
        text = _ACRONYM_STARTER_RE.sub(lambda m: m[1] + "<stop> " + m[2], text)
    text = _THREE_LETTERS_RE.sub(lambda m: m[1] + "<prd>" + m[2] + "<prd>" + m[3] + "<prd>", text)
    text = _TWO_LETTERS_RE.sub(lambda m: m[1] + "<prd>" + m[2] + "<prd>", text)
    if "c." in text or "d." in text or "r." in text or "o." in text:  # Inc. Ltd. Jr. Sr. Co.
        text = _SUFFIX_STARTER_RE.sub(lambda m: " " + m[1] + "<stop> " + m[2], text)
        text = _SUFFIX_RE.sub(lambda m: " " + m[1] + "<prd>", text)
    text = _LETTER_DOT_RE.sub(lambda m: " " + m[1] + "<prd>", text)
    if "\u201d" in text:
        text = text.replace(".\u201d", "\u201d.")
    return text


def count_words(text: str) -> int:
    """``\\w+`` tokens (nltk's RegexpTokenizer), as IFBench's ``count_words``."""
    return text_analysis.count_words(text)


def count_words_and_stopwords(text: str) -> tuple[int, int]:
    """``\\w+`` tokens, and those whose lower case is an English stopword."""
    tokens = text_analysis.words(text)
    return len(tokens), sum(1 for t in tokens if t.lower() in STOPWORDS)


word_tokens = text_analysis.word_tokens  # nltk.word_tokenize(text)
edge_word_tokens = text_analysis.edge_word_tokens


@functools.lru_cache(maxsize=1)
def _emoji() -> Any:
    import emoji  # noqa: PLC0415 - lazy on purpose

    return emoji


def is_emoji(char: str) -> bool:
    return _emoji().is_emoji(char)


@functools.lru_cache(maxsize=1)
def _syllapy() -> Any:
    import syllapy  # noqa: PLC0415 - lazy on purpose

    return syllapy


@functools.lru_cache(maxsize=65536)
def syllables(word: str) -> int:
    return _syllapy().count(word)


@functools.lru_cache(maxsize=1)
def _tagger() -> Any:
    """NLTK's English perceptron tagger when its model is found locally, else ``None``."""
    text_analysis.count_words("")  # nltk imported with NLTK_DATA set
    import nltk  # noqa: PLC0415

    try:
        nltk.data.find("taggers/averaged_perceptron_tagger_eng/")
    except LookupError:
        return None
    from nltk.tag import PerceptronTagger  # noqa: PLC0415

    return PerceptronTagger(lang="eng")


def start_verb_route() -> str:
    """``"nltk-tagger"`` when the reference's tagger is available, else ``"verb-lexicon"``."""
    return "nltk-tagger" if _tagger() is not None else "verb-lexicon"


@functools.lru_cache(maxsize=_CACHE_SIZE)
def starts_with_verb(text: str) -> bool:
    """Whether the first token of ``nltk.word_tokenize(text)`` is tagged ``VB*``.

    With the tagger: its tag of the first token, as the reference (``nltk.pos_tag``). Without it:
    :func:`ifdistill.benchmarks.ifbench.verbs.looks_like_verb` on the first token.
    """
    tokens = word_tokens(text)
    if not tokens:
        return False
    tagger = _tagger()
    if tagger is not None:
        return "VB" in tagger.tag(list(tokens))[0][1]
    from ifdistill.benchmarks.ifbench.verbs import looks_like_verb  # noqa: PLC0415

    return looks_like_verb(tokens[0])


def clear_caches() -> None:
    split_into_sentences.cache_clear()
    syllables.cache_clear()
    starts_with_verb.cache_clear()
