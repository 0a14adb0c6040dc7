"""Where a training run lives: its directory and config hash (:mod:`.rundir`), what its offline W&B folders
hold (:mod:`.wandb_offline`), and the sweeps that launch many (:mod:`.sweeps`: names, outcomes, failed jobs;
:mod:`.sweep_configs`: a sweep's jobs read back)."""
