"""W&B: offline run files read back without a server (:mod:`.wandb_offline`), and ``ifdistill-wandb-view``,
the saved workspace view of a sweep (:mod:`.wandb_view`)."""
