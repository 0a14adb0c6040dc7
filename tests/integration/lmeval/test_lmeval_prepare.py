"""lm-eval evaluations before any engine starts: the three input errors and what eval_config_hash covers.

- An unknown task, a local dataset whose rows lack a field the task reads, and a hub dataset that
  cannot be reached offline each stop ``prepare`` with one line naming the task and the cause; through
  ``ifdistill-eval`` that is exit code 2 and no results.json.
- ``eval_config_hash`` is stable for the same inputs, ignores ``eval.runtime``, and changes with every
  input that changes what is scored: few-shot count and seed (the drawn demonstrations), the document
  limit, the chat template's use and text, the thinking flag, a task's definition.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ifdistill.evaluator.cli import load_config
from ifdistill.evaluator.errors import EvaluatorError
from ifdistill.evaluator.run import prepare
from tests.integration.lmeval.local_tasks import write_broken_tasks, write_tasks

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("lmeval_prepare")
    return {"root": root, "tasks": write_tasks(root, n_test=6), "broken": write_broken_tasks(root)}


def cfg(tasks, out: Path, *overrides: str, names: str = "gsm8k_local,commonsense_qa_local"):
    return load_config(["eval=lmeval", f"eval.lmeval.tasks=[{names}]", "model=tiny_qwen3",
                        f"eval.lmeval.include_path=[{tasks['tasks']},{tasks['broken']}]", *overrides],
                       output_dir=str(out))


@pytest.mark.parametrize("names, words", [
    ("gsm8k_locl", ["'gsm8k_locl'", "unknown to lm-eval", "gsm8k_local"]),  # with the near name as a hint
    ("gsm8k_nofield", ["'gsm8k_nofield'", "question", "undefined"]),
    ("commonsense_qa", ["'commonsense_qa'", "dataset cannot be read"]),  # the hub dataset, offline
])
def test_input_errors_name_the_task_and_cause(tasks, tmp_path, names, words):
    with pytest.raises(EvaluatorError) as err:
        prepare(cfg(tasks, tmp_path / "out", names=names))
    message = str(err.value)
    assert "\n" not in message and all(w in message for w in words), message
    assert not (tmp_path / "out").exists()


def test_cli_exits_2_with_one_line(tasks, tmp_path):
    out = tmp_path / "out"
    argv = [str(Path(sys.executable).parent / "ifdistill-eval"), "eval=lmeval", "eval.lmeval.tasks=[no_such_task]",
            "model=tiny_qwen3", f"output_dir={out}", f"hydra.run.dir={tmp_path / 'hydra'}"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("ifdistill-eval: error:")]
    assert "'no_such_task'" in line and "unknown to lm-eval" in line
    assert not (out / "results.json").exists()


def test_eval_config_hash_covers_what_changes_a_score(tasks, tmp_path):
    def digest(*overrides: str, names: str = "gsm8k_local,commonsense_qa_local") -> str:
        return prepare(cfg(tasks, tmp_path / "out", *overrides, names=names)).eval_config_hash

    base = digest()
    assert digest() == base
    assert digest("eval.runtime.hf_batch_size=3", "eval.runtime.progress=false") == base  # resources only
    changed = {
        "num_fewshot": digest("eval.lmeval.num_fewshot=1"),
        "fewshot_seed": digest("eval.lmeval.fewshot_seed=7"),
        "limit": digest("eval.lmeval.limit=3"),
        "chat_template_use": digest("eval.lmeval.apply_chat_template=true"),
        "thinking": digest("eval.lmeval.apply_chat_template=true", "model.enable_thinking=true"),
        "template_text": digest("eval.lmeval.apply_chat_template=true",
                                "model.chat_template='{% for m in messages %}{{ m.content }}\n{% endfor %}'"),
        "tasks": digest(names="gsm8k_local"),
    }
    assert base not in changed.values() and len(set(changed.values())) == len(changed), changed
