"""ifdistill's Hydra configs (shipped as package ``ifdistill.conf``; see pyproject.toml).

Importing it registers what the YAML files use, so Hydra apps and tests that compose from this folder
(``pkg://ifdistill.conf`` or its path) find it: the OmegaConf resolvers, and the schemas of the plain-data
sections as Hydra's ``schema/<section>`` configs (:func:`ifdistill.config.store_schemas`), which those
sections' YAML extends, and the settings of the ``_target_`` nodes that have a dataclass of their own
(:func:`ifdistill.config.store_target_schema`: the checkpoint-eval callback, the SLURM runner, the
training strategies, and every method, found by its folder: :func:`ifdistill.methods.store_settings_schemas`).
None of it imports anything heavy.
"""

import ifdistill.config  # noqa: F401  (resolvers; the model and paths schemas)
import ifdistill.runs.sweeps  # noqa: F401  (the sweep job, run and launch-folder name resolvers)
import ifdistill.evaluator.settings  # noqa: F401  (the eval schema)
import ifdistill.train.schemas  # noqa: F401  (the run, optim, datamodule and peft schemas)
import ifdistill.callbacks.checkpoint_eval_settings  # noqa: F401  (schema/checkpoint_eval)
import ifdistill.launchers.slurm_eval  # noqa: F401  (schema/slurm_runner)
import ifdistill.train.strategy_settings  # noqa: F401  (schema/zero2, zero3, fsdp2)
from ifdistill.methods import store_settings_schemas

store_settings_schemas()  # schema/method_<folder> of each folder of ifdistill/methods/ that is a method
