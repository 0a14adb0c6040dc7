"""IFEval as a benchmark of the evaluator (``benchmark: ifeval``, the default): ``benchmark`` (its
registration: rows of ``eval.data``, scored by :mod:`ifdistill.ifeval`), ``schema`` (its results.json and
samples.jsonl). Importing this package imports nothing heavy.
"""
