"""``ifdistill-eval``: one console script for the evaluator and the commands built on it.

- ``ifdistill-eval [overrides]``: evaluate one model (:mod:`ifdistill.evaluator.cli`, the program every
  checkpoint evaluation runs);
- ``ifdistill-eval backfill run_dir=...``: evaluate a training run's checkpoints that have no result
  (:mod:`ifdistill.callbacks.backfill`);
- ``ifdistill-eval rerun <eval dir> [KEY=VALUE ...]``: evaluate again with a finished evaluation's recorded
  configuration (:mod:`ifdistill.evaluator.rerun`);
- ``ifdistill-eval serve --spool=DIR``: one long-lived evaluator for a training run's checkpoints
  (:mod:`ifdistill.evaluator.serve`; the persistent engine starts it).

The dispatch lives here, above both packages, so the evaluator never imports the callbacks that start it.
"""

from __future__ import annotations

import sys


def main() -> None:
    from ifdistill.startup_heap import pause_collector

    pause_collector()  # until the first engine or model loads (ifdistill.startup_heap)
    if sys.argv[1:2] == ["backfill"]:
        from ifdistill.callbacks.backfill import main as backfill_main

        del sys.argv[1]
        sys.exit(backfill_main())
    if sys.argv[1:2] == ["rerun"]:
        import os

        from ifdistill.evaluator.launch import clean_environment
        from ifdistill.evaluator.rerun import main as rerun_main

        clean_environment(os.environ)
        sys.exit(rerun_main(sys.argv[2:]))
    if sys.argv[1:2] == ["serve"]:
        import os

        from ifdistill.evaluator.launch import clean_environment
        from ifdistill.evaluator.serve import main as serve_main

        clean_environment(os.environ)
        sys.exit(serve_main(sys.argv[2:]))
    from ifdistill.evaluator.cli import main as evaluate_main

    evaluate_main()


if __name__ == "__main__":
    main()
