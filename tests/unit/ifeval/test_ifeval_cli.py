"""``ifdistill-score``: byte-identical output across runs, errors naming line and field, --skip-invalid."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ifdistill.cli import score as cli

ROWS = [
    {
        "key": 1,
        "prompt": "Résumé without commas, please.",
        "instruction_id_list": ["punctuation:no_comma", "length_constraints:number_words"],
        "kwargs": [{}, {"num_words": 3, "relation": "at least"}],
        "response": "Un résumé — sans virgule\n**ok**",
    },
    {
        "id": "b",
        "prompt": "Answer in Spanish.",
        "instruction_id_list": ["language:response_language"],
        "kwargs": [{"language": "es", "keywords": None}],
        "response": "El tiempo es muy agradable hoy y vamos al parque con nuestros amigos.",
    },
    {
        "key": 3,
        "prompt": "Title?",
        "instruction_id_list": ["detectable_format:title"],
        "kwargs": [{}],
        "response": "Sure, here:\nno title",
    },
]


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ifdistill.cli.score", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_two_runs_give_byte_identical_files(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", ROWS)
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    p1 = run_cli(str(src), "-o", str(first))
    p2 = run_cli(str(src), "-o", str(second))
    assert p1.returncode == 0, p1.stderr
    assert p2.returncode == 0, p2.stderr
    assert first.read_bytes() == second.read_bytes()
    assert p1.stdout.replace(str(first), "OUT") == p2.stdout.replace(str(second), "OUT")
    for name in ("prompt_level_strict_acc", "inst_level_strict_acc", "prompt_level_loose_acc", "inst_level_loose_acc"):
        assert name in p1.stdout

    out = [json.loads(line) for line in first.read_text(encoding="utf-8").splitlines()]
    assert len(out) == 3
    assert list(out[0])[:5] == ["key", "prompt", "instruction_id_list", "kwargs", "response"]
    assert list(out[1])[0] == "id" and out[1]["kwargs"] == [{"language": "es", "keywords": None}]
    assert list(out[0])[-4:] == ["strict_inst", "loose_inst", "strict_prompt", "loose_prompt"]
    assert out[0]["strict_inst"] == [True, True]
    assert out[2]["strict_inst"] == [False] and out[2]["loose_inst"] == [False]
    assert "Résumé" in first.read_text(encoding="utf-8")  # ensure_ascii=False


@pytest.mark.parametrize(
    "bad, field",
    [
        ({"instruction_id_list": ["keywords:nope"], "kwargs": [{}]}, "instruction_id_list[0]"),
        ({"kwargs": [{"language": "es"}], "instruction_id_list": ["punctuation:no_comma"]}, "kwargs[0].language"),
        ({"response": None}, "response"),
        ({"response": ["a"]}, "response"),
        ({"prompt": None, "drop": "prompt"}, "prompt"),
    ],
)
def test_bad_row_exits_non_zero_naming_line_and_field(tmp_path, bad, field):
    broken = dict(ROWS[0])
    drop = bad.pop("drop", None)
    broken.update(bad)
    if drop:
        del broken[drop]
    src = write_jsonl(tmp_path / "in.jsonl", [ROWS[0], broken, ROWS[2]])
    out = tmp_path / "out.jsonl"
    proc = run_cli(str(src), "-o", str(out))
    assert proc.returncode != 0
    assert f"{src}:2: field '{field}'" in proc.stderr
    assert not out.exists()


def test_skip_invalid_skips_reports_and_counts(tmp_path, capsys):
    broken = dict(ROWS[0], response=17)
    src = tmp_path / "in.jsonl"
    write_jsonl(src, [ROWS[0], broken])
    with src.open("a", encoding="utf-8") as handle:
        handle.write("\n{not json\n")
        handle.write(json.dumps(ROWS[2]) + "\n")
    out = tmp_path / "out.jsonl"
    assert cli.main([str(src), "-o", str(out), "--skip-invalid"]) == 0
    captured = capsys.readouterr()
    assert f"{src}:2: field 'response'" in captured.err
    assert f"{src}:4: field '<json>'" in captured.err  # line 3 is blank and ignored
    assert "skipped 2 invalid row(s)" in captured.out
    kept = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["key"] for r in kept] == [1, 3]


def test_unparsable_line_without_skip_is_an_error(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(ROWS[0]) + "\n[1,\n", encoding="utf-8")
    assert cli.main([str(src), "-o", str(tmp_path / "o.jsonl")]) == 2
    assert f"{src}:2: field '<json>'" in capsys.readouterr().err


def test_missing_input_file(tmp_path, capsys):
    assert cli.main([str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "o.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_console_script_entry_point_is_main():
    from importlib.metadata import entry_points

    scripts = {ep.name: ep.value for ep in entry_points(group="console_scripts")}
    assert scripts.get("ifdistill-score") == "ifdistill.cli.score:main"


@pytest.mark.parametrize("content", [b"", b"\n\n", b'{"prompt": "x"}\n'], ids=["empty", "blank", "invalid"])
def test_a_failed_run_leaves_an_existing_output_intact(tmp_path, content):
    src = tmp_path / "in.jsonl"
    src.write_bytes(content)
    out = tmp_path / "existing.jsonl"
    out.write_text("precious\n")
    skip = ["--skip-invalid"] if content.startswith(b"{") else []
    proc = run_cli(str(src), "-o", str(out), *skip)
    assert proc.returncode == 2, proc.stderr
    assert out.read_text() == "precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.jsonl", "in.jsonl"]  # no temp file left


def test_undecodable_input_is_an_error_naming_file_and_line(tmp_path):
    src = tmp_path / "in.bin"
    src.write_bytes((json.dumps(ROWS[0]) + "\n").encode() + bytes(range(128, 256)) + b"\n")
    out = tmp_path / "o.jsonl"
    proc = run_cli(str(src), "-o", str(out))
    assert proc.returncode == 2
    assert f"{src}:2: field '<utf-8>': not UTF-8 text (byte 0" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()
