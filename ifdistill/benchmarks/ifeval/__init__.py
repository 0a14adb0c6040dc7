"""IFEval: google's 25 instruction checkers as a benchmark of the evaluator (``benchmark: ifeval``, the default).

``benchmark`` (its registration), ``instruction_ids`` (its table of instruction id -> checker) and the checkers
(``instructions_*``). They build on the shared instruction-checking base (:mod:`ifdistill.benchmarks.instruction_following`),
which also holds the scorer that judges them strict and loose and the statistics. Importing this package
is cheap and offline: nltk and langdetect are loaded at first use.
"""
