"""W&B: a run's offline files read back without a server (:mod:`.wandb_offline`): what a test asserts on,
and which evaluations a relaunch finds missing from W&B."""
