"""An LLM judge as one more benchmark behind the evaluator's one path (``eval=judge``).

``verdicts`` (strict parsing of a judge's text, the both-orders pairwise rule, win rate, mean score and
their standard errors: pure functions), ``run`` (the judged benchmark: the checkpoint's responses from
the same generation pass as IFEval's, the judge model served by the evaluator's own backend, identity,
results.json and samples.jsonl). Importing this package imports nothing heavy.
"""
