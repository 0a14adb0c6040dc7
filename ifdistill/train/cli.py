"""``ifdistill-train``: the Hydra entry point. All logic is in :func:`ifdistill.train.run.train`.

Examples::

    ifdistill-train experiment=demo
    ifdistill-train model=qwen3_1.7b method=distill trainer=deepspeed_stage_2 trainer.devices=2
    ifdistill-train experiment=demo trainer=ddp trainer.devices=2     # 2 CPU processes (gloo)
    ifdistill-train -m experiment=ifeval_replay_sweep hydra/launcher=slurm   # 24 runs as a SLURM array

Re-running the same command after a crash resumes the run from its newest complete checkpoint (the
run directory is named by the config hash, see :mod:`ifdistill.train.rundir`).
"""

from __future__ import annotations

import json
from pathlib import Path

import hydra
from omegaconf import DictConfig

import ifdistill.conf

CONFIG_DIR = str(Path(ifdistill.conf.__file__).resolve().parent)


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="train")
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    from ifdistill.sweeps import check_launch
    from ifdistill.train.run import resolve_run_dir, train

    check_launch(cfg)
    # The Hydra job dir (a sweep's <n>_<overrides>/) points at the run it trains (ifdistill-status).
    job_dir = Path(HydraConfig.get().runtime.output_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "run_dir.txt").write_text(str(resolve_run_dir(cfg)[0].root) + "\n")
    result = train(cfg)
    from lightning.fabric.utilities.rank_zero import _get_rank

    if int(_get_rank() or 0) == 0:
        print(json.dumps({k: v for k, v in result.items() if k != "metrics"}, default=str))


if __name__ == "__main__":
    main()
