"""``bench/bench_host_overhead.py``'s functions: what it counts and how it summarises, and one real eager step
of a two-layer model of the narrow shape (the bench itself compiles 28 layers: minutes, not a unit test)."""

from __future__ import annotations

import pytest

from bench import bench_host_overhead as bho


def test_ops_are_aten_events_and_graph_calls_the_compiled_graphs_called():
    names = ["aten::mm", "aten::mm", "aten::add_", "autograd::engine::evaluate_function: MmBackward0",
             "## Call CompiledFxGraph abc ##", "## Call CompiledFxGraph def ##", "Torch-Compiled Region: 0/0"]
    assert bho.count_ops(names) == {"ops": 3, "graph_calls": 2, "top_ops": {"aten::mm": 2, "aten::add_": 1}}


def test_summary_takes_the_median_after_warmup_and_the_first_steps_excess_as_compile_time():
    row = bho.summarise([9.0, 1.5, 1.0, 2.0, 1.2], tokens=600, names=["aten::mm"] * 4, warmup=2,
                        model_names=["aten::mm"] * 3)
    assert row["host_s_per_step"] == 1.2 and row["steps"] == 3  # median of 1.0, 2.0, 1.2
    assert row["model_ops_per_step"] == 3
    assert row["tokens_per_s"] == pytest.approx(500.0) and row["compile_s"] == pytest.approx(7.8)
    assert row["ops_per_step"] == 4 and row["graph_calls_per_step"] == 0


def test_ratios_are_compiled_over_eager():
    eager = {"ops_per_step": 3000, "model_ops_per_step": 2000, "host_s_per_step": 0.3, "tokens_per_s": 1000.0}
    compiled = {"ops_per_step": 600, "model_ops_per_step": 500, "host_s_per_step": 0.1, "tokens_per_s": 3000.0}
    assert bho.ratios({"eager": eager, "compiled": compiled}) == pytest.approx(
        {"ops": 0.2, "model_ops": 0.25, "host_s": 1 / 3, "tokens_per_s": 3.0})


def test_narrow_shape_is_qwen3_1_7b_depth_and_vocabulary():
    assert bho.NARROW["num_hidden_layers"] == 28 and bho.NARROW["vocab_size"] == 151936
    assert bho.NARROW["hidden_size"] == 64 and bho.NARROW["tie_word_embeddings"] is True


def test_one_eager_step_of_a_two_layer_narrow_model(tmp_path):
    shape = dict(bho.NARROW, num_hidden_layers=2)
    model_dir = bho.build_model_dir("narrow-2-layers", shape, tmp_path)
    out = bho.run(model_dir, peft=bho.LORA, tokens=128, steps=1, warmup=0, variants={"eager": bho.VARIANTS["eager"]})
    row = out["eager"]
    assert row["ops_per_step"] > row["model_ops_per_step"] > 100  # the optimizer and clipping besides
    assert row["graph_calls_per_step"] == 0 and row["graphs_compiled"] == 0
    assert 0 < row["tokens_per_step"] <= 128 and row["tokens_per_s"] == pytest.approx(
        row["tokens_per_step"] / row["host_s_per_step"])
