"""IFBench as a benchmark of the evaluator (``benchmark: ifbench``): ``benchmark`` (its registration; the
rows are scored by IFEval's protocol with IFBench's checkers, :mod:`ifdistill.ifbench`)."""
