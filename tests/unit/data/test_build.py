"""build_train_dataset: sources -> mixing -> rendering, the manifest, configs, and the replay share."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf
from torch.utils.data import DataLoader

import ifdistill.conf  # noqa: F401  (the resolvers and section schemas the YAML under conf/ uses)
from ifdistill.data.build import DataConfig, build_train_dataset, collator_for
from ifdistill.data.manifest import replay_share
from ifdistill.data.records import DataError
from ifdistill.data.sources import sha256_file

CONF_DATA = Path(__file__).resolve().parents[3] / "conf" / "data"


def chat_rows(n: int, long_every: int = 0) -> list[str]:
    rows = []
    for i in range(n):
        answer = ("word " * 400 if long_every and i % long_every == 0 else f"answer {i}").strip()
        rows.append(json.dumps({"messages": [{"role": "user", "content": f"question {i}?"},
                                             {"role": "assistant", "content": answer}]}))
    return rows


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    d = tmp_path_factory.mktemp("src")
    new = d / "new.jsonl"
    new.write_text("\n".join(json.dumps({"prompt": f"Say {i}.", "completion": f"{i}."}) for i in range(300)) + "\n")
    replay = d / "replay.jsonl"
    replay.write_text("\n".join(chat_rows(400, long_every=7)) + "\n")
    other = d / "other.jsonl"
    other.write_text("\n".join(chat_rows(100)) + "\n")
    return {"new": new, "replay": replay, "other": other}


def config(sources, ratio, **kw):
    return {"sources": [{"name": "new", "path": str(sources["new"])}],
            "replay": [{"name": "replay", "path": str(sources["replay"]), "weight": 3.0},
                       {"name": "other", "path": str(sources["other"]), "weight": 1.0}],
            "ratio": ratio, "max_length": 64, "seed": 5, **kw}


def test_exact_nested_mixture_after_length_drops(tok, sources, tmp_path):
    built = {r: build_train_dataset(config(sources, r), tok) for r in (0, 0.05, 0.18, 0.5)}
    for r, data in built.items():
        expected = {0: 0, 0.05: 16, 0.18: 66, 0.5: 300}[r]
        assert data.train.n_new == 300 and data.train.n_replay == expected
        assert sum(it["is_replay"] for it in data.train.items) == expected
        assert sum(data.plan.per_source.values()) == expected
        assert abs(data.plan.per_source.get("replay", 0) - expected * 3 / 4) <= 1  # weights 3:1
        # long replay rows (every 7th) were dropped and replaced, never trained on
        assert all(len(it["input_ids"]) <= 64 for it in data.train.items)
    rows = {r: [(d.train[i]["source"], d.train[i]["row_id"]) for i in d.train.epoch_order(0)] for r, d in built.items()}
    for small, big in zip((0, 0.05, 0.18), (0.05, 0.18, 0.5)):
        assert {x for x in rows[small] if x[0] != "new"} < {x for x in rows[big] if x[0] != "new"}
        assert [x for x in rows[small] if x[0] == "new"] == [x for x in rows[big] if x[0] == "new"]
    m = built[0.5].manifest.to_dict()
    assert m["sources"]["replay"]["length"]["dropped"]["too_long"] > 0
    assert m["mix"]["realised"]["replay_share_examples"] == 0.5


def test_order_seed_changes_the_order_only(tok, sources):
    """Seed replicates (order_seed = the run's seed): same mixture and held-out set, another order."""
    a, b, c = (build_train_dataset(config(sources, 0.18, heldout=10, order_seed=o), tok) for o in (1, 2, 1))

    def order(d):
        return [(d.train[i]["source"], d.train[i]["row_id"]) for i in d.train.epoch_order(0)]

    def held(d):
        return {k: [it["row_id"] for it in v.items] for k, v in d.heldout.items()}

    assert sorted(order(a)) == sorted(order(b)) and order(a) != order(b) and order(a) == order(c)
    assert held(a) == held(b)


def test_manifest_contents(tok, sources, tmp_path):
    data = build_train_dataset(config(sources, 0.18, heldout=10), tok, manifest_path=tmp_path)
    m = json.loads((tmp_path / "data_manifest.json").read_text())
    src = m["sources"]["new"]
    assert src["identity"]["files"][0]["sha256"] == sha256_file(sources["new"])
    assert src["rows_read"] == 300 and src["heldout"] == 10 and src["used"]["examples"] == 290
    assert m["sources"]["replay"]["role"] == "replay" and m["sources"]["replay"]["weight"] == 3.0
    assert m["mix"]["n_replay"] == data.train.n_replay and m["mix"]["replay_per_source"] == data.plan.per_source
    realised = m["mix"]["realised"]
    assert realised["supervised_tokens"] == sum(s["used"]["supervised_tokens"] for s in m["sources"].values())
    assert 0 < realised["replay_share_supervised_tokens"] < 1
    assert m["tokenizer"]["chat_template_sha256"] and m["config"]["ratio"] == 0.18
    assert set(data.heldout) == {"new", "replay", "other"} and len(data.heldout["new"]) == 10
    held_rows = {it["row_id"] for it in data.heldout["new"].items}
    assert not held_rows & {it["row_id"] for it in data.train.items if it["source"] == "new"}


def test_replay_share_per_batch(tok, sources):
    data = build_train_dataset(config(sources, 0.5), tok)
    loader = DataLoader(data.train, batch_size=16, sampler=data.train.sampler(),
                        collate_fn=collator_for(DataConfig.from_mapping(config(sources, 0.5)), tok))
    totals = {"replay_examples": 0.0, "total_examples": 0.0}
    for batch in loader:
        share = replay_share(batch)
        assert 0 <= share["replay_share_examples"] <= 1 and 0 <= share["replay_share_tokens"] <= 1
        for k in totals:
            totals[k] += share[k]
    assert totals["replay_examples"] / totals["total_examples"] == 0.5
    fixed = replay_share({"is_replay": torch.tensor([True, False, False, True]),
                          "num_supervised": torch.tensor([10, 20, 30, 40])})
    assert fixed["replay_share_examples"] == 0.5 and fixed["replay_share_tokens"] == 0.5
    assert replay_share({"is_replay": [True, False], "num_supervised": [3, 1]})["replay_share_tokens"] == 0.75


def test_tolerant_build_skips_and_counts(tok, tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join([json.dumps({"prompt": "a", "completion": "b"}), "{broken",
                               json.dumps({"prompt": "c", "completion": ""}),
                               json.dumps({"prompt": "d", "completion": "e"})]) + "\n")
    cfg = {"sources": [{"name": "m", "path": str(path)}]}
    with pytest.raises(DataError, match=f"{path}:2"):
        build_train_dataset(cfg, tok)
    data = build_train_dataset({**cfg, "tolerant": True}, tok)
    assert len(data.train) == 2
    invalid = data.manifest.to_dict()["sources"]["m"]["rows_invalid"]
    assert invalid == {"malformed_json": 1, "empty_completion": 1}


def test_render_failure_names_the_row(make_tokenizer, tmp_path):
    from tests.unit.data.conftest import NO_EOT

    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"prompt": "a", "completion": "b"}) + "\n")
    with pytest.raises(DataError, match=r"m:1.*end-of-turn"):
        build_train_dataset({"sources": [{"name": "m", "path": str(path)}]}, make_tokenizer(NO_EOT))


def test_icl_items_and_config_errors(tok, sources):
    cfg = config(sources, 0.05)
    icl = DataConfig.resolve(cfg, icl={"k": 2, "demos": "per_example"})
    data = build_train_dataset(icl, tok)
    batch = collator_for(icl, tok)([data.train[i] for i in range(len(data.train) - 4, len(data.train))])
    v = batch["completion_valid"]
    s = torch.gather(batch["input_ids"], 1, batch["student_positions"])
    t = torch.gather(batch["teacher_input_ids"], 1, batch["teacher_positions"])
    assert torch.equal(s[v], t[v])
    assert batch["num_demos"].tolist() == [0, 0, 0, 0]  # replay items: no demos unless icl_on_replay
    assert data.train[0]["num_demos"] == 2
    with pytest.raises(ValueError, match="packing"):
        collator_for(icl, tok, packing=True)
    with pytest.raises(ValueError, match="no replay source"):
        build_train_dataset({"sources": cfg["sources"], "ratio": 0.1}, tok)
    with pytest.raises(ValueError, match="unknown keys"):
        DataConfig.from_mapping({**cfg, "replay_ratio": 0.1})
    with pytest.raises(ValueError, match="allow_replay_repeats"):
        build_train_dataset({**config(sources, 0.5), "replay": [{"name": "o", "path": str(sources["other"])}]}, tok)


@pytest.mark.parametrize("option", sorted(p.stem for p in CONF_DATA.glob("*.yaml")))
def test_data_config_options_compose_and_parse(option, tmp_path):
    shutil.copytree(CONF_DATA, tmp_path / "data")
    (tmp_path / "primary.yaml").write_text(f"defaults:\n  - data: {option}\n  - _self_\n")
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(tmp_path), version_base="1.3"):
        cfg = compose("primary")
    data = DataConfig.from_mapping(OmegaConf.to_container(cfg.data, resolve=True))
    assert data.sources and 0 <= data.ratio < 1
    if option.startswith("ifeval") or option.startswith("smoltalk"):
        assert data.sources[0].hf_name == "argilla/ifeval-like-data" and data.sources[0].verified_only
    if option in ("synthetic_replay", "smoltalk_constraints"):
        assert data.replay and data.ratio == 0.18


def test_synthetic_default_builds(tok):
    cfg = OmegaConf.to_container(OmegaConf.load(CONF_DATA / "synthetic.yaml"))
    data = build_train_dataset({**cfg, "heldout": 0}, tok)
    assert len(data.train) >= 2000 and data.train.n_replay == 0


def test_own_demo_puts_the_examples_gold_conversation_before_it(tok, sources):
    """``own_demo`` (self-distillation fine-tuning's teacher, a view on-policy distillation supplies through
    ``extra_demos``): the example itself, gold answer included, is the teacher's last demonstration, after
    the k drawn ones."""
    from ifdistill.data.icl import DemoSelector, build_icl_pair
    from ifdistill.methods.onpolicy_distill.module import OnPolicyDistillModule

    cfg = config(sources, 0.0)
    views = OnPolicyDistillModule.teacher_views({"k": 1, "demos": "per_example", "own_demo": True})
    data = build_train_dataset(DataConfig.resolve(cfg, icl=views), tok)
    item, ex = data.train[0], data.examples[0]
    drawn = DemoSelector(data.demo_pool, seed=cfg["seed"])  # data.icl_seed unset: the data seed
    expected = build_icl_pair(tok, ex, drawn.select(1, exclude_key=ex.uid, exclude_prompt=ex.prompt) + [ex])
    end = expected.teacher_positions[-1] + 1
    assert item["num_demos"] == 2 and item["teacher_input_ids"].tolist() == expected.teacher.input_ids[:end]
    with pytest.raises(ValueError, match="extra_demos.*needs method.demos=per_example"):
        DataConfig.resolve(cfg, icl={**views, "demos": "shared"})
