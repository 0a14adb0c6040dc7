"""The docs' steps are a test: the method and benchmark skeletons of docs/methods.md and docs/benchmarks.md,
alone, make a method that trains and a benchmark that evaluates, and pass the guards ``make test`` runs.

A fenced code block whose info string names a file (```` ```python title="ifdistill/methods/neftune/hooks.py" ````)
is that file, whole (:func:`doc_files`). The blocks are written into a copy of the tree (:func:`tree_copy`: the
repository's files as hard links, nothing copied byte by byte; the docs' files new), where, with nothing else
edited:

1. the guard tests pass on the new method and benchmark: composition and the config-hash pins (the new
   options are reported as unpinned, not failed), one home per default, the import graph, no module outside
   a benchmark's folder naming it, packaging, a method's light hooks, finding the benchmarks staying light,
   every field of a benchmark's own section in its hash, the benchmark contract (its smoke evaluation through
   every consumer of a result);
2. 10 training steps with the method finish (the tiny model, LoRA);
3. the benchmark evaluates (the tiny model, 3 prompts), and its own setting changes its eval_config_hash;
4. a misspelt key of either is one line, exit 2.

Removing a step from the docs (a block, or a line the code needs) fails one of these. About 90 s on two idle
cores: the guards' pytest run ~45 s, training ~20 s, the two evaluations ~15 s, the two refusals ~6 s.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
DOCS = ("docs/methods.md", "docs/benchmarks.md")
#: What the copy holds of the repository (the test's own guards included); the remapped packages are linked
#: inside ``ifdistill/`` as an installed tree has them, so the copy imports itself, not the checkout.
COPIED = ("ifdistill", "conf", "callbacks", "launchers", "tests", "pyproject.toml", "setup.py")
REMAPPED = ("callbacks", "launchers", "conf")
BLOCK = re.compile(r'^```\w*[ \t]+title="([^"]+)"[ \t]*\n(.*?)^```[ \t]*$', re.M | re.S)

METHOD, BENCHMARK = "neftune", "word_budget"
TRAIN = ["model=tiny", "data=synthetic", f"method={METHOD}", "peft=lora", "peft.r=4", "peft.alpha=8", "trainer=cpu",
         "logger=csv", "+data.sources.0.max_examples=32", "data.heldout=8", "data.max_length=256",
         "datamodule.micro_batch_size=2", "trainer.max_steps=10", "run.eval_every_n_steps=1000",
         "run.checkpoint_every_n_steps=10"]
GUARDS = [
    *(f"tests/unit/test_configs.py::test_every_config_composes_and_validates[{case}]"
      for case in (f"train-method={METHOD}", f"train-eval={BENCHMARK}", f"eval-eval={BENCHMARK}")),
    "tests/unit/test_one_home_per_default.py",
    "tests/unit/test_import_graph.py",
    "tests/unit/test_benchmark_names.py",
    "tests/unit/ifeval/test_ifeval_offline.py::test_finding_every_instruction_table_is_light",
    "tests/unit/test_packaging.py::test_every_package_folder_ships",
    "tests/unit/train/test_method_hooks.py",
    "tests/unit/evaluator/test_benchmark_identity.py::test_each_registration_states_the_sections_of_its_folder",
    "tests/unit/evaluator/test_benchmark_identity.py::test_every_own_setting_enters_the_hash",
    f"tests/integration/test_benchmark_contract.py::test_every_benchmark_through_every_consumer[{BENCHMARK}]",
]
EVALUATE = """
import json, sys
from ifdistill.evaluator.cli import load_config
from ifdistill.evaluator.run import evaluate

out = {}
for words in (10, 50):
    overrides = ["eval=%s", "model=tiny", "eval.backend=hf", "eval.data.max_examples=3",
                 "eval.generation.max_new_tokens=8", "eval.runtime.progress=false", f"eval.%s.max_words={words}"]
    out[words] = evaluate(load_config(overrides, output_dir=f"{sys.argv[1]}/{words}"))
print(json.dumps({w: {"hash": r["eval_config_hash"], "metrics": r["metrics"], "section": r["config"]["eval"]["%s"]}
                  for w, r in out.items()}))
""" % (BENCHMARK, BENCHMARK, BENCHMARK)


def doc_files(*docs: str) -> dict[str, str]:
    """``{path: text}`` of every code block of ``docs`` whose info string names its file (module docstring)."""
    files: dict[str, str] = {}
    for doc in docs:
        for path, text in BLOCK.findall((ROOT / doc).read_text(encoding="utf-8")):
            assert path not in files, f"{doc}: {path} is given twice"
            files[path] = text
    return files


def _link(source: str, dest: str) -> None:
    """A hard link (no bytes copied); a copy where ``dest`` is on another file system."""
    try:
        os.link(source, dest)
    except OSError:
        shutil.copy2(source, dest)


def tree_copy(dest: Path, files: dict[str, str]) -> Path:
    """:data:`COPIED` as hard links under ``dest`` (no ``__pycache__``), then ``files`` written as new files
    (each must be new: a doc step adds, never edits); returns ``dest``."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    dest.mkdir(parents=True)
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=ignore, copy_function=_link)
        else:
            _link(str(source), str(dest / name))
    for name in REMAPPED:
        (dest / "ifdistill" / name).symlink_to(Path("..") / name)
    for rel, text in files.items():
        path = dest / rel
        assert not path.exists(), f"a doc step overwrites {rel}: the steps add a folder and a config only"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return dest


def _run(argv: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(cwd), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_docs_name_a_method_and_a_benchmark_folder_and_config_only():
    files = doc_files(*DOCS)
    assert {f"conf/method/{METHOD}.yaml", f"conf/eval/{BENCHMARK}.yaml"} <= set(files)
    outside = [p for p in files if not p.startswith((f"ifdistill/methods/{METHOD}/", f"ifdistill/benchmarks/{BENCHMARK}/",
                                                     f"conf/method/{METHOD}.yaml", f"conf/eval/{BENCHMARK}.yaml"))]
    assert not outside, f"doc steps outside the new folders and configs: {outside}"


def test_the_docs_skeletons_train_evaluate_and_pass_the_guards(tmp_path):
    tree = tree_copy(tmp_path / "tree", doc_files(*DOCS))
    python = sys.executable

    # 1. the guards make test runs, on the copy (its own tests, its own conf/ and ifdistill/)
    guards = _run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "default", *GUARDS], tree, timeout=600)
    assert guards.returncode == 0, guards.stdout[-4000:] + guards.stderr[-2000:]
    for case in (f"train-method={METHOD}", f"train-eval={BENCHMARK}"):  # reported, not a KeyError
        assert f"UnpinnedOption: {case}: a new shipped option" in guards.stdout, guards.stdout[-3000:]

    # 2. 10 training steps with the method
    out = tmp_path / "out"
    train = _run([python, "-m", "ifdistill.cli.train", *TRAIN, f"paths.output_root={out}"], tree)
    assert train.returncode == 0, train.stderr[-3000:]
    (run_dir,) = (out / "train" / "runs").iterdir()
    launch = json.loads((run_dir / "run.json").read_text())["launches"][-1]
    assert launch.get("finished") and launch["final_step"] == 10, launch

    # 3. the benchmark evaluates; its own setting is in its identity
    done = _run([python, "-c", EVALUATE, str(tmp_path / "evals")], tree)
    assert done.returncode == 0, done.stderr[-3000:]
    by_words = json.loads(done.stdout.strip().splitlines()[-1])
    assert {w: r["section"]["max_words"] for w, r in by_words.items()} == {"10": 10, "50": 50}
    assert by_words["10"]["hash"] != by_words["50"]["hash"]
    for r in by_words.values():
        assert 0.0 <= r["metrics"]["within_budget"] <= 1.0 and r["metrics"]["mean_words"] >= 0.0

    # 4. a misspelt key of either: one line, exit 2
    for argv, key in (([python, "-m", "ifdistill.cli.train", *TRAIN, f"paths.output_root={out}",
                        "method.noise_alpah=10"], "noise_alpah"),
                      ([python, "-m", "ifdistill.cli.eval", f"eval={BENCHMARK}", "model=tiny",
                        f"eval.{BENCHMARK}.max_wrods=10"], "max_wrods")):
        refused = _run(argv, tree, timeout=120)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert refused.stderr.startswith(("ifdistill-train: error: ", "ifdistill-eval: error: ")) and key in refused.stderr
