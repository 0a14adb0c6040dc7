"""ifdistill's Hydra configs (shipped as package ``ifdistill.conf``; see pyproject.toml).

Importing it registers the OmegaConf resolvers the YAML files use, so Hydra apps and tests that
compose from this folder (``pkg://ifdistill.conf`` or its path) resolve them.
"""

import ifdistill.config  # noqa: F401  (registers resolvers)
