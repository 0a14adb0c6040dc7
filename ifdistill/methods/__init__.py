"""Training methods that are units: one folder each (module, batch construction, config checks, teacher
handling) and one ``conf/method/<name>.yaml``. The contract a method meets is
:mod:`ifdistill.train.method`; SFT (:mod:`ifdistill.methods.sft`) holds the base class every method
subclasses; off-policy ICL distillation is :mod:`ifdistill.methods.distill`.
"""
