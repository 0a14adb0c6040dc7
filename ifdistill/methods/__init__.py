"""Training methods that are units: one folder each (module, batch construction, config checks, teacher
handling) and one ``conf/method/<name>.yaml``. The contract a method meets is
:mod:`ifdistill.train.method`; SFT (:mod:`ifdistill.train.sft_module`, the base class every method
subclasses) and off-policy ICL distillation (:mod:`ifdistill.train.distill_module`) keep their modules
where their ``_target_`` names them, so the config hashes of their runs stay what they were.
"""
