"""IFBench: the 58 constraints of allenai's IFBench (Pyatkin et al., 2025) as a benchmark of the evaluator.

``benchmark`` (its registration), ``instruction_ids`` (its table of instruction id -> checker), the checkers
(``instructions_*``) and their text measurements (``text``, ``verbs``). The checkers build on the shared
instruction-checking base (:mod:`ifdistill.benchmarks.instruction_following`: the checker base class, kwargs validation,
text measurements), and the shared scorer there judges them strict and loose and aggregates them, because
the reference evaluation (``evaluation_lib.py``) judges strict and loose exactly as IFEval's does; only the
checkers differ.

Importing this package loads neither nltk, emoji nor syllapy, and nothing ever downloads (the
reference downloads a spaCy model at import and NLTK data at run time).
"""

from ifdistill.benchmarks.ifbench.instruction_ids import IFBENCH_REGISTRY

#: Version of the IFBench decisions; bump it whenever any decision could change.
IFBENCH_SCORER_VERSION = "ifbench-1"


def scorer_version() -> str:
    """The version that enters an IFBench evaluation's config hash, with the ``start_verb`` route
    (the reference's tagger, or the offline verb lexicon) so the two are never mixed."""
    from ifdistill.benchmarks.ifbench.text import start_verb_route  # noqa: PLC0415 - loads nltk

    return f"{IFBENCH_SCORER_VERSION}+{start_verb_route()}"


__all__ = ["IFBENCH_REGISTRY", "IFBENCH_SCORER_VERSION", "scorer_version"]
