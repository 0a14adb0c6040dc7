"""Training (``ifdistill-train``), whatever the method: the run, the datamodule, losses, checkpointing,
strategies, and what any training method is to the rest of the package (:mod:`ifdistill.train.method`;
the methods themselves live in :mod:`ifdistill.methods`).

Importing the package registers the schemas of the config sections it owns (``run``, ``optim``,
``datamodule``, ``peft``) with :func:`ifdistill.config.validate`; everything heavy is imported lazily.
"""

from ifdistill.train import schemas as _schemas  # noqa: F401  (registers config schemas)
