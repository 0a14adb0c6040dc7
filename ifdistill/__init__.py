"""ifdistill: SFT, replay mixing and ICL logit distillation, measured with one IFEval evaluator.

Importing this package is cheap and offline: no torch, no network, no data loading. Subpackages:

- ``ifdistill.benchmarks`` one folder per benchmark (IFEval, IFBench, the judge, lm-eval) and the
                           instruction-checking base IFEval and IFBench share (``ifdistill-score``)
- ``ifdistill.data``       sources, synthetic data, chat rendering with loss masks, replay mixing
- ``ifdistill.evaluator``  the one evaluator (vLLM / HF backends, ``ifdistill-eval``)
- ``ifdistill.train``      Lightning modules, strategies, ``ifdistill-train``
- ``ifdistill.callbacks``  Lightning callbacks (the folder ``callbacks/`` at the top of the repo)
- ``ifdistill.launchers``  local and SLURM launch helpers (the folder ``launchers/``)
- ``ifdistill.models``     model loading and the embedded tiny model
"""

__version__ = "0.1.0"
