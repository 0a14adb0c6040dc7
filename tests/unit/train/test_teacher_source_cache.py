"""ICLDistillModule with method.teacher_source=cache on the tiny model: at k = V the cached objective is the
online one (loss and gradients), chunked or not; what the module refuses."""

from __future__ import annotations

import pytest
import torch

from ifdistill.data.collate import IclCollator
from ifdistill.methods.distill.module import ICLDistillModule
from ifdistill.methods.distill.hooks import DistillHooks
from ifdistill.methods.distill.settings import DistillSettings
from ifdistill.methods.distill.teacher_pass_runner import ensure_teacher_cache
from ifdistill.train.method import TrainingInputs

from tests.unit.train.conftest import LORA, TINY, perturb_lora

# Both sides compute sum_t sum_V p (log p - log q) in float32 over ~100 tokens x V = 512: the teacher
# logits come from the same weights (the cached ones from forward passes of one view at a time, the
# online ones from a padded batch: ~1e-6 relative apart) and the sums are taken in different orders
# (~V * 6e-8 relative). 1e-4 relative bounds both with room; any formula difference (the tail bucket,
# a missing position, a shifted column) is >= 1e-2.
REL = 1e-4


def _grads(module):
    return {n: p.grad.clone() for n, p in module.lm.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("chunk", [None, 7])
def test_k_equal_v_cached_objective_equals_online(icl_items, tiny_tokenizer, tmp_path, chunk):
    online = ICLDistillModule(TrainingInputs(TINY, LORA, logit_chunk_size=chunk), DistillSettings(kd_ratio=0.5))
    perturb_lora(online)
    v = online.lm.output_head().weight.shape[0]
    cached = ICLDistillModule(TrainingInputs(TINY, LORA, logit_chunk_size=chunk),
                              DistillSettings(kd_ratio=0.5, teacher_source="cache", cache_dir=str(tmp_path),
                                              cache_k=v + 100))  # k > V means all of V
    cached.lm.load_state_dict(online.lm.state_dict())
    assert cached.teacher_cache.namespace.k == v
    stats = ensure_teacher_cache(cached, icl_items)
    assert stats.computed == len(icl_items) and stats.to_dict()["topk_mass"] == pytest.approx(1.0, abs=1e-6)
    assert ensure_teacher_cache(cached, icl_items).computed == 0  # a second run finds it

    batch = IclCollator(tiny_tokenizer.pad_token_id)(icl_items)
    lo, so = online.objective(batch)
    lo.backward()
    lc, sc = cached.objective(batch)
    lc.backward()
    assert sc["count"].item() == so["count"].item() > 0
    assert lc.item() == pytest.approx(lo.item(), rel=REL)
    assert sc["kd"].item() == pytest.approx(so["kd"].item(), rel=REL)
    go, gc = _grads(online), _grads(cached)
    assert go.keys() == gc.keys() and go
    for name in go:
        scale = go[name].abs().max().item()
        assert torch.allclose(gc[name], go[name], rtol=REL, atol=REL * scale), name


def test_small_k_stays_close_and_never_exceeds_the_online_kl(icl_items, tiny_tokenizer, tmp_path):
    online = ICLDistillModule(TrainingInputs(TINY, LORA), DistillSettings(kd_ratio=1.0))
    perturb_lora(online)
    cached = ICLDistillModule(TrainingInputs(TINY, LORA),
                              DistillSettings(kd_ratio=1.0, teacher_source="cache", cache_dir=str(tmp_path), cache_k=4))
    cached.lm.load_state_dict(online.lm.state_dict())
    ensure_teacher_cache(cached, icl_items)
    batch = IclCollator(tiny_tokenizer.pad_token_id)(icl_items)
    _, so = online.objective(batch)
    _, sc = cached.objective(batch)
    assert 0 < sc["kd"].item() <= so["kd"].item() * (1 + REL)  # merging outcomes never increases a KL
    assert 0 < sc["teacher_mass"].item() < sc["teacher_count"].item()


def test_schemes_that_cannot_share_a_cache_are_refused(tmp_path):
    # the rule across the data layer's keys is the hooks' (config_problems); the values' own, the settings'
    refused = DistillHooks.config_problems
    assert refused({"teacher_source": "online", "demos": "shared", "k": 4}, {}) == []
    assert refused({"teacher_source": "cache", "demos": "per_example", "k": 4}, {}) == []
    assert refused({"teacher_source": "cache", "demos": "shared", "k": 0}, {}) == []
    assert "per_example" in refused({"teacher_source": "cache", "demos": "shared", "k": 4}, {})[0]
    with pytest.raises(ValueError, match="frozen teacher"):
        ICLDistillModule(TrainingInputs(TINY, LORA),
                         DistillSettings(teacher="self_stopgrad", teacher_source="cache", cache_dir=str(tmp_path)))
    with pytest.raises(ValueError, match="kl=forward"):
        ICLDistillModule(TrainingInputs(TINY, LORA),
                         DistillSettings(kl="reverse", teacher_source="cache", cache_dir=str(tmp_path)))
    with pytest.raises(ValueError, match="teacher_source"):
        ICLDistillModule(TrainingInputs(TINY, LORA), DistillSettings(teacher_source="disk"))


def test_views_read_past_the_pass_are_computed_on_demand(icl_items, tiny_tokenizer, tmp_path):
    cached = ICLDistillModule(TrainingInputs(TINY, LORA),
                              DistillSettings(teacher_source="cache", cache_dir=str(tmp_path), cache_k=4))
    cached.teacher_pass.first = ensure_teacher_cache(cached, icl_items[:1])  # the pass covered one example
    assert cached.teacher_pass.first.computed == 1
    batch = IclCollator(tiny_tokenizer.pad_token_id)(icl_items)
    cached.objective(batch)  # a step reads all four
    on_demand = cached.teacher_pass.on_demand
    assert on_demand.views == on_demand.computed == len(icl_items) - 1
    cached.objective(batch)
    assert cached.teacher_pass.on_demand.computed == len(icl_items) - 1  # nothing more to compute
    assert cached.teacher_pass.to_dict()["views"] == len(icl_items)
