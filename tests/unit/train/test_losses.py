"""The loss/metric functions (training's and the tests' reference ones) against values computed by hand
(logits = log of chosen probabilities), and the fused objective against the references."""

from __future__ import annotations

import math

import pytest
import torch

from ifdistill.train import losses as L

from tests.unit.train import reference_losses as R

IGN = L.IGNORE_INDEX


def logits_of(*probs):
    """Logits whose softmax is exactly the given (unnormalised) weights."""
    return torch.log(torch.tensor(probs, dtype=torch.float64)).float()


def test_cross_entropy_accuracy_entropy_by_hand():
    logits = torch.stack([logits_of(1, 2, 5), logits_of(3, 1, 4), torch.tensor([50.0, -50.0, 0.0])])
    labels = torch.tensor([2, 0, IGN])  # the third position is ignored, however extreme its logits
    ce = (math.log(8 / 5) + math.log(8 / 3)) / 2
    assert R.cross_entropy(logits, labels).item() == pytest.approx(ce, rel=1e-6)
    assert R.cross_entropy(logits, labels, reduction="sum").item() == pytest.approx(2 * ce, rel=1e-6)
    assert R.cross_entropy(logits, labels, reduction="none")[2].item() == 0.0
    assert R.token_accuracy(logits, labels).item() == 0.5  # argmax 2 == 2, argmax 2 != 0
    h1 = -sum(p * math.log(p) for p in (1 / 8, 2 / 8, 5 / 8))
    h2 = -sum(p * math.log(p) for p in (3 / 8, 1 / 8, 4 / 8))
    assert R.token_entropy(logits, labels).item() == pytest.approx((h1 + h2) / 2, rel=1e-6)
    stats = L.token_stats(logits, labels)
    assert stats["count"].item() == 2
    assert stats["nll"].item() == pytest.approx(2 * ce, rel=1e-6)
    assert stats["correct"].item() == 1
    assert stats["entropy"].item() == pytest.approx(h1 + h2, rel=1e-6)


def test_all_ignored_gives_zero_sum_and_no_nan_mean():
    logits = torch.randn(3, 5)
    labels = torch.full((3,), IGN)
    assert R.cross_entropy(logits, labels).item() == 0.0
    assert L.token_stats(logits, labels)["count"].item() == 0


def test_causal_shift_and_supervised_positions():
    # Unshifted labels: the logits at t predict the token at t + 1.
    labels = torch.tensor([[IGN, 5, 6, IGN], [IGN, IGN, 7, 8]])
    rows, cols = L.supervised_positions(labels)
    assert rows.tolist() == [0, 0, 1, 1] and cols.tolist() == [0, 1, 1, 2]
    assert labels[rows, cols + 1].tolist() == [5, 6, 7, 8]
    logits = torch.randn(2, 4, 10)
    sl, tl = R.shift_for_causal_lm(logits, labels)
    assert sl.shape == (2, 3, 10) and tl.tolist() == [[5, 6, IGN], [IGN, 7, 8]]
    # CE over the shifted full logits equals CE over the selected positions.
    full = R.cross_entropy(sl, tl, reduction="sum")
    picked = R.cross_entropy(logits[rows, cols], labels[rows, cols + 1], reduction="sum")
    assert torch.allclose(full, picked)


P, Q = (0.5, 0.5), (0.25, 0.75)  # teacher p, student q


def kl(a, b):
    return sum(x * math.log(x / y) for x, y in zip(a, b))


@pytest.mark.parametrize("kind,expected", [
    ("forward", kl(P, Q)),          # KL(teacher || student) = 0.5 log(4/3)
    ("reverse", kl(Q, P)),          # KL(student || teacher)
    ("jsd", 0.5 * kl(P, (0.375, 0.625)) + 0.5 * kl(Q, (0.375, 0.625))),
])
def test_divergences_by_hand(kind, expected):
    t, s = logits_of(*P)[None], logits_of(*Q)[None]
    labels = torch.tensor([0])
    got = L.divergence(s, t, labels, kind=kind).item()
    assert got == pytest.approx(expected, rel=1e-5)


def test_generalised_jsd_weight():
    beta = 0.2
    m = tuple(beta * p + (1 - beta) * q for p, q in zip(P, Q))
    expected = beta * kl(P, m) + (1 - beta) * kl(Q, m)
    got = L.divergence(logits_of(*Q)[None], logits_of(*P)[None], torch.tensor([0]), kind="jsd", beta=beta).item()
    assert got == pytest.approx(expected, rel=1e-5)
    with pytest.raises(ValueError, match="beta"):
        L.divergence(logits_of(*Q)[None], logits_of(*P)[None], torch.tensor([0]), kind="jsd", beta=0.0)


def test_temperature_softens_and_scales_by_t_squared():
    # softmax(log p / 2) is proportional to sqrt(p).
    def soft(ps):
        r = [math.sqrt(x) for x in ps]
        return tuple(x / sum(r) for x in r)

    expected = 4 * kl(soft(P), soft(Q))
    got = L.divergence(logits_of(*Q)[None], logits_of(*P)[None], torch.tensor([1]), temperature=2.0).item()
    assert got == pytest.approx(expected, rel=1e-5)


def test_topk_compares_on_the_teachers_support_renormalised():
    t = logits_of(0.4, 0.3, 0.2, 0.1)[None]
    s = logits_of(0.1, 0.2, 0.3, 0.4)[None]
    pt, ps = (4 / 7, 3 / 7), (1 / 3, 2 / 3)
    got = L.divergence(s, t, torch.tensor([0]), kind="forward", topk=2).item()
    assert got == pytest.approx(kl(pt, ps), rel=1e-5)
    got = L.divergence(s, t, torch.tensor([0]), kind="reverse", topk=2).item()
    assert got == pytest.approx(kl(ps, pt), rel=1e-5)


def test_divergence_honours_ignore_index_and_means_over_counted_tokens():
    t = torch.stack([logits_of(*P), logits_of(*P), logits_of(0.99, 0.01)])
    s = torch.stack([logits_of(*Q), logits_of(*P), logits_of(0.01, 0.99)])
    labels = torch.tensor([0, 1, IGN])
    assert L.divergence(s, t, labels).item() == pytest.approx(kl(P, Q) / 2, rel=1e-5)
    assert L.divergence(s, t, labels, reduction="sum").item() == pytest.approx(kl(P, Q), rel=1e-5)


@pytest.mark.parametrize("kind", L.DIVERGENCES)
def test_divergence_of_identical_distributions_is_zero(kind):
    x = torch.randn(6, 11)
    assert L.divergence(x, x.clone(), torch.zeros(6, dtype=torch.long), kind=kind).abs().max().item() < 1e-6


def test_distillation_loss_mixes_kd_and_ce():
    t, s = torch.randn(4, 7), torch.randn(4, 7)
    labels = torch.tensor([1, 2, IGN, 3])
    kd = L.divergence(s, t, labels)
    ce = R.cross_entropy(s, labels)
    assert torch.allclose(R.distillation_loss(s, t, labels, kd_ratio=0.3), 0.3 * kd + 0.7 * ce)
    assert torch.equal(R.distillation_loss(s, t, labels, kd_ratio=0.0), ce)
    with pytest.raises(ValueError):
        R.distillation_loss(s, t, labels, kd_ratio=1.5)


def test_teacher_gradient_is_not_needed_but_student_gets_one():
    s = torch.randn(3, 5, requires_grad=True)
    t = torch.randn(3, 5)
    L.divergence(s, t, torch.tensor([0, 1, 2])).backward()
    assert s.grad is not None and s.grad.abs().sum() > 0


@pytest.mark.parametrize("kd_ratio", [None, 0.0, 0.3, 1.0])
def test_fused_objective_equals_the_reference_functions_in_value_and_gradient(kd_ratio):
    torch.manual_seed(0)
    student = (3 * torch.randn(7, 11)).requires_grad_()
    teacher = 3 * torch.randn(7, 11)
    labels = torch.tensor([3, 0, IGN, 10, 5, IGN, 1])
    ref_s = student.detach().clone().requires_grad_()
    if kd_ratio is None:  # SFT: cross-entropy sum + token stats
        loss, stats = L.ce_kd_with_stats(student, labels)
        ref = R.cross_entropy(ref_s, labels, reduction="sum")
    else:
        loss, stats = L.ce_kd_with_stats(student, labels, teacher, kd_ratio=kd_ratio)
        ref = R.distillation_loss(ref_s, teacher, labels, kd_ratio=kd_ratio, reduction="sum")
        assert stats["kd"].item() == pytest.approx(L.divergence(student, teacher, labels, reduction="sum").item(), rel=1e-5)
        assert stats["ce"] is stats["nll"]
        for key, value in L.token_stats(teacher, labels).items():
            assert stats["teacher_" + key].item() == pytest.approx(value.item(), rel=1e-5), key
    for key, value in L.token_stats(student.detach(), labels).items():
        assert stats[key].item() == pytest.approx(value.item(), rel=1e-5), key
    assert loss.item() == pytest.approx(ref.item(), rel=1e-5)
    (2.5 * loss).backward()
    (2.5 * ref).backward()
    assert torch.allclose(student.grad, ref_s.grad, atol=1e-6)
    assert student.grad[2].abs().max() == 0 and student.grad[5].abs().max() == 0  # ignored positions
