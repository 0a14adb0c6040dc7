"""The synthetic data: sizes, determinism, disjoint splits, and every response passes the scorer."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from ifdistill.benchmarks.instruction_following.scoring import score_response
from ifdistill.data import synthetic
from ifdistill.data.synthetic import SIZES, generate, synthetic_paths


@pytest.fixture(scope="module")
def train():
    return generate("train")


@pytest.fixture(scope="module")
def eval_with_answers():
    return generate("eval", with_responses=True)


def test_sizes_schema_and_determinism(train):
    assert len(train) == SIZES["train"] >= 2000
    assert SIZES["eval"] >= 100 and SIZES["chat"] >= 2000
    row = train[0]
    assert set(row) == {"key", "prompt", "instruction_id_list", "kwargs", "response"}
    assert isinstance(row["key"], int) and len(row["kwargs"]) == len(row["instruction_id_list"])
    assert generate("train", 50) == train[:50]  # a smaller draw is a prefix: same RNG stream
    ev = generate("eval")
    assert set(ev[0]) == {"key", "prompt", "instruction_id_list", "kwargs"}  # IFEval's input schema
    assert len({r["key"] for r in train + ev}) == len(train) + len(ev)


def test_eval_is_disjoint_from_train(train):
    ev = generate("eval")
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in ev}
    train_topics = {t for t, _ in synthetic.T.TRAIN_TOPICS}
    eval_topics = {t for t, _ in synthetic.T.EVAL_TOPICS}
    assert not train_topics & eval_topics
    assert all(any(t in r["prompt"] for t in eval_topics) for r in ev)
    assert len({r["prompt"] for r in ev}) == len(ev)


def test_instruction_coverage(train):
    counts = Counter(i for r in train for i in r["instruction_id_list"])
    assert set(counts) == set(synthetic.IDS.values())
    assert min(counts.values()) >= 100  # every type is learnable from enough examples
    assert Counter(len(r["instruction_id_list"]) for r in train).keys() >= {1, 2, 3}


def test_every_synthetic_response_passes_the_scorer_strictly(train, eval_with_answers):
    failures = []
    for row in train + eval_with_answers:
        j = score_response(row["response"], row["instruction_id_list"], row["kwargs"])
        if not j.strict_prompt:
            failures.append((row["key"], [i for i, ok in zip(row["instruction_id_list"], j.strict_inst) if not ok]))
    assert not failures, failures[:5]


def test_chat_set_is_generic_messages(tmp_path):
    chat = generate("chat")
    assert len(chat) == SIZES["chat"]
    assert all(r["messages"][-1]["role"] == "assistant" and r["messages"][-1]["content"] for r in chat)
    assert len({r["messages"][-2]["content"] for r in chat}) == len(chat)
    assert any(r["messages"][0]["role"] == "system" for r in chat)


def test_synthetic_paths_written_once_atomically(tmp_path):
    paths = synthetic_paths(tmp_path)
    assert set(paths) == {"train", "eval", "chat"}
    assert paths["train"].parent.name.startswith(f"v{synthetic.GENERATOR_VERSION}-")
    lines = paths["eval"].read_text().splitlines()
    assert [json.loads(x) for x in lines] == generate("eval")
    meta = json.loads((paths["train"].parent / "meta.json").read_text())
    assert meta["generator_version"] == synthetic.GENERATOR_VERSION
    stamp = {p: p.stat().st_mtime_ns for p in paths.values()}
    assert synthetic_paths(tmp_path) == paths
    assert {p: p.stat().st_mtime_ns for p in paths.values()} == stamp  # cached, not rewritten
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]  # no temp dirs left
    # an incomplete directory (a crash before the rename cannot produce one, but a manual delete can)
    paths["chat"].unlink()
    assert synthetic_paths(tmp_path)["chat"].is_file()


def test_unknown_split():
    with pytest.raises(ValueError, match="unknown synthetic split"):
        generate("test")
