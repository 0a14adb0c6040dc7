"""Sources and records: layouts, verified-only filtering, and every kind of bad row."""

from __future__ import annotations

import json
import logging

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ifdistill.data.records import DataError, normalise_row
from ifdistill.data.sources import SourceSpec, load_source

GOOD = {"prompt": "Say hi.", "completion": "Hi."}

# (raw line, kind, field named in the error). Each is the 2nd line of its file, after a good row.
BAD_ROWS = [
    ('{"prompt": "x", "completion": ', "malformed_json", None),
    ('["not", "an", "object"]', "wrong_type", None),
    ('{"prompt": "Say hi."}', "missing_field", "completion"),
    ('{"completion": "Hi."}', "missing_field", "messages"),
    ('{"prompt": 5, "completion": "Hi."}', "wrong_type", "prompt"),
    ('{"prompt": "Say hi.", "completion": ["Hi."]}', "wrong_type", "completion[0]"),
    ('{"prompt": "Say hi.", "completion": "   "}', "empty_completion", "completion"),
    ('{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": ""}]}',
     "empty_completion", "messages[1].content"),
    ('{"messages": [{"role": "robot", "content": "a"}, {"role": "assistant", "content": "b"}]}',
     "bad_value", "messages[0].role"),
    ('{"messages": [{"role": "user", "content": "a"}, {"role": "assistant"}]}', "missing_field",
     "messages[1].content"),
    ('{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": 3}]}', "wrong_type",
     "messages[1].content"),
    ('{"messages": "hello"}', "wrong_type", "messages"),
    ('{"prompt": "p", "response": "r", "instruction_id_list": "punctuation:no_comma", "kwargs": [{}]}',
     "wrong_type", "instruction_id_list"),
    ('{"prompt": "p", "response": "r", "instruction_id_list": ["a", "b"], "kwargs": [{}]}', "bad_value", "kwargs"),
    # JSON keeps the last of two equal fields silently: which one was meant?
    ('{"prompt": "Say hi.", "response": "", "response": "Hi there friend."}', "duplicate_field", "response"),
    ('{"messages": [{"role": "user", "content": "a", "content": "b"}, {"role": "assistant", "content": "c"}]}',
     "duplicate_field", "content"),
    # roles out of the order chat templates require
    ('{"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}, '
     '{"role": "assistant", "content": "c"}]}', "turn_order", "messages[1].role"),
    ('{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, '
     '{"role": "assistant", "content": "c"}]}', "turn_order", "messages[2].role"),
    ('{"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "s"}, '
     '{"role": "user", "content": "b"}, {"role": "assistant", "content": "c"}]}', "turn_order", "messages[1].role"),
    ('{"messages": [{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}, '
     '{"role": "assistant", "content": "c"}]}', "turn_order", "messages[0].role"),
    ('{"prompt": [{"role": "user", "content": "Write a poem."}, {"role": "user", "content": "No commas."}], '
     '"response": "r", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}', "turn_order", "prompt[1].role"),
    ('{"prompt": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], "completion": "b"}',
     "turn_order", "completion"),
]


def write_jsonl(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(("line", "kind", "field"), BAD_ROWS, ids=[f"{k}-{f}" for _, k, f in BAD_ROWS])
def test_each_bad_row_names_file_line_and_field(tmp_path, line, kind, field):
    path = write_jsonl(tmp_path / "data.jsonl", [json.dumps(GOOD), line])
    with pytest.raises(DataError) as info:
        load_source(SourceSpec(name="s", path=str(path)))
    err = info.value
    assert err.kind == kind
    assert err.location == f"{path}:2"
    assert err.field == field
    assert f"{path}:2" in str(err) and (field is None or repr(field) in str(err))


def test_tolerant_skips_and_counts(tmp_path):
    lines = [json.dumps(GOOD)] + [line for line, _, _ in BAD_ROWS] + ["", json.dumps(GOOD)]
    path = write_jsonl(tmp_path / "data.jsonl", lines)
    src = load_source(SourceSpec(name="s", path=str(path)), tolerant=True)
    assert len(src.examples) == 2
    assert [ex.row_id for ex in src.examples] == ["1", str(len(lines) - 0)]
    expected: dict[str, int] = {}
    for _, kind, _ in BAD_ROWS:
        expected[kind] = expected.get(kind, 0) + 1
    stats = src.stats.to_dict()
    assert stats["rows_invalid"] == expected
    assert stats["rows_read"] == 2 + len(BAD_ROWS)
    assert stats["invalid_examples"]["malformed_json"][0].startswith(f"{path}:2")
    assert stats["identity"]["files"][0]["sha256"]


def test_a_missing_answer_is_named_as_the_file_names_it(tmp_path):
    """A prompt/response file: a row without its answer is told ``response``, the file's word, not
    ``completion`` (the word of the other layout)."""
    path = write_jsonl(tmp_path / "d.jsonl", [json.dumps({"prompt": "Say hi.", "response": "Hi."}), '{"prompt": "x"}'])
    with pytest.raises(DataError) as info:
        load_source(SourceSpec(name="s", path=str(path)))
    assert (info.value.field, info.value.location, info.value.kind) == ("response", f"{path}:2", "missing_field")
    ifeval = write_jsonl(tmp_path / "i.jsonl", ['{"prompt": "p", "instruction_id_list": ["a"], "kwargs": [{}]}'])
    with pytest.raises(DataError) as info:  # no earlier row: the IFEval layout's word
        load_source(SourceSpec(name="s", path=str(ifeval)))
    assert (info.value.field, info.value.location) == ("response", f"{ifeval}:1")


def test_a_key_shared_by_rows_is_refused_or_skipped_and_counted(tmp_path, caplog):
    """Ten rows sharing one IFEval key: strict loading names the second row and the first; tolerant
    loading keeps the first, skips nine, counts them as ``duplicate_key`` and says so on the console."""
    row = {"key": 7, "prompt": "p", "response": "r", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}
    rows = [json.dumps({**row, "prompt": f"p{i}"}) for i in range(10)] + [json.dumps({**row, "key": 8})]
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    with pytest.raises(DataError) as info:
        load_source(SourceSpec(name="s", path=str(path)))
    assert (info.value.kind, info.value.location, info.value.field) == ("duplicate_key", f"{path}:2", "key")
    assert f"key 7 is also the key of {path}:1" in str(info.value)
    caplog.set_level(logging.WARNING, logger="ifdistill")
    src = load_source(SourceSpec(name="s", path=str(path)), tolerant=True)
    assert [ex.prompt for ex in src.examples] == ["p0", "p"] and [ex.key for ex in src.examples] == ["7", "8"]
    assert src.stats.to_dict()["rows_invalid"] == {"duplicate_key": 9}
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [f"data source 's': skipped 9 invalid row(s) of 11 (duplicate_key 9; data.tolerant=true), "
                     f"first: {path}:2: field 'key': key 7 is also the key of {path}:1 [duplicate_key]"]


def test_turn_order_of_prompts_and_of_prompts_with_their_reference_answer():
    """Prompt rows end with the user's turn, or carry their reference answer after it; either way the
    roles alternate."""
    user, assistant = {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}
    for messages in ([user], [{"role": "system", "content": "s"}, user], [user, assistant]):
        assert normalise_row({"messages": messages}, source="e", row_id="1", need_completion=False)
    for messages, field in (([user, user], "messages[1].role"), ([assistant], "messages[0].role"),
                            ([{"role": "system", "content": "s"}], "messages")):
        with pytest.raises(DataError) as info:
            normalise_row({"messages": messages}, source="e", row_id="1", need_completion=False)
        assert (info.value.kind, info.value.field) == ("turn_order", field) or info.value.kind == "bad_value"


def test_layouts_normalise_to_messages():
    a = normalise_row({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]},
                      source="s", row_id="1")
    b = normalise_row({"prompt": "q", "completion": "a"}, source="s", row_id="2")
    c = normalise_row({"prompt": [{"role": "system", "content": "sys"}, {"role": "user", "content": "q"}],
                       "completion": [{"role": "assistant", "content": "a"}]}, source="s", row_id="3")
    assert a.messages == b.messages == c.messages[1:]
    assert (a.prompt, a.completion, c.messages[0]["role"]) == ("q", "a", "system")
    assert b.uid == "s/2"


def test_ifeval_like_layout_hf_kwargs_and_verified_only():
    """argilla/ifeval-like-data: kwargs in the HF layout (every argument, None where unused)."""
    row = {"key": 7, "prompt": "Write without commas.", "response": "Done and done.",
           "instruction_id_list": ["punctuation:no_comma", "length_constraints:number_words"],
           "kwargs": [{"num_words": None, "relation": None}, {"num_words": 3, "relation": "at least"}],
           "prompt_level_strict_acc": True}
    ex = normalise_row(row, source="argilla", row_id="0", verified_only=True)
    assert ex.key == "7"
    assert ex.kwargs == ({}, {"num_words": 3, "relation": "at least"})
    assert ex.messages[-1] == {"role": "assistant", "content": "Done and done."}
    assert normalise_row({**row, "prompt_level_strict_acc": False}, source="a", row_id="1", verified_only=True) is None
    assert normalise_row({**row, "prompt_level_strict_acc": False}, source="a", row_id="1") is not None
    with pytest.raises(DataError, match="prompt_level_strict_acc"):
        normalise_row({k: v for k, v in row.items() if k != "prompt_level_strict_acc"}, source="a", row_id="2",
                      verified_only=True)
    as_json = normalise_row({**row, "kwargs": json.dumps(row["kwargs"])}, source="a", row_id="3")
    assert as_json.kwargs == ex.kwargs


def test_prompt_only_rows_for_evaluation_sets():
    ex = normalise_row({"key": 1, "prompt": "p", "instruction_id_list": [], "kwargs": []}, source="e", row_id="1",
                       need_completion=False)
    assert ex.messages == ({"role": "user", "content": "p"},) and ex.completion == ""


def test_parquet_and_verified_counts(tmp_path):
    rows = [{"prompt": f"p{i}", "response": f"r{i}", "instruction_id_list": ["punctuation:no_comma"],
             "kwargs": [{"num_words": None}], "prompt_level_strict_acc": i % 2 == 0} for i in range(6)]
    path = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    src = load_source(SourceSpec(name="p", path=str(path), verified_only=True))
    assert [ex.prompt for ex in src.examples] == ["p0", "p2", "p4"]
    assert src.stats.rows_unverified == 3 and src.stats.rows_read == 6
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist([{"prompt": "p", "response": None}]), bad)
    with pytest.raises(DataError) as info:
        load_source(SourceSpec(name="b", path=str(bad)))
    assert info.value.location == f"{bad}:row 0" and info.value.field == "response"


def test_source_spec_validation():
    with pytest.raises(ValueError, match="exactly one"):
        SourceSpec(name="x")
    with pytest.raises(ValueError, match="unknown keys"):
        SourceSpec.from_mapping({"name": "x", "path": "a.jsonl", "ratio": 0.5})
    with pytest.raises(FileNotFoundError):
        load_source(SourceSpec(name="x", path="/nonexistent/a.jsonl"))


def test_hf_branch_loads_a_local_dataset_directory(tmp_path):
    """The Hugging Face path (load_dataset by name/config/split/revision), offline on a local folder."""
    folder = tmp_path / "hf_ds"
    folder.mkdir()
    rows = [{"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]}
            for i in range(5)]
    (folder / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    src = load_source(SourceSpec(name="hf", hf_name=str(folder), split="train"))
    assert [ex.completion for ex in src.examples] == [f"a{i}" for i in range(5)]
    ident = src.stats.identity
    assert ident["kind"] == "hf" and ident["revision"] == "unpinned" and ident["num_rows"] == 5
    assert src.examples[2].row_id == "2"


def test_ifeval_inputs_and_synthetic_eval_load_as_prompt_only_examples():
    from ifdistill.benchmarks.registry import get as _benchmark

    google = load_source(SourceSpec(name="ifeval", path=str(_benchmark("ifeval").local_rows()), need_completion=False))
    assert len(google.examples) == 541
    ex = google.examples[0]
    assert ex.key is not None and ex.instruction_id_list and len(ex.kwargs) == len(ex.instruction_id_list)
    syn = load_source(SourceSpec(name="syn_eval", synthetic="eval", need_completion=False))
    assert len(syn.examples) >= 100 and all(e.completion == "" and e.key for e in syn.examples)
    assert syn.stats.identity["kind"] == "synthetic" and syn.stats.identity["sha256"]


@pytest.mark.parametrize(("roles", "says"), [
    (["user", "assistant", "assistant"], "an assistant turn after an assistant turn"),
    (["assistant", "user"], "an assistant turn as the first turn"),
    (["user", "user"], "a user turn after a user turn"),
    (["system", "user", "assistant", "system"], "a system turn after an assistant turn"),
])
def test_a_turn_out_of_order_is_named_in_english(roles, says):
    from ifdistill.data.records import check_turn_order

    with pytest.raises(DataError, match=says):
        check_turn_order([{"role": r, "content": "x"} for r in roles], "f.jsonl:1")


def test_a_conversation_that_ends_wrong_is_named_in_english():
    from ifdistill.data.records import check_turn_order

    turns = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    with pytest.raises(DataError, match="ends with an assistant turn; a prompt ends with a user turn"):
        check_turn_order(turns, "f.jsonl:1", end="user")
