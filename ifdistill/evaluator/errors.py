"""The evaluator's own errors: each says what is wrong and what to do, before any expensive start-up.

All of them derive from :class:`EvaluatorError`, so the CLI can print the message without a stack
trace and exit non-zero, and the checkpoint callback sees a short, readable tail in its log.
"""

from __future__ import annotations


class EvaluatorError(RuntimeError):
    """Base class: a problem with the inputs of an evaluation (not a bug in the evaluator)."""


def input_errors() -> tuple[type[Exception], ...]:
    """What an evaluation reports as bad input, exit code 2, whether a fresh ``ifdistill-eval`` process or
    the persistent server runs it: the evaluator's own errors, a bad config and bad data (imported
    here, on use, so that this module stays free of imports)."""
    from ifdistill.config import ConfigError
    from ifdistill.data.records import DataError

    return EvaluatorError, ConfigError, DataError


class ModelNotFoundError(EvaluatorError):
    """The model, adapter or export directory does not exist or holds no loadable model."""


class CorruptExportError(EvaluatorError):
    """A training export's weight file is missing, unrecorded or differs from the sha256 in export.json."""


class NonFiniteWeightsError(CorruptExportError):
    """A weight tensor holds NaN or infinity (a diverged run, or a tool that wrote one): never scored."""


class AdapterMismatchError(EvaluatorError):
    """A LoRA adapter's modules or shapes do not fit the base model it is applied to."""


class ChatTemplateError(EvaluatorError):
    """The tokenizer has no chat template and none is configured."""


class EmptyDatasetError(EvaluatorError):
    """The evaluation data (after filtering) holds no prompt."""


class PromptTooLongError(EvaluatorError):
    """A rendered prompt does not fit the model's context (nothing could be generated)."""


class OutputExistsError(EvaluatorError):
    """The output directory already holds a result and ``overwrite`` is false."""
