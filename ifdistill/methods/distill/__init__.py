"""Off-policy ICL logit distillation: the module, shared demonstrations, the teacher pass and its cache."""
