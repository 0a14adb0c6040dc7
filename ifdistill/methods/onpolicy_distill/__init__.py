"""On-policy ICL distillation (``method=onpolicy_distill``): :mod:`.module` is the method."""
