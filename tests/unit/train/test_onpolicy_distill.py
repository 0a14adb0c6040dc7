"""method=onpolicy_distill on the tiny model and its divergences as tensor functions."""

from __future__ import annotations

import math

import pytest
import torch
from omegaconf import OmegaConf

from ifdistill.data.collate import IclCollator
from ifdistill.methods.onpolicy_distill.divergences import token_divergence
from ifdistill.methods.onpolicy_distill.module import OnPolicyDistillModule
from ifdistill.methods.onpolicy_distill.sampling import Sample, cut_at_stop, with_samples
from ifdistill.methods.distill.module import ICLDistillModule
from ifdistill.train.losses import IGNORE_INDEX

from tests.unit.train.conftest import LORA, TINY, k0_items, perturb_lora

FAST = {"max_new_tokens": 6}


def _grads(module):
    return {n: p.grad.clone() for n, p in module.lm.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("kl", ["forward", "reverse"])
def test_lambda_zero_is_off_policy_distillation(icl_items, tiny_tokenizer, kl):
    off = ICLDistillModule(TINY, LORA, kd_ratio=0.5, kl=kl)
    perturb_lora(off)
    on = OnPolicyDistillModule(TINY, LORA, kd_ratio=0.5, kl=kl, lmbda=0.0, generation=FAST)
    on.lm.load_state_dict(off.lm.state_dict())
    batch = IclCollator(tiny_tokenizer.pad_token_id)(icl_items)
    lo, so = off.objective(batch)
    lo.backward()
    ln, sn = on.objective(batch)
    ln.backward()
    # the same batch through the same objective function: equal, not close
    assert torch.equal(lo, ln) and sn["gen_rows"] == 0.0
    assert so["kd"].item() > 1e-3 and so["count"].item() == sn["count"].item() > 0
    go, gn = _grads(off), _grads(on)
    assert go.keys() == gn.keys() and go
    assert all(torch.equal(go[k], gn[k]) for k in go)


@pytest.mark.parametrize("kl", ["reverse", "sampled"])
def test_a_teacher_equal_to_the_student_gives_zero_loss_and_gradient(icl_items, tiny_tokenizer, kl):
    """k = 0, no own demonstration, the live student as teacher, every example on a student sample."""
    module = OnPolicyDistillModule(TINY, LORA, kd_ratio=1.0, kl=kl, lmbda=1.0, teacher="self_stopgrad",
                                   generation=FAST)
    perturb_lora(module)
    batch = IclCollator(tiny_tokenizer.pad_token_id)(k0_items(icl_items))
    loss, stats = module.objective(batch)
    loss.backward()
    assert stats["gen_rows"] == len(icl_items) and 0 < stats["gen_tokens"] <= len(icl_items) * FAST["max_new_tokens"]
    grads = _grads(module)
    # Scale of a real gradient on the same tokens: the same module's CE on the gold completions.
    module.zero_grad()
    module.lmbda, module.kd["kd_ratio"] = 0.0, 0.0
    module.objective(batch)[0].backward()
    scale = max(g.abs().max().item() for g in _grads(module).values())
    # Student and teacher are the same float32 forward (no dropout): log p_s - log p_t is 0 up to the
    # rounding of two log-softmaxes (~1e-6 of their magnitude), which bounds loss and gradient alike.
    assert abs(stats["kd"].item()) <= 1e-5 * stats["count"].item() and abs(loss.item()) <= 1e-5 * stats["count"].item()
    assert max(g.abs().max().item() for g in grads.values()) <= 1e-5 * scale


def _formula(kind: str, s: torch.Tensor, t: torch.Tensor, y: torch.Tensor, beta: float) -> torch.Tensor:
    """The written per-token formulas, in float64 from probabilities (not log-softmax)."""
    ps, pt = torch.softmax(s, -1), torch.softmax(t, -1)
    if kind == "forward":
        return (pt * (pt.log() - ps.log())).sum(-1)
    if kind == "reverse":
        return (ps * (ps.log() - pt.log())).sum(-1)
    if kind == "jsd":
        m = beta * pt + (1 - beta) * ps
        return beta * (pt * (pt.log() - m.log())).sum(-1) + (1 - beta) * (ps * (ps.log() - m.log())).sum(-1)
    log_s, log_t = ps.log().gather(-1, y[:, None])[:, 0], pt.log().gather(-1, y[:, None])[:, 0]
    return (log_s - log_t).detach() * log_s  # the score-function surrogate of the sampled estimator


@pytest.mark.parametrize("kind", ["forward", "reverse", "jsd", "sampled"])
def test_each_divergence_gradient_equals_autograd_of_its_formula(kind):
    g = torch.Generator().manual_seed(3)
    n, v, beta = 9, 13, 0.3
    s, t = torch.randn(n, v, generator=g, dtype=torch.float64) * 2, torch.randn(n, v, generator=g, dtype=torch.float64) * 2
    y = torch.randint(0, v, (n,), generator=g)
    labels = y.clone()
    labels[[2, 5]] = IGNORE_INDEX  # ignored positions: no value, no gradient
    keep = labels != IGNORE_INDEX
    s32 = s.float().requires_grad_(True)
    loss, value = token_divergence(s32, t.float(), labels, kind=kind, beta=beta, reduction="mean")
    loss.backward()
    s64 = s.clone().requires_grad_(True)
    expected = _formula(kind, s64, t, y, beta)[keep].sum() / keep.sum()
    expected.backward()
    # the implementation runs in float32: each term carries ~V float32 roundings (eps 1.2e-7) of O(1)
    # quantities, so 1e-5 of the gradient's scale bounds it; a wrong formula is off by O(1)
    atol = 1e-5 * s64.grad.abs().max().item()
    assert torch.allclose(s32.grad.double(), s64.grad, rtol=0, atol=atol)
    assert s32.grad[~keep].abs().max().item() == 0.0
    if kind != "sampled":
        assert value.item() == pytest.approx(expected.item(), rel=1e-5)


def test_the_sampled_estimator_averages_to_the_full_reverse_kl():
    g = torch.Generator().manual_seed(7)
    n, v, m = 4, 17, 40_000
    s, t = torch.randn(n, v, generator=g), torch.randn(n, v, generator=g)
    ps = torch.softmax(s.double(), -1)
    draws = torch.multinomial(ps, m, replacement=True, generator=g)  # y ~ p_s, m per position
    rows = torch.arange(n).repeat_interleave(m)
    _, estimate = token_divergence(s[rows], t[rows], draws.flatten(), kind="sampled", reduction="none")
    mean = estimate.double().view(n, m).mean(1)
    log_ratio = torch.log_softmax(s.double(), -1) - torch.log_softmax(t.double(), -1)
    kl = (ps * log_ratio).sum(-1)
    sd = ((ps * log_ratio ** 2).sum(-1) - kl ** 2).sqrt()  # the exact std of one sample's estimate
    # the mean of m draws is within 5 standard errors of its expectation (p > 0.9999 per position, fixed seed)
    assert torch.all((mean - kl).abs() <= 5 * sd / math.sqrt(m)), (mean, kl)


def test_samples_replace_the_completion_in_both_views(icl_items, tiny_tokenizer):
    pad = tiny_tokenizer.pad_token_id
    batch = IclCollator(pad)(icl_items)
    sample = Sample([11, 12, 13], True)
    out = with_samples(batch, {1: sample}, pad)
    assert out["is_sampled"].tolist() == [False, True, False, False]
    for key in ("input_ids", "teacher_input_ids", "student_positions", "teacher_positions"):
        for r in (0, 2, 3):  # gold rows: token for token, up to their own padding
            n = int(batch["completion_valid"][r].sum()) if "positions" in key else int(
                batch["attention_mask" if key == "input_ids" else "teacher_attention_mask"][r].sum())
            assert torch.equal(out[key][r, :n], batch[key][r, :n]), (key, r)
    s0, t0 = int(batch["student_positions"][1, 0]), int(batch["teacher_positions"][1, 0])
    assert out["input_ids"][1, :s0 + 3].tolist() == batch["input_ids"][1, :s0].tolist() + [11, 12, 13]
    assert out["teacher_input_ids"][1, :t0 + 3].tolist() == batch["teacher_input_ids"][1, :t0].tolist() + [11, 12, 13]
    assert out["student_positions"][1][out["completion_valid"][1]].tolist() == [s0, s0 + 1, s0 + 2]
    assert cut_at_stop([5, 9, 7, 9], [9]) == Sample([5, 9], True) and cut_at_stop([5, 7], [9]) == Sample([5, 7], False)


def test_greedy_samples_are_the_students_argmax_continuation(icl_items, tiny_tokenizer):
    module = OnPolicyDistillModule(TINY, LORA, lmbda=1.0, generation={"max_new_tokens": 5, "greedy": True})
    perturb_lora(module)
    batch = IclCollator(tiny_tokenizer.pad_token_id)(icl_items[:2])
    prompt = batch["input_ids"][0, :int(batch["student_positions"][0, 0])].tolist()
    (sample,) = module.sampler([prompt])
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(len(sample.tokens)):
            logits = module.lm.model(input_ids=torch.tensor([ids])).logits[0, -1]
            ids.append(int(logits.argmax()))
    assert sample.tokens == ids[len(prompt):]
    assert sample.ended == (sample.tokens[-1] in module.stop_ids) and (sample.ended or len(sample.tokens) == 5)


def test_settings_the_method_refuses():
    with pytest.raises(ValueError, match="lmbda"):
        OnPolicyDistillModule(TINY, LORA, lmbda=1.5)
    with pytest.raises(ValueError, match="method.kl"):
        OnPolicyDistillModule(TINY, LORA, kl="tv")
    with pytest.raises(ValueError, match="on_eos_collapse"):
        OnPolicyDistillModule(TINY, LORA, on_eos_collapse="panic")
    cfg = OmegaConf.create({"trainer": {"strategy": {"_target_": "lightning.pytorch.strategies.DeepSpeedStrategy"}}})
    problems = OnPolicyDistillModule.config_problems({"teacher_source": "cache", "k": 2, "demos": "shared"}, cfg)
    assert len(problems) == 3 and "online" in problems[0] and "per_example" in problems[1] and "DeepSpeed" in problems[2]
    two = OmegaConf.create({"trainer": {"devices": 2}})
    assert OnPolicyDistillModule.config_problems({"engine": "hf"}, two) == []
    assert "trainer.devices=1" in OnPolicyDistillModule.config_problems({"engine": "vllm"}, two)[0]


def test_normalising_after_backward_trains_as_the_precomputed_token_count():
    """One SGD step of 2 x 2 accumulated micro-batches: the on-policy method (lmbda = 0, its gradients
    divided by the step's tokens after the last backward) moves the weights as off-policy distillation
    (each micro-batch's loss divided by the datamodule's precomputed step tokens)."""
    import lightning.pytorch as pl

    from ifdistill.train.datamodule import TrainDataModule
    from tests.support import sgd_weight_tolerance
    from tests.unit.train.conftest import resolved, synthetic_data

    sgd = {"name": "sgd", "lr": 0.5, "schedule": "constant"}

    def fit(cls, **kw):
        dm = TrainDataModule(resolved(synthetic_data(24), k=2, demos="per_example"), TINY, micro_batch_size=2)
        torch.manual_seed(0)
        module = cls(TINY, LORA, sgd, kd_ratio=0.5, **kw)
        perturb_lora(module)
        start = {n: p.detach().clone() for n, p in module.lm.named_parameters() if p.requires_grad}
        pl.Trainer(accelerator="cpu", devices=1, max_steps=1, accumulate_grad_batches=2, logger=False,
                   enable_checkpointing=False, use_distributed_sampler=False, enable_progress_bar=False,
                   enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
                   gradient_clip_val=0).fit(module, datamodule=dm)
        return start, {n: p.detach().clone() for n, p in module.lm.named_parameters() if p.requires_grad}

    start, before = fit(ICLDistillModule)
    _, after = fit(OnPolicyDistillModule, lmbda=0.0, kl="forward", generation=FAST)
    movement = max((before[n] - start[n]).abs().max().item() for n in before)
    weight_max = max(w.abs().max().item() for w in before.values())
    # the same gradients, scaled by 1/T at another point of the sum: summation-order roundoff over the
    # step's tokens (at most 4 examples x 384) bounds the difference (tests/support.py)
    tol = sgd_weight_tolerance(movement, weight_max, 1, 4 * 384)
    assert movement > 100 * tol  # the steps moved the weights far beyond the tolerance
    for n in before:
        assert (before[n] - after[n]).abs().max().item() <= tol, n


def test_the_monitor_logs_samples_and_stops_when_samples_stop_ending(tiny_tokenizer):
    import lightning.pytorch as pl
    from lightning.pytorch.loggers import Logger

    from ifdistill.methods.onpolicy_distill.monitoring import SampleMonitor

    class Tables(Logger):
        name, version = "tables", 0
        tables: list = []

        def log_metrics(self, metrics, step=None):
            pass

        def log_hyperparams(self, params, *args, **kwargs):
            pass

        def log_text(self, key, columns, data):
            self.tables.append((key, columns, data))

    trainer = pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, accelerator="cpu")
    monitor = SampleMonitor(tiny_tokenizer, table_every=1, table_rows=2, min_eos_rate=0.5, patience=2, action="stop")
    samples = [Sample([5, 6], False), Sample([7], True), Sample([8, 9, 10], False)]
    sums = monitor.sums(samples, trainer, {})
    assert sums == {"gen_rows": 3.0, "gen_tokens": 6.0, "gen_eos": 1.0}
    logger = Tables()
    first = monitor.metrics(sums, trainer, [logger])
    assert first["onpolicy/sampled_len"] == 2.0 and first["onpolicy/eos_rate"] == pytest.approx(1 / 3)
    assert first["onpolicy/budget_hit_rate"] == pytest.approx(2 / 3) and not trainer.should_stop
    (key, columns, rows), = logger.tables
    assert key == "onpolicy/samples" and len(rows) == 2 and rows[0][1] == tiny_tokenizer.decode([5, 6])
    monitor.metrics(sums, trainer, [logger])  # a second interval under min_eos_rate: patience reached
    assert trainer.should_stop and monitor.collapsed
