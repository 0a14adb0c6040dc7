"""Training (``ifdistill-train``): SFT and ICL logit distillation as Lightning modules, and what any
training method is to the rest of the package (:mod:`ifdistill.train.method`; methods that are units
of their own live in :mod:`ifdistill.methods`).

Importing the package registers the schemas of the config sections it owns (``run``, ``optim``,
``datamodule``, ``peft``) with :func:`ifdistill.config.validate`; everything heavy is imported lazily.
"""

from ifdistill.train import schemas as _schemas  # noqa: F401  (registers config schemas)
