"""The offline stand-in for NLTK's tagger in ``words:start_verb``: a lexicon of common verbs.

IFBench's ``words:start_verb`` asks whether ``nltk.pos_tag`` tags the response's first token
``VB*``. That tagger's model (``averaged_perceptron_tagger_eng``) is not shipped in any package
ifdistill may install and cannot be downloaded where ifdistill is tested, so, when nltk cannot find
it, the first token is looked up here instead: a verb in the list below (base form, or that form
plus "s", "ed" or "ing", with the usual doubled-consonant and dropped-"e" spellings). This is **not**
at parity with the reference: the tagger also uses the following words and tags unknown words by
their shape. Responses to IFBench's six ``start_verb`` prompts mostly open with an imperative or a
gerund ("Write", "Imagine", "Creating ..."), which the list covers. The route in use enters the
scorer version (:func:`ifdistill.benchmarks.ifbench.scorer_version`), so scores from the two are never mixed.
"""

from __future__ import annotations

BASE_VERBS = frozenset(
    """accept achieve act add adjust agree allow analyze answer apply argue arrange ask assess
    assume avoid be become begin believe boil break bring build buy calculate call can care carry
    catch change check choose clean close collect combine come compare complete consider continue
    cook could count create cut decide define describe design determine develop discover discuss
    do draw drink drive eat embrace enjoy ensure enter establish evaluate examine explain explore
    feel fill find finish fix focus follow forget gather get give go grab grow have hear help hold
    identify imagine implement improve include increase investigate join jump keep know learn leave
    let lift like list listen live look love make manage may measure meet might mix move must need
    note observe obtain offer open organize paint pay pick place plan play prepare present prevent
    print protect provide pull push put read realize recall receive recognize reduce reflect
    remember remove repeat replace report respond rest return review rise run save say see seek
    select sell send set shall share should show sing sit sleep solve speak spend stand start stay
    step stop study suggest summarize support take talk teach tell think throw train transform try
    turn understand use visit wait wake walk want wash watch wear welcome will win wish work would
    write""".split()
)


def _forms(verb: str) -> set[str]:
    stem = verb[:-1] if verb.endswith("e") and verb not in ("be", "see", "agree") else verb
    doubled = verb + verb[-1] if len(verb) <= 4 and verb[-1] in "bdgmnprt" and verb[-2] in "aeiou" else verb
    return {verb, verb + "s", verb + "es", stem + "ed", stem + "ing", doubled + "ed", doubled + "ing"}


VERB_FORMS = frozenset(form for verb in BASE_VERBS for form in _forms(verb))


def looks_like_verb(token: str) -> bool:
    """Whether ``token`` (any case) is a listed verb form."""
    return token.lower() in VERB_FORMS
