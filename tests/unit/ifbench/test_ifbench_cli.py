"""``ifdistill-score`` scores IFBench rows, alone or mixed with IFEval ids, and names a bad IFBench
kwarg by file, line and field."""

from __future__ import annotations

import json

from ifdistill.cli.score import main


def test_scores_ifbench_and_mixed_rows(tmp_path, capsys):
    rows = [
        {"key": "a", "prompt": "p", "instruction_id_list": ["count:numbers"], "kwargs": [{"N": 2.0, "word": None}],
         "response": "1 and 2"},
        {"key": "b", "prompt": "q", "instruction_id_list": ["punctuation:no_comma", "format:no_whitespace"],
         "kwargs": [{}, {}], "response": "a b"},
    ]
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main([str(src), "-o", str(out)]) == 0
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["strict_inst"] for r in scored] == [[True], [True, False]]
    assert "scored 2 row(s)" in capsys.readouterr().out


def test_bad_ifbench_kwarg_names_line_and_field(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text("\n" + json.dumps({"prompt": "p", "instruction_id_list": ["count:words_japanese"],
                                      "kwargs": [{"N": 0}], "response": "x"}) + "\n")
    assert main([str(src), "-o", str(tmp_path / "out.jsonl")]) == 2
    err = capsys.readouterr().err
    assert f"{src}:2: field 'kwargs[0].N'" in err and not (tmp_path / "out.jsonl").exists()
