"""Programs above every part they run: ``ifdistill-eval``'s dispatch (:mod:`.eval_cli`: the evaluator, the
back-fill, a re-run, the persistent server) and ``make demo`` (:mod:`.demo`). Each single-purpose
program's entry sits with what it runs (``ifdistill/train/cli.py``, ``ifdistill/evaluator/cli.py``,
``ifdistill/results/cli.py``)."""
