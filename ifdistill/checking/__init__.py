"""What IFEval's and IFBench's checkers share: the checker base class with its kwargs validation
(:mod:`.instruction_base`) and the text measurements (:mod:`.text_analysis`: sentences, words,
capital words, language, with :mod:`.langdetect_fast`).

It sits below both benchmark packages: :mod:`ifdistill.ifbench` builds its checkers on it, and the
scorer in :mod:`ifdistill.ifeval` builds on it and merges IFBench's registry, so neither benchmark
package imports the other in both directions. Importing it loads neither nltk nor langdetect.
"""
