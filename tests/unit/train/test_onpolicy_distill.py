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
from ifdistill.methods.distill.settings import DistillSettings
from ifdistill.methods.onpolicy_distill.settings import OnPolicyDistillSettings
from ifdistill.train.losses import IGNORE_INDEX
from ifdistill.train.method import TrainingInputs

from tests.unit.train.conftest import LORA, TINY, k0_items, perturb_lora

DATA_KEYS = {"k": 0, "demos": "per_example"}  # the data layer's keys, which every composed section has

FAST = {"max_new_tokens": 6}


def _grads(module):
    return {n: p.grad.clone() for n, p in module.lm.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("kl", ["forward", "reverse"])
def test_lambda_zero_is_off_policy_distillation(icl_items, tiny_tokenizer, kl):
    """(kl=sampled: test_a_gold_chunk_under_the_sampled_estimator_is_off_policy_reverse_kl)"""
    off = ICLDistillModule(TrainingInputs(TINY, LORA), DistillSettings(kd_ratio=0.5, kl=kl))
    perturb_lora(off)
    on = OnPolicyDistillModule(TrainingInputs(TINY, LORA),
                               OnPolicyDistillSettings(kd_ratio=0.5, kl=kl, lmbda=0.0, generation=FAST))
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
    module = OnPolicyDistillModule(TrainingInputs(TINY, LORA),
                                   OnPolicyDistillSettings(kd_ratio=1.0, kl=kl, lmbda=1.0, teacher="self_stopgrad",
                                                           generation=FAST))
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
    module = OnPolicyDistillModule(TrainingInputs(TINY, LORA),
                                   OnPolicyDistillSettings(lmbda=1.0, generation={"max_new_tokens": 5, "greedy": True}))
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
        OnPolicyDistillModule(TrainingInputs(TINY, LORA), OnPolicyDistillSettings(lmbda=1.5))
    with pytest.raises(ValueError, match="kl: must be one of forward, reverse, jsd, sampled"):
        OnPolicyDistillModule(TrainingInputs(TINY, LORA), OnPolicyDistillSettings(kl="tv"))
    with pytest.raises(ValueError, match="on_eos_collapse"):
        OnPolicyDistillModule(TrainingInputs(TINY, LORA), OnPolicyDistillSettings(on_eos_collapse="panic"))
    cfg = OmegaConf.create({"trainer": {"strategy": {"_target_": "lightning.pytorch.strategies.DeepSpeedStrategy"}}})
    problems = OnPolicyDistillModule.config_problems({"teacher_source": "cache", "k": 2, "demos": "shared"}, cfg)
    assert len(problems) == 3 and "online" in problems[0] and "per_example" in problems[1] and "DeepSpeed" in problems[2]
    two = OmegaConf.create({"trainer": {"devices": 2}})
    assert OnPolicyDistillModule.config_problems({**DATA_KEYS, "engine": "hf"}, two) == []
    assert "trainer.devices=1" in OnPolicyDistillModule.config_problems({**DATA_KEYS, "engine": "vllm"}, two)[0]


def _refused(section: dict) -> list[str]:
    """What preflight says of an on-policy ``method`` section: its settings class's lines, then the rules
    across sections (config_problems)."""
    from ifdistill.config import settings_problems

    return (settings_problems(section, "method", OnPolicyDistillSettings)
            + OnPolicyDistillModule.config_problems({**DATA_KEYS, **section}, OmegaConf.create({})))


@pytest.mark.parametrize("generation", [{"temperature": 0.7}, {"top_p": 0.9}, {"greedy": True}])
def test_sampling_that_is_not_the_students_own_is_refused_for_the_sampled_estimator(generation):
    """The sampled estimator holds for y ~ p_s only; the full-vocabulary divergences take any prefixes."""
    (line,) = _refused({"kl": "sampled", "generation": generation})
    key, value = next(iter(generation.items()))
    assert line.startswith("method.kl=sampled") and f"{key}={value}" in line and "biased" in line
    assert "kl=reverse" in line
    assert _refused({"kl": "reverse", "generation": generation}) == []
    with pytest.raises(ValueError, match=f"{key}={value}"):
        OnPolicyDistillModule(TrainingInputs(TINY, LORA),
                              OnPolicyDistillSettings(kl="sampled", generation=generation))


def test_method_keys_that_a_path_would_ignore_are_refused():
    (top_k,) = _refused({"kl": "reverse", "generation": {"top_k": 20}})
    assert "method.generation: unknown key top_k" in top_k
    (topk,) = _refused({"kl": "sampled", "topk": 5})
    assert "method.kl=sampled" in topk and "topk (got 5)" in topk
    assert _refused({"kl": "jsd", "topk": 5}) == []
    (temperature,) = _refused({"kl": "sampled", "temperature": 2.0})
    assert "method.kl=sampled needs temperature=1" in temperature
    (budget,) = _refused({"generation": {"max_new_tokens": 0}})  # a value the sampling refuses, before a model
    assert budget.startswith("method.generation: ") and "max_new_tokens >= 1" in budget


def test_an_unknown_or_refused_key_stops_training_before_its_run_directory(tmp_path):
    """Preflight checks the section against the constructor's signature (no **kwargs): one line each."""
    from ifdistill.train.config_edge import train_config
    from ifdistill.train.preflight import PreflightError
    from ifdistill.train.run import train
    from tests.unit.train.test_preflight import cfg_of

    for overrides, names in ((["+method.kdratio=0.3"], "method: unknown key kdratio for"),
                             (["+method.teacher_source=cache"], "teacher_source must be online"),
                             (["method.kl=sampled", "method.generation.temperature=0.7"], "temperature=0.7")):
        with pytest.raises(PreflightError) as err:
            train(train_config(cfg_of("method=onpolicy_distill", f"paths.output_root={tmp_path}", *overrides)))
        assert names in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(PreflightError, match="method: unknown key kdratio for"):  # off-policy's section too
        train(train_config(cfg_of("method=distill", f"paths.output_root={tmp_path}", "+method.kdratio=0.3")))
    assert list(tmp_path.iterdir()) == []
    train_config(cfg_of("method=onpolicy_distill", "+method.topk=8", "method.own_demo=true"), check_model=False)


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
        module = cls(TrainingInputs(TINY, LORA, sgd), cls.settings_class(kd_ratio=0.5, **kw))
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


# -- the objective of one chunk (OnPolicyDistillModule.onpolicy_loss) against written float64 formulas --
@pytest.fixture(scope="module")
def loss_module():
    """``onpolicy_loss`` reads the module's ``kd`` settings only; each test sets them."""
    return OnPolicyDistillModule(TrainingInputs(TINY, LORA), OnPolicyDistillSettings(generation=FAST))


def _chunk(n: int = 12, v: int = 11, seed: int = 5):
    """Student and teacher logits (float64 masters), targets, and the gold and counted masks of 3 rows of
    4 tokens: rows 0 and 2 gold, row 1 sampled; the first token of each row not counted (skip_tokens=1)."""
    g = torch.Generator().manual_seed(seed)
    s, t = (torch.randn(n, v, generator=g, dtype=torch.float64) * 2 for _ in range(2))
    y = torch.randint(0, v, (n,), generator=g)
    row, col = torch.arange(n) // 4, torch.arange(n) % 4
    return s, t, y, row != 1, col >= 1


def _run(module, s, t, y, gold, counted, **kd):
    module.kd.update(dict(beta=0.5, temperature=1.0, topk=None) | kd)
    s32 = s.float().requires_grad_(True)
    packed = torch.stack([y, gold.long(), counted.long()], dim=-1)
    loss, stats = module.onpolicy_loss(s32, packed, t.float())
    loss.backward()
    return loss, stats, s32.grad.double()


def _expected(kind, s, t, y, gold, counted, r, topk=None):
    """``r * (sum D over counted tokens) + (1 - r) * sum CE over counted gold tokens`` in float64, with
    autograd's gradient, and the divergence as logged. ``sampled``: the score-function surrogate on
    sampled tokens, the full reverse KL on gold ones; logged, the estimate ``log p_s(y) - log p_t(y)``."""
    s = s.clone().requires_grad_(True)
    sk, tk = s, t
    if topk is not None:  # both renormalised on the teacher's top-k support
        idx = t.topk(topk, dim=-1).indices
        sk, tk = s.gather(-1, idx), t.gather(-1, idx)
    if kind == "sampled":
        d = torch.where(gold, _formula("reverse", s, t, y, 0.5), _formula("sampled", s, t, y, 0.5))
        log_ratio = (torch.softmax(s, -1).log() - torch.softmax(t, -1).log()).gather(-1, y[:, None])[:, 0]
        logged = torch.where(gold, _formula("reverse", s, t, y, 0.5), log_ratio).detach()
    else:
        d = _formula(kind, sk, tk, y, 0.5)
        logged = d.detach()
    ce = -torch.softmax(s, -1).log().gather(-1, y[:, None])[:, 0]
    loss = r * d[counted].sum() + (1 - r) * ce[counted & gold].sum()
    loss.backward()
    value = r * logged[counted].sum() + (1 - r) * ce.detach()[counted & gold].sum()
    scale = (r * logged.abs()[counted].sum() + (1 - r) * ce.detach()[counted & gold].sum()).item()
    return value.item(), logged[counted].sum().item(), s.grad, scale


@pytest.mark.parametrize("kind", ["forward", "reverse", "jsd", "sampled"])
def test_skipped_tokens_are_neither_trained_nor_counted_by_any_term(loss_module, kind):
    """skip_tokens leaves a token out of the divergence, of the CE on gold rows and of the token count."""
    s, t, y, gold, counted = _chunk()
    loss, stats, grad = _run(loss_module, s, t, y, gold, counted, kind=kind, kd_ratio=0.5)
    value, kd, expected_grad, scale = _expected(kind, s, t, y, gold, counted, 0.5)
    # float32 log-softmaxes of O(1) logits over V = 11: ~1e-7 relative error per term, so 1e-5 of the
    # terms' summed magnitude bounds a sum of 12; a wrongly included term is off by O(0.1..1)
    assert loss.item() == pytest.approx(value, abs=1e-5 * scale)
    assert stats["kd"].item() == pytest.approx(kd, abs=1e-5 * scale)
    assert stats["count"].item() == counted.sum().item() == 9
    assert torch.allclose(grad, expected_grad, rtol=0, atol=1e-5 * expected_grad.abs().max().item())
    assert grad[~counted].abs().max().item() == 0.0  # a skipped token: no gradient from the CE term either


def test_gold_rows_get_the_reverse_kl_and_train_kd_logs_the_estimate(loss_module):
    """kl=sampled on a chunk with gold and sampled rows: the loss's value and ``train/kd``'s sum are the
    KL estimate (not the surrogate, whose value is estimate x log p_s); the gradient is the surrogate's
    on sampled tokens and the reverse KL's on gold ones."""
    s, t, y, gold, counted = _chunk(seed=8)
    everything = torch.ones_like(counted)
    loss, stats, grad = _run(loss_module, s, t, y, gold, everything, kind="sampled", kd_ratio=1.0)
    value, kd, expected_grad, scale = _expected("sampled", s, t, y, gold, everything, 1.0)
    surrogate = (_formula("sampled", s, t, y, 0.5)[~gold].sum() + _formula("reverse", s, t, y, 0.5)[gold].sum()).item()
    assert abs(surrogate - value) > 1e3 * 1e-5 * scale  # the two readings differ far beyond the tolerance
    # tolerances as in the test above
    assert loss.item() == pytest.approx(value, abs=1e-5 * scale) and stats["kd"].item() == pytest.approx(kd, abs=1e-5 * scale)
    assert torch.allclose(grad, expected_grad, rtol=0, atol=1e-5 * expected_grad.abs().max().item())
    # on gold rows the surrogate's gradient (a squared log-ratio's) differs from the reverse KL's by O(1)
    master = s.clone().requires_grad_(True)
    _formula("sampled", master, t, y, 0.5)[gold].sum().backward()
    assert (master.grad - expected_grad)[gold].abs().max() > 1e3 * 1e-5 * expected_grad.abs().max()


@pytest.mark.parametrize("kind", ["forward", "reverse", "jsd"])
def test_topk_applies_whether_or_not_a_row_is_sampled(loss_module, kind):
    """The same tokens through the all-gold path (off-policy distillation's objective) and the mixed path
    (a sampled row): one value, the top-k formula's."""
    s, t, y, gold, _ = _chunk(seed=11)
    everything = torch.ones_like(gold)
    value, _, expected_grad, scale = _expected(kind, s, t, y, gold, everything, 1.0, topk=3)
    full = _expected(kind, s, t, y, gold, everything, 1.0)[0]
    assert abs(full - value) > 1e3 * 1e-5 * scale  # top-k changes the value far beyond the tolerance
    for rows_gold in (everything, gold):
        loss, stats, grad = _run(loss_module, s, t, y, rows_gold, everything, kind=kind, kd_ratio=1.0, topk=3)
        # tolerances as in the tests above
        assert loss.item() == pytest.approx(value, abs=1e-5 * scale)
        assert torch.allclose(grad, expected_grad, rtol=0, atol=1e-5 * expected_grad.abs().max().item())


def test_a_gold_chunk_under_the_sampled_estimator_is_off_policy_reverse_kl(loss_module):
    """``lmbda=0`` with kl=sampled: every row is gold, and gold rows never get the estimator (their tokens
    were not drawn from the student) but the reverse KL it estimates -- off-policy distillation's
    kl=reverse objective, as ``lmbda=0`` leaves the batch untouched for every kl (the test above)."""
    s, t, y, gold, _ = _chunk(seed=13)
    everything = torch.ones_like(gold)
    on = _run(loss_module, s, t, y, everything, everything, kind="sampled", kd_ratio=0.5)
    off = _run(loss_module, s, t, y, everything, everything, kind="reverse", kd_ratio=0.5)  # loss_from_logits
    # the same functions on the same tokens, plus the estimator's sum over no token (an exact 0)
    assert torch.equal(on[0], off[0]) and torch.equal(on[1]["kd"], off[1]["kd"]) and torch.equal(on[2], off[2])
