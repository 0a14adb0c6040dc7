"""lm-evaluation-harness tasks through the evaluator's own engine (``eval=lmeval``).

``model`` (:class:`~ifdistill.benchmarks.lmeval.model.EngineLM`: lm-eval's LM interface on the vLLM
or HF backend), ``run`` (task loading, rendering and hashing before the engine starts; lm-eval's
``evaluate``; publishing), ``output`` (results.json metrics and samples.jsonl rows). Importing this
package imports nothing: lm-eval loads when an lm-eval evaluation is prepared.
"""
