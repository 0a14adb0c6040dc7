"""The command-line programs: every console script of pyproject.toml's ``[project.scripts]`` is
``ifdistill.cli.<program>:main``, and ``make demo`` is :mod:`.demo`.

- :mod:`.train`: ``ifdistill-train`` (the Hydra app; the tree becomes a ``TrainConfig`` at
  :func:`ifdistill.train.config_edge.train_config`, then :func:`ifdistill.train.run.train`);
- :mod:`.eval`: ``ifdistill-eval``'s dispatch: one evaluation (:mod:`ifdistill.evaluator.cli`, the program
  every checkpoint evaluation runs), ``backfill``, ``rerun``, ``serve``;
- :mod:`.score`: ``ifdistill-score``, a JSONL file of responses scored strict and loose;
- :mod:`.report`: ``ifdistill-report``, the results page (:func:`~ifdistill.cli.report.write_report`);
- :mod:`.status`: ``ifdistill-status``, the state of runs and sweeps;
- :mod:`.wandb_view`: ``ifdistill-wandb-view``, a sweep's W&B workspace;
- :mod:`.demo`: ``make demo``.

The programs sit above every part they run; no library module imports them. What every command line
shares (one-line errors, exit 2) is :mod:`ifdistill.command_line`, the quiet console :mod:`ifdistill.console`.
"""
