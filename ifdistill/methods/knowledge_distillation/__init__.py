"""What both distillation methods share: the knowledge-distillation base, not a method of its own (no
``HOOKS``, no YAML).

- :mod:`.settings`: :class:`~.settings.KDSettings`, the settings of the objective
  ``kd_ratio * D(teacher, student) + (1 - kd_ratio) * CE`` (the divergence, its weight, temperature and
  top-k, which teacher) and their checks;
- :mod:`.hooks`: :class:`~.hooks.KDHooks`, the data layer's ``k`` and ``demos`` keys and the teacher views;
- :mod:`.module`: :class:`~.module.KDModule`, the teacher (frozen, or the live student under ``no_grad``),
  its logits at the completion positions of both views and the objective on them.

Off-policy ICL distillation (:mod:`ifdistill.methods.distill`: a separate teacher model, the teacher cache)
and on-policy ICL distillation (:mod:`ifdistill.methods.onpolicy_distill`: the student's samples, an EMA
teacher, the sampled estimator) each extend the three and override only what differs.
"""
