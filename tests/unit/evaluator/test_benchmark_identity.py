"""A benchmark's identity by construction: every field of its own config sections enters its eval_config_hash
(:mod:`ifdistill.evaluator.identity`), the hashes of the shipped eval configurations stay what they were, and a
section of a benchmark other than the selected one is refused before anything runs.

- Every registered benchmark (found by the registry, so a new one is walked without editing this file) and
  the contract test's own registration: each leaf field of each of its sections, changed, changes the hash
  the core derives. A field marked :func:`~ifdistill.evaluator.identity.hashed_as` enters in another form
  (the judge's weights by digest, lm-eval's ``include_path`` by the tasks it holds) and is perturbed through
  a real ``prepare`` by its benchmark's tests (tests/unit/evaluator/test_judge_eval.py,
  tests/integration/lmeval/test_lmeval_prepare.py); here it must say where it enters.
- :data:`BEFORE`: the hashes of :data:`~tests.unit.evaluator.identity_cases.CASES` computed by the code of
  commit 80ad137 (before the own sections entered by construction): ``git archive 80ad137 ifdistill conf
  callbacks launchers`` extracted, then ``PYTHONPATH=<that tree> python identity_cases.py out.json``;
  :data:`SINCE_ADDED`: those of configurations added later, as the code that added them computed them.
"""

from __future__ import annotations

import dataclasses
import typing

import pytest

from ifdistill.config import ConfigError
from ifdistill.benchmarks import registry
from ifdistill.benchmarks.base import Benchmark
from ifdistill.evaluator.fingerprint import config_hash
from ifdistill.evaluator.identity import HASHED_AS, field_paths, with_own_settings
from tests.unit.evaluator.identity_cases import CASES, WORKDIR, eval_config_hash, workdir_files

BEFORE = {
    "ifeval_local": "f6ed43c554876195",
    "ifeval": "f6ed43c554876195",
    "ifbench_local": "e5660cefe6bf1b2e",
    "ifbench_v1_local": "b3437af7ef8e749b",
    "synthetic": "a42d5524c59a84f3",
    "judge": "6500006ce0578d19",
    "judge_pairwise": "7a88a1c8aa2cd800",
    "lmeval": "cdacef601532dfdb",
    "lmeval_options": "67c729790d7a8958",
}
SINCE_ADDED = {
    "ifeval_multiturn": "5372be596076188f",  # the multi-turn benchmark, generator version 1
    "ifeval_reliable_at_4": "90d3483e54011601",  # eval.generation.samples away from its default
}


def _benchmarks() -> list[Benchmark]:
    from tests.integration.test_benchmark_contract import StopRate

    return [*registry.ordered(), StopRate()]


def _changed(kind: typing.Any, value: typing.Any) -> typing.Any:
    """Another valid value of a field of type ``kind`` now holding ``value``."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    base = args[0] if typing.get_origin(kind) is typing.Union else kind
    if value is None:
        base = typing.get_origin(base) or base
        return {int: 3, str: "x", bool: True, float: 0.5, list: ["x"], dict: {"x": 1}}[base]
    if isinstance(value, dict):
        return {**value, "x": 1}
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return [*value, "x"]
    raise AssertionError(f"no perturbation for {kind} = {value!r}")


def _set(obj: typing.Any, path: str, value: typing.Any) -> typing.Any:
    head, _, rest = path.partition(".")
    new = getattr(obj, head) if not rest else _set(getattr(obj, head), rest, value)
    return dataclasses.replace(obj, **{head: value if not rest else new})


def _own_fields() -> list[tuple[str, str, type, str, dataclasses.Field, typing.Any]]:
    """``(benchmark, section key, section class, field path, field, its type)`` of every leaf field."""
    out = []
    for bench in _benchmarks():
        for key, cls in bench.sections().items():
            for path, f in field_paths(cls):
                owner = cls
                for part in path.split(".")[:-1]:
                    owner = typing.get_type_hints(owner)[part]
                out.append((bench.name, key, cls, path, f, typing.get_type_hints(owner)[f.name]))
    return out


def test_every_benchmark_is_walked_and_sections_are_found():
    walked = {b.name for b in _benchmarks()}
    assert set(registry.names()) <= walked and "test_stops" in walked
    assert {(b, k) for b, k, *_ in _own_fields()} >= {("lmeval", "lmeval"), ("judge", "judge")}


def test_a_new_sections_field_of_any_type_is_perturbed():
    """What a new benchmark's settings may hold: every kind of field gets another value."""
    for kind, value in ((int, 1), (float, 0.5), (str, ""), (bool, False), (typing.Optional[int], None),
                        (typing.Optional[typing.List[str]], None), (typing.List[int], [1]), (typing.Dict[str, int], {})):
        assert _changed(kind, value) != value


@pytest.mark.parametrize("bench,key,cls,path,field,kind", _own_fields(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_own_setting_enters_the_hash(bench, key, cls, path, field, kind):
    if HASHED_AS in field.metadata:  # enters in another form, proved by its benchmark's prepare tests
        assert field.metadata[HASHED_AS].strip(), f"eval.{key}.{path}: hashed_as names no place"
        return
    base = cls()
    value = base
    for part in path.split("."):
        value = getattr(value, part)
    other = _set(base, path, _changed(kind, value))
    assert config_hash(with_own_settings({}, {key: other})) != config_hash(with_own_settings({}, {key: base}))


def test_a_fingerprint_that_contradicts_its_section_is_an_error():
    from ifdistill.benchmarks.lmeval.settings import LMEvalSettings

    with pytest.raises(ValueError, match=r"fingerprint\['lmeval'\] holds \['limit'\]"):
        with_own_settings({"lmeval": {"limit": 3}}, {"lmeval": LMEvalSettings(limit=4)})


@pytest.fixture(scope="module")
def workdir():
    workdir_files(WORKDIR)
    return WORKDIR


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n.startswith("lmeval") else n
                                  for n in CASES])
def test_shipped_configurations_keep_their_hash(name, workdir):
    assert eval_config_hash(name, workdir) == {**BEFORE, **SINCE_ADDED}[name]


@pytest.mark.parametrize("overrides, owner", [
    (["eval=ifeval_local", "eval.lmeval.limit=3"], "lmeval"),
    (["eval=lmeval", "eval.lmeval.tasks=[gsm8k]", "eval.judge.score_max=5"], "judge"),
])
def test_another_benchmarks_section_is_refused_before_anything_runs(overrides, owner, tmp_path):
    from ifdistill.evaluator.cli import load_config
    from ifdistill.evaluator.run import prepare

    with pytest.raises(ConfigError) as err:
        prepare(load_config(overrides, output_dir=str(tmp_path / "out")))
    message = str(err.value)
    assert "\n" not in message and f"eval.{owner} is set but is {owner}'s section" in message, message
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("override", ["eval.lmeval.limit=3", "+eval@callbacks.checkpoint_eval.evals.x=ifbench_local",
                                      ])
def test_a_training_config_with_another_benchmarks_section_fails_preflight(override):
    """The run's ``eval`` and an extra section of the checkpoint evaluations alike."""
    from tests.unit.train.test_preflight import cfg_of
    from ifdistill.train.config_edge import train_config
    from ifdistill.train.preflight import PreflightError

    if override.startswith("+eval@"):
        overrides = ["callbacks=checkpoint_eval", override, "callbacks.checkpoint_eval.evals.x.judge.score_max=5"]
        where = "callbacks.checkpoint_eval.evals.x"
    else:
        overrides, where = ["eval=ifeval_local", override], "eval"
    with pytest.raises(PreflightError) as err:
        train_config(cfg_of(*overrides), check_model=False)
    assert f"{where}: config section 'eval': eval." in str(err.value) and "'s section and eval.benchmark is" in str(err.value)


def test_each_registration_states_the_sections_of_its_folder():
    """The ``eval`` schema's benchmark sections (``SECTIONS`` of the folders' settings modules) are the ones the
    registrations find (:meth:`~ifdistill.benchmarks.base.Benchmark.sections`, no line of their own), each by
    the registration of its own folder."""
    from ifdistill.evaluator.settings import benchmark_sections

    modules = registry.subpackage_modules("settings")
    assert modules
    for module in modules:
        folder = module.__name__.rpartition(".")[0]
        owner = [b for b in registry.ordered() if type(b).__module__ == f"{folder}.benchmark"]
        assert len(owner) == 1 and owner[0].sections() == dict(module.SECTIONS), folder
    assert {k for b in registry.ordered() for k in b.sections()} == set(benchmark_sections())
