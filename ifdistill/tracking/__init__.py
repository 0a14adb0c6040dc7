"""W&B: ``ifdistill-wandb-view``, the saved workspace view of a sweep (:mod:`.wandb_view`). A run's offline
W&B files are read back by :mod:`ifdistill.runs.wandb_offline`, below the callbacks that need it."""
