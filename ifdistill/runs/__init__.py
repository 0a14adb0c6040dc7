"""Where a training run lives: its directory and config hash (:mod:`.rundir`), and the sweeps that launch
many (:mod:`.sweeps`: names, outcomes, failed jobs; :mod:`.sweep_configs`: a sweep's jobs read back)."""
