"""ifdistill's Hydra configs (shipped as package ``ifdistill.conf``; see pyproject.toml).

Importing it registers what the YAML files use, so Hydra apps and tests that compose from this folder
(``pkg://ifdistill.conf`` or its path) find it: the OmegaConf resolvers, and the schemas of the plain-data
sections as Hydra's ``schema/<section>`` configs (:func:`ifdistill.config.store_schemas`), which those
sections' YAML extends, and the settings of the ``_target_`` nodes that have a dataclass of their own
(:func:`ifdistill.config.store_target_schema`: the checkpoint-eval callback, the SLURM runner, the
distillation methods, the training strategies). Each of
these modules imports nothing heavy.
"""

import ifdistill.config  # noqa: F401  (resolvers; the model and paths schemas)
import ifdistill.runs.sweeps  # noqa: F401  (the sweep job, run and launch-folder name resolvers)
import ifdistill.evaluator.settings  # noqa: F401  (the eval schema)
import ifdistill.train.schemas  # noqa: F401  (the run, optim, datamodule and peft schemas)
import ifdistill.callbacks.checkpoint_eval_settings  # noqa: F401  (schema/checkpoint_eval)
import ifdistill.launchers.slurm_eval  # noqa: F401  (schema/slurm_runner)
import ifdistill.methods.distill.settings  # noqa: F401  (schema/method_distill)
import ifdistill.methods.onpolicy_distill.settings  # noqa: F401  (schema/method_onpolicy_distill)
import ifdistill.train.strategy_settings  # noqa: F401  (schema/zero2, zero3, fsdp2)
