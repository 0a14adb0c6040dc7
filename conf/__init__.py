"""ifdistill's Hydra configs (shipped as package ``ifdistill.conf``; see pyproject.toml).

Importing it registers what the YAML files use, so Hydra apps and tests that compose from this folder
(``pkg://ifdistill.conf`` or its path) find it: the OmegaConf resolvers, and the schemas of the plain-data
sections as Hydra's ``schema/<section>`` configs (:func:`ifdistill.config.store_schemas`), which those
sections' YAML extends.
"""

import ifdistill.config  # noqa: F401  (resolvers; the model and paths schemas)
import ifdistill.evaluator.settings  # noqa: F401  (the eval schema)
import ifdistill.train.schemas  # noqa: F401  (the run, optim, datamodule and peft schemas)
