"""How far a bf16-mixed loss may lie from the float32 one on the same batch, derived from bf16's precision.

bfloat16 keeps an 8-bit significand (7 stored bits + the implicit one), so one rounding changes a value
by at most ``u = 2^-8`` of itself. Under ``bf16-mixed`` (``torch.autocast``) the weights stay float32 and
every matmul reads its operands rounded to bf16, accumulates in float32 and returns bf16; the residual
stream, the norms and the loss stay float32. A logit is therefore the float32 result perturbed by the
roundings on its path: per decoder layer about 12 (attention: normed input, q/k/v outputs, scores,
probabilities, attention output, o_proj output; MLP: normed input, gate and up outputs, their product,
down output), plus 2 for the LM head's input and weight. Treating the roundings as independent
relative perturbations (the probabilistic model of ``tests.support.sum_relative_error``, constant
``λ = 4``), a logit's error is at most ``ε |z|max`` with ``ε = λ sqrt(12 L + 2) u``.

The token-mean cross entropy ``logsumexp(z) - z_y`` moves by at most ``max_i |δz_i - δz_y| <= 2 ε |z|max``;
a KL term adds the same again for the teacher's logits (bounded by the larger of the two maxima), so a
distillation loss ``(1 - r) CE + r KL`` stays within ``4 ε |z|max``. On the tiny model (4 layers,
``|z|max`` ~1.6) the SFT bound is ~0.35 nats per token (measured on CPU autocast: 3e-4), below the ~0.7
nats that an off-by-one target position changes its loss by -- the tests assert that control too.
"""

from __future__ import annotations

import math

from tests.support import ROUNDOFF_LAMBDA

BF16_UNIT_ROUNDOFF = 2.0 ** -8


def bf16_relative_error(num_layers: int) -> float:
    """``ε``: the relative error of a logit computed under bf16 autocast (see the module docstring)."""
    return ROUNDOFF_LAMBDA * math.sqrt(12 * num_layers + 2) * BF16_UNIT_ROUNDOFF


def bf16_mean_loss_tolerance(num_layers: int, logit_absmax: float, *, kd: bool) -> float:
    """Largest ``|token-mean loss (bf16-mixed) - token-mean loss (float32)|`` on one batch."""
    return (4.0 if kd else 2.0) * bf16_relative_error(num_layers) * logit_absmax
