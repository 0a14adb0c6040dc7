"""The eval configurations whose ``eval_config_hash`` is pinned (tests/unit/evaluator/test_benchmark_identity.py).

Each shipped eval config that prepares offline, on the tiny model (the first rows): IFEval's and IFBench's rows (their local
copies and the hub fallback), the synthetic rows, the judge (the tiny model judging, absolute and pairwise)
and lm-eval (a generative and a multiple-choice task on local documents, lm-eval's own definitions).
Runnable as a script (``python identity_cases.py OUT.json``) with another tree first on ``PYTHONPATH``:
that is how the pinned values were computed from the code before the benchmark's own section entered the
hash by construction.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

#: Where the cases' files lie. Fixed, because lm-eval records a task YAML's path in the task's config
#: (``metadata.config_source``), which enters ``tasks.<task>.config_sha256``.
WORKDIR = Path("/tmp/ifdistill-identity-cases")

#: The first rows only, each answer's budget within the tiny model's context of 2048 tokens.
ROWS = ["eval.data.max_examples=12", "eval.generation.max_new_tokens=64"]
CASES = {
    "ifeval_local": ["eval=ifeval_local", *ROWS],
    "ifeval": ["eval=ifeval", *ROWS],
    "ifbench_local": ["eval=ifbench_local", *ROWS],
    "ifbench_v1_local": ["eval=ifbench_v1_local", *ROWS],
    "synthetic": ["eval=synthetic", *ROWS],
    "judge": ["eval=judge", *ROWS, "eval.judge.model.name_or_path=builtin:tiny"],
    "judge_pairwise": ["eval=judge", *ROWS, "eval.judge.model.name_or_path=builtin:tiny", "eval.data.max_examples=3",
                       "eval.judge.mode=pairwise", "eval.judge.reference={workdir}/reference.jsonl"],
    "lmeval": ["eval=lmeval", "eval.lmeval.tasks=[smoke_gsm8k,smoke_commonsense_qa]",
               "eval.lmeval.include_path=[{workdir}/tasks]", "eval.lmeval.num_fewshot=0"],
    "ifeval_multiturn": ["eval=ifeval_multiturn", *ROWS],
    "ifeval_reliable_at_4": ["eval=ifeval_local", *ROWS, "eval.generation.greedy=false", "eval.generation.samples=4"],
    "lmeval_options": ["eval=lmeval", "eval.lmeval.tasks=[smoke_gsm8k,smoke_commonsense_qa]",
                       "eval.lmeval.include_path=[{workdir}/tasks]", "eval.lmeval.num_fewshot=0", "eval.lmeval.apply_chat_template=true",
                       "eval.lmeval.limit=2", "eval.lmeval.fewshot_seed=7", "eval.lmeval.bootstrap_iters=0"],
}


def workdir_files(workdir: Path) -> None:
    """The local lm-eval tasks and the judge's reference responses (the first three IFEval prompts)."""
    from ifdistill.benchmarks.lmeval.smoke import write_tasks
    from ifdistill.paths import shared_data_dir

    workdir.mkdir(parents=True, exist_ok=True)
    write_tasks(workdir / "tasks")
    rows = [json.loads(line) for line in (shared_data_dir() / "ifeval" / "input_data.jsonl").read_text().splitlines()[:3]]
    (workdir / "reference.jsonl").write_text("".join(
        json.dumps({"key": str(r["key"]), "prompt": r["prompt"], "response": f"A reference answer {i}."}) + "\n"
        for i, r in enumerate(rows)))


def eval_config_hash(name: str, workdir: Path) -> str:
    from ifdistill.evaluator.cli import load_config
    from ifdistill.evaluator.run import prepare

    overrides = [o.replace("{workdir}", str(workdir)) for o in CASES[name]]
    return prepare(load_config(overrides, output_dir=str(workdir / "out" / name))).eval_config_hash


def all_hashes(workdir: Path = WORKDIR) -> dict[str, str]:
    workdir_files(workdir)
    return {name: eval_config_hash(name, workdir) for name in CASES}


if __name__ == "__main__":
    import ifdistill

    out = {"ifdistill": ifdistill.__file__, "hashes": all_hashes()}
    Path(sys.argv[1]).write_text(json.dumps(out, indent=1))
