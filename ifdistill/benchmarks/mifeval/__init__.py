"""M-IFEval (Lightblue; Dussolle et al., 2025): IFEval's design in Spanish, French and Japanese, as three
benchmarks of the evaluator (``mifeval_es``, ``mifeval_fr``, ``mifeval_ja``).

``benchmark`` (the three registrations), ``spanish`` / ``french`` / ``japanese`` (each language's id ->
checker table; ``common``: relation words, counted instructions, IFEval's checkers reused) and ``tools``
(spaCy, Punkt's French model, janome, ja_sentence_segmenter). The checkers follow the behavioural
specification shipped with the data (``../shared/data/mifeval/README.md``); the shared scorer
(:mod:`ifdistill.benchmarks.instruction_following`) judges them strict and loose, as the reference does. Importing this
package loads none of the language tools, and nothing downloads.
"""
