"""The benchmarks of the evaluator, one folder each, their interface and registry, and the
instruction-following base two of them share.

- ``base.py``: the :class:`~ifdistill.benchmarks.base.Benchmark` interface; ``registry.py``: registration
  by name, the discovery of the folders, the lookups every consumer of a result makes. Both import no
  benchmark's folder and nothing of the evaluator.
- ``ifeval/``, ``ifbench/``, ``judge/``, ``lmeval/``: each a benchmark's own folder: its registration
  (``benchmark.py``, found by :mod:`ifdistill.benchmarks.registry`), its own config section where it has one
  (``settings.py``), and its scorer or checkers.
- ``instruction_following/``: what IFEval's and IFBench's checkers share (the checker base class, text
  measurements), the strict/loose scorer and statistics that judge both and the registration they both
  extend. It imports no benchmark's folder; it finds their checkers through the registry.

No benchmark's folder imports another's (tests/unit/test_import_graph.py), and no module outside these
folders names a benchmark (tests/unit/test_benchmark_names.py). Importing this package imports nothing.
"""
