"""The compiled step (``kernels.compile``: each decoder layer through ``torch.compile``; ``kernels.compile_loss``:
the per-chunk objective too) computes the eager step: the same losses and gradients within float32 rounding,
on packed rows of different lengths, with a bounded number of compilations (:mod:`ifdistill.train.kernels`).

Each comparison runs one module twice on the same batch: compiled, then with ``torch.compiler.set_stance(
"force_eager")`` (the very same parameters, every compiled function run by its eager original).

Tolerance, derived from the computation. Both runs evaluate the same float32 function; Inductor reorders
reductions and fuses element-wise chains, so each value on the way from the input to the loss and back is
perturbed by relative roundings: a sum of ``n`` terms in another order by ``λ sqrt(n) u``
(:func:`tests.support.sum_relative_error`), a fused element-wise op by ``u``. A logit's path has about 12
such values per decoder layer forward (``tests/gpu/tolerance.py`` counts them) and twice that backward, plus
the head's; the longest reduction on it has ``K`` terms (the vocabulary's log-sum-exp). Treating the roundings
as independent, a logit or a gradient entry is off by at most ``ε = λ u sqrt((36 L + 4) K)`` of its scale.
The token-mean cross entropy ``logsumexp(z) - z_y`` then moves by at most ``2 ε |z|max``, a distillation loss
(its KL adds the teacher's logits) by ``4 ε |z|max``, and the gradients' norm by ``ε`` of itself. On the tiny
model (L = 4, K = 2,048) ``ε`` is ~1.3e-4; measured: ~4e-7 (gradients), ~1e-7 (loss). A compiled graph that
missed what eager computes -- an adapter left out, a stale graph of another row length, the wrong mask --
changes them by ~1e-1 or more (the distillation test's control: the teacher, the same layers with the adapter
disabled, differs from the student by more than the tolerance).

Compilations (``torch._dynamo`` counters, stated in :mod:`ifdistill.train.kernels`): all layers share one
graph; a LoRA student adds one because its first layer's input (the frozen embedding's output) needs no
gradient; the objective adds one. Three packed lengths, one set of graphs.

The inductor backend (generated C++ kernels, the numerics that differ) runs for LoRA SFT on the model's first
layer; full fine-tuning and distillation run the traced graphs through ``aot_eager`` (Dynamo's capture and
AOTAutograd's forward/backward split, no code generation: each graph's C++ compilation costs ~20 s of two
cores), whose numerics equal eager's, and count every graph.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from ifdistill.data.collate import IclCollator, PackCollator
from ifdistill.methods.distill.module import ICLDistillModule
from ifdistill.methods.distill.settings import DistillSettings
from ifdistill.methods.sft.module import SFTModule
from ifdistill.train import kernels
from ifdistill.train.method import TrainingInputs
from ifdistill.train.modeling import decoder_layers
from tests.support import ROUNDOFF_LAMBDA
from tests.unit.train.conftest import LORA, TINY, perturb_lora, resolved, synthetic_data

F32_U = 2.0 ** -24
COMPILED = {"compile": True, "compile_loss": True}
CHUNK = 64  # several chunks per row, the last one shorter: the objective's row count varies too


def epsilon(num_layers: int, longest_sum: int) -> float:
    """``ε`` of the module docstring: the relative error of a logit or a gradient entry."""
    return ROUNDOFF_LAMBDA * F32_U * math.sqrt((36 * num_layers + 4) * longest_sum)


def graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


@pytest.fixture(scope="module")
def sft_items(tiny_tokenizer):
    from ifdistill.data.build import build_train_dataset

    return build_train_dataset(resolved(synthetic_data(24)), tiny_tokenizer).train.items


@pytest.fixture(scope="module")
def packed(sft_items, tiny_tokenizer):
    """Three packed rows of 3, 4 and 5 examples: three lengths, position ids restarting per example."""
    collate = PackCollator(tiny_tokenizer.pad_token_id, max_row_tokens=4096)
    rows = [collate(sft_items[i:i + n]) for i, n in ((0, 3), (3, 4), (7, 5))]
    assert len({r["input_ids"].shape[1] for r in rows}) == 3
    return rows


def step(module, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Token-mean loss, the logged sums and the gradients of one micro-batch."""
    module.zero_grad(set_to_none=True)
    loss, stats = module.objective(batch)
    mean = loss / stats["count"]
    mean.backward()
    grads = {n: p.grad.detach().clone() for n, p in module.named_parameters() if p.grad is not None}
    return mean.detach(), {k: v.detach() for k, v in stats.items()}, grads


def logit_absmax(module, batch) -> float:
    rows, cols, _ = module.supervised(batch)
    with torch.no_grad(), torch.compiler.set_stance("force_eager"):
        return float(module.student(batch, rows, cols, True).abs().max())


def assert_compiled_equals_eager(module, batches, *, kd: bool) -> None:
    eps = epsilon(module.model.config.num_hidden_layers, module.model.config.vocab_size)
    for batch in batches:
        loss_c, stats_c, grads_c = step(module, batch)
        with torch.compiler.set_stance("force_eager"):
            loss_e, stats_e, grads_e = step(module, batch)
        # the token-mean loss: 2 ε |z|max (CE), 4 ε |z|max with a KL term (module docstring)
        assert abs(float(loss_c - loss_e)) <= (4 if kd else 2) * eps * logit_absmax(module, batch)
        assert stats_c["count"] == stats_e["count"] and stats_c["correct"] == stats_e["correct"]
        assert set(grads_c) == set(grads_e) and grads_e
        diff = math.sqrt(sum(float((grads_c[n] - grads_e[n]).pow(2).sum()) for n in grads_e))
        norm = math.sqrt(sum(float(g.pow(2).sum()) for g in grads_e.values()))
        assert diff <= eps * norm, (diff / norm, eps)  # the gradients' norm: ε of itself


def first_layer_only(module) -> None:
    """The model cut to its first decoder layer: the one graph a LoRA student's first layer compiles (its input, the
    frozen embedding's output, needs no gradient), without the second graph of the other layers -- the code
    generation of each graph is most of this test's time; the traced test below counts both."""
    lm = module.model.get_base_model()
    lm.model.layers = lm.model.layers[:1]
    lm.config.num_hidden_layers = 1


@pytest.mark.slow  # compiles: ~20-40 s of two cores per graph with inductor
def test_lora_sft_on_packed_rows_of_three_lengths_compiles_once_and_equals_eager(packed):
    torch.manual_seed(0)
    module = SFTModule(TrainingInputs(TINY, LORA, logit_chunk_size=CHUNK, kernels=COMPILED))
    first_layer_only(module)
    perturb_lora(module)  # the adapters change the outputs: one left out of the graph would show
    module.train()
    assert len(kernels.compiled_layers(decoder_layers(module.model))) == 1
    before = graphs()
    assert_compiled_equals_eager(module, packed, kd=False)
    # the layer: one graph; the objective: one graph -- and no more for the second and third row lengths
    assert graphs() - before == 2


@pytest.mark.slow
def test_full_fine_tuning_and_distillation_through_the_traced_graphs(packed, icl_items, tiny_tokenizer):
    traced = {**COMPILED, "compile_backend": "aot_eager"}
    torch.manual_seed(0)
    full = SFTModule(TrainingInputs(TINY, {"method": "none"}, logit_chunk_size=CHUNK, kernels=traced)).train()
    before = graphs()
    assert_compiled_equals_eager(full, packed, kd=False)
    assert graphs() - before == 2  # every layer's input needs a gradient: one graph; the objective: one

    torch.manual_seed(0)
    dist = ICLDistillModule(TrainingInputs(TINY, LORA, logit_chunk_size=CHUNK, kernels=traced),
                            DistillSettings(kd_ratio=0.5, teacher="frozen_initial"))
    perturb_lora(dist)
    dist.train()
    batches = [IclCollator(tiny_tokenizer.pad_token_id)(icl_items[i:i + 2]) for i in (0, 2)]
    before = graphs()
    assert_compiled_equals_eager(dist, batches, kd=True)
    # padded rows (a batch of two): the LoRA student's two layer graphs (the first layer's input needs no
    # gradient, the others' do); the teacher (no gradient, adapter disabled): one; the distillation objective: one
    assert graphs() - before == 4
    # the control: the teacher is the same compiled layers with the adapter disabled, and it differs from the
    # student by far more than the tolerance
    _, stats, _ = step(dist, batches[0])
    eps = epsilon(dist.model.config.num_hidden_layers, dist.model.config.vocab_size)
    assert float(stats["kd"] / stats["count"]) > 10 * 4 * eps * logit_absmax(dist, batches[0])


def test_a_copy_of_a_compiled_model_compiles_its_own_layers():
    module = SFTModule(TrainingInputs(TINY, LORA, kernels={"compile": True}))
    twin = copy.deepcopy(module.lm)  # what a frozen teacher and the drift's base are
    for layer, copied in zip(decoder_layers(module.model), decoder_layers(twin.model)):
        assert layer.forward.layer is layer and copied.forward.layer is copied
        assert copied.forward.eager.__self__ is copied
    assert kernels.uncompile_layers(decoder_layers(module.model)) == module.model.config.num_hidden_layers
    assert not kernels.compiled_layers(decoder_layers(module.model))


def test_auto_compiles_on_cuda_only_and_zero3_refuses_or_drops_compiled_layers():
    auto = SFTModule(TrainingInputs(TINY, LORA))
    assert kernels.compiled_layers(decoder_layers(auto.model)) == [] or torch.cuda.is_available()

    class Zero3:
        config = {"zero_optimization": {"stage": 3}}

    asked = SFTModule(TrainingInputs(TINY, LORA, kernels={"compile": True}))
    with pytest.raises(kernels.ConfigError, match=r"kernels.compile=true: DeepSpeed ZeRO-3"):
        kernels.check_strategy(Zero3(), 2, True, decoder_layers(asked.model))
    kernels.check_strategy(Zero3(), 2, kernels.AUTO, decoder_layers(asked.model))  # auto: left out, no error
    assert not kernels.compiled_layers(decoder_layers(asked.model))
    with pytest.raises(ValueError, match="kernels.compile must be true, false or auto"):
        SFTModule(TrainingInputs(TINY, LORA, kernels={"compile": "sometimes"}))


def test_kernels_settings_are_composed_and_outside_config_hash():
    from tests.unit.test_configs import _compose, _train_hash

    default = _compose("train", [])
    assert dict(default.kernels) == {"compile": "auto", "compile_loss": "auto", "dynamic": True, "compile_mode": None,
                                     "compile_backend": "inductor", "liger": "auto"}
    changed = _compose("train", ["kernels.compile=true", "kernels.liger=false", "kernels.dynamic=false"])
    assert _train_hash(changed) == _train_hash(default)  # how the step runs, not what it computes
    assert _train_hash(_compose("train", ["optim.lr=0.001"])) != _train_hash(default)  # the control


def test_liger_replaces_qwen3s_norms_and_mlp_when_applied_before_the_model_is_built():
    """In a process of its own: the patch replaces transformers' classes for the rest of the process."""
    import subprocess
    import sys

    code = """
from transformers import Qwen3Config, Qwen3ForCausalLM
from ifdistill.train import kernels
cfg = Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=16)
before = kernels.liger_in(Qwen3ForCausalLM(cfg))
assert kernels.apply_liger("qwen3") and not kernels.apply_liger("no-such-model")
model = Qwen3ForCausalLM(cfg)
print(before, kernels.liger_in(model), sorted({type(m).__name__ for m in model.modules() if kernels.liger_in(m)}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    before, after, classes = out.stdout.strip().split(" ", 2)
    assert before == "False" and after == "True"
    assert "LigerRMSNorm" in classes and "LigerSwiGLUMLP" in classes
