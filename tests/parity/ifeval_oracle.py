"""lm-eval's IFEval code as the parity oracle (tests and benchmarks only; needs the ``dev`` extra).

The oracle is lm-eval 0.4.13's port of google's checkers (``lm_eval/tasks/ifeval``), run the way the
reference notes describe: langdetect seeded (``DetectorFactory.seed = 0``) before any detection,
and ``NLTK_DATA`` pointing at punkt_tab *before* lm-eval's ``instructions_util`` is imported (that
module calls ``nltk.data.find("tokenizers/punkt_tab")`` at import and downloads when it fails).

Why not ``import lm_eval.tasks.ifeval.utils``: the parent package ``lm_eval.tasks`` imports the task
manager and with it ``datasets``, ``transformers`` and more (about 3 s and a hundred modules). The
three IFEval files only need each other, so :func:`load_oracle` imports them from their files under
their real module names with light placeholder parents, then removes the placeholders again so a
later genuine ``import lm_eval.tasks`` is unaffected.

Where the oracle is *random* (``keywords:letter_frequency`` given a non-letter, IFEval keys 1122
and 1129) its label is not comparable; callers exclude those instructions (see
:func:`oracle_is_random`).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ifdistill.paths import ensure_nltk_data

_PLACEHOLDERS = ("lm_eval.tasks", "lm_eval.tasks.ifeval")
_MODULES = ("instructions_util", "instructions", "instructions_registry", "utils")


@dataclass(frozen=True)
class Oracle:
    """The loaded lm-eval modules and a scoring function with ifdistill's signature."""

    utils: types.ModuleType
    registry: types.ModuleType

    def score(
        self, prompt: str, instruction_id_list: list[str], kwargs: list[dict[str, Any]], response: str
    ) -> tuple[list[bool], list[bool]]:
        """``(strict_inst, loose_inst)`` as lm-eval decides them (kwargs as given, ``None`` dropped)."""
        inp = self.utils.InputExample(
            key=0,
            instruction_id_list=list(instruction_id_list),
            prompt=prompt,
            kwargs=[{k: v for k, v in (kw or {}).items() if v is not None} for kw in kwargs],
        )
        strict = self.utils.test_instruction_following_strict(inp, response)
        loose = self.utils.test_instruction_following_loose(inp, response)
        return list(strict.follow_instruction_list), list(loose.follow_instruction_list)


_oracle: Oracle | None = None


def _ifeval_dir() -> Path:
    spec = importlib.util.find_spec("lm_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("lm-eval is not installed: install ifdistill's dev extra (lm-eval==0.4.13)")
    folder = Path(next(iter(spec.submodule_search_locations))) / "tasks" / "ifeval"
    if not (folder / "instructions.py").is_file():
        raise ImportError(f"lm-eval has no IFEval task at {folder}")
    return folder


def load_oracle() -> Oracle:
    """Import lm-eval's IFEval modules once, offline and seeded, without ``lm_eval.tasks``."""
    global _oracle
    if _oracle is not None:
        return _oracle
    ensure_nltk_data()  # before nltk / instructions_util are imported
    import langdetect  # noqa: PLC0415

    langdetect.DetectorFactory.seed = 0
    folder = _ifeval_dir()
    prefix = "lm_eval.tasks.ifeval."
    if prefix + "utils" in sys.modules:  # the real package was imported by someone: use it
        utils = sys.modules[prefix + "utils"]
        registry = sys.modules[prefix + "instructions_registry"]
    else:
        importlib.import_module("lm_eval")  # light: its __init__ only reads the version
        added, loaded = [], {}
        for name, path in zip(_PLACEHOLDERS, (folder.parent, folder), strict=True):
            if name not in sys.modules:
                placeholder = types.ModuleType(name)
                placeholder.__path__ = [str(path)]  # type: ignore[attr-defined]
                sys.modules[name] = placeholder
                added.append(name)
        try:
            for short in _MODULES:
                name = prefix + short
                spec = importlib.util.spec_from_file_location(name, folder / f"{short}.py")
                assert spec is not None and spec.loader is not None
                module = importlib.util.module_from_spec(spec)
                sys.modules[name] = module
                spec.loader.exec_module(module)
                loaded[short] = module
                setattr(sys.modules["lm_eval.tasks.ifeval"], short, module)
        finally:
            for name in added:
                del sys.modules[name]
            for short in _MODULES:  # keep them private: a real import later must load its own
                sys.modules.pop(prefix + short, None)
        utils, registry = loaded["utils"], loaded["instructions_registry"]
    # lm-eval logs an error for every text langdetect cannot read (then counts it as followed);
    # the boundary cases have many on purpose, so keep the oracle quiet.
    logging.getLogger(prefix + "instructions").setLevel(logging.CRITICAL)
    _oracle = Oracle(utils=utils, registry=registry)
    return _oracle


def oracle_is_random(instruction_id: str, kwargs: dict[str, Any] | None) -> bool:
    """Whether lm-eval draws a random argument for this instruction (so its label is arbitrary).

    True for ``keywords:letter_frequency`` with a ``letter`` that is not a single a-z/A-Z letter, and
    for any kwarg that lm-eval drops as falsy (``0``, ``""``, ``[]``) where it then draws one.
    """
    kwargs = {k: v for k, v in (kwargs or {}).items() if v is not None}
    if any(not v for v in kwargs.values()):
        return True
    if instruction_id == "keywords:letter_frequency":
        letter = kwargs.get("letter")
        return not (isinstance(letter, str) and len(letter) == 1 and "a" <= letter.lower() <= "z")
    return False
