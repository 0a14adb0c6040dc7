"""The benchmarks of the evaluator, one folder each, and the instruction-checking base two of them share.

- ``ifeval/``, ``ifbench/``, ``judge/``, ``lmeval/``: each a benchmark's own folder: its registration
  (``benchmark.py``, found by :mod:`ifdistill.benchmarks.registry`), its own config section where it has one
  (``settings.py``: ``SECTIONS``), and its scorer or checkers.
- ``checking/``: what IFEval's and IFBench's checkers share (the checker base class, text measurements),
  the strict/loose scorer and statistics that judge both, the registration they both extend and
  ``ifdistill-score``. It imports no benchmark's folder; it finds their checkers through the registry.

No benchmark's folder imports another's (tests/unit/test_import_graph.py), and no module outside these
folders names a benchmark (tests/unit/test_benchmark_names.py). Importing this package imports nothing.
"""
