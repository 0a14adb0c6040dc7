"""Every bad input the CLIs accept is one line on stderr and exit 2, and leaves nothing on disk.

One table, one row per bad input: the command (run as a user runs it, a subprocess), the prefix of its
one stderr line, its exit code and what it leaves on disk (``nothing`` under the row's output folder; a
run directory ``unchanged``; ``written`` for the rows that show an input is accepted). Rows that show
an input is *accepted* (a UTF-8 byte-order mark) pair it with a later mistake, so the line that comes
back names that mistake and proves the marked line was read. ``ifdistill-train`` finds every row here
before a model loads (``ifdistill/train/preflight.py``), so the rows run side by side in seconds; a
bad row past the rows preflight samples is found while the data is built, after the run directory
exists, and that run is then marked failed with the reason (the one slow test here).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from ifdistill.train.preflight import SAMPLE_ROWS

ROOT = Path(__file__).resolve().parents[2]
BOM = b"\xef\xbb\xbf"
GOOD = {"prompt": "Say hi.", "completion": "hi"}
IFEVAL_ROW = {"key": 1, "prompt": "Say hi without commas.", "instruction_id_list": ["punctuation:no_comma"],
              "kwargs": [{}]}
SCORE_ROW = {**IFEVAL_ROW, "response": "hi there"}
MODULES = {"train": "ifdistill.cli.train", "eval": "ifdistill.cli.eval", "score": "ifdistill.cli.score",
           "report": "ifdistill.cli.report", "status": "ifdistill.cli.status"}


# lines that are not UTF-8, and the byte (0-based in the line) the error must name
SOURCE_LATIN1 = b'{"prompt": "caf\xe9", "completion": "x"}\n'
JSON_FF = b'{"prompt": "\xff", "completion": "x"}\n'
EVAL_BROKEN = b'{"key": 2, "prompt": "\xc3(", "instruction_id_list": [], "kwargs": []}\n'
SCORE_FF = b'{"key": 2, "response": "\xff"}\n'


def _byte(line: bytes) -> str:
    """``(byte N`` of the first byte of ``line`` that does not start a valid UTF-8 sequence."""
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"(byte {e.start}"
    raise AssertionError(f"{line!r} is UTF-8")


def _lines(*rows: object) -> bytes:
    return b"".join(r if isinstance(r, bytes) else json.dumps(r).encode() + b"\n" for r in rows)


def write_inputs(d: Path) -> None:
    """The bad (and BOM-marked) input files every row reads."""
    from tests.unit.results.result_files import simple_rows, write_eval_dir, write_run_dir

    files = {
        "one_row.jsonl": _lines(GOOD),
        "malformed.jsonl": _lines(GOOD, b'{"prompt": "x", \n'),
        "missing_field.jsonl": _lines(GOOD, {"prompt": "no answer here"}),
        "empty.jsonl": b"\n",
        "bom.jsonl": BOM + _lines(GOOD, GOOD, GOOD),
        "bom_then_bad.jsonl": BOM + _lines(GOOD, {"prompt": 3, "completion": "x"}),
        "not_utf8.jsonl": _lines(GOOD, GOOD, SOURCE_LATIN1),
        "not_utf8.json": b'[\n' + json.dumps(GOOD).encode() + b',\n' + JSON_FF + b']\n',
        "eval_malformed.jsonl": _lines(IFEVAL_ROW, b'{"key": 2,\n'),
        "eval_no_ids.jsonl": _lines({"key": 1, "prompt": "Say hi."}),
        "eval_bom_then_bad.jsonl": BOM + _lines(IFEVAL_ROW, {**IFEVAL_ROW, "key": 2, "kwargs": [{}, {}]}),
        "eval_not_utf8.jsonl": _lines(IFEVAL_ROW, EVAL_BROKEN),
        "score_malformed.jsonl": _lines(SCORE_ROW, b"[1,\n"),
        "score_no_response.jsonl": _lines({k: v for k, v in SCORE_ROW.items() if k != "response"}),
        "score_unknown_id.jsonl": _lines({**SCORE_ROW, "instruction_id_list": ["punctuation:no_commas"]}),
        "score_bom.jsonl": BOM + _lines(SCORE_ROW),
        "score_not_utf8.jsonl": _lines(SCORE_ROW, SCORE_FF),
        "two_user_turns.jsonl": _lines(GOOD, {"messages": [{"role": "user", "content": "Hi."},
                                                           {"role": "user", "content": "Say hi."},
                                                           {"role": "assistant", "content": "hi"}]}),
        "field_twice.jsonl": _lines(GOOD, b'{"prompt": "Say hi.", "completion": "", "completion": "hi"}\n'),
        "eval_two_user_turns.jsonl": _lines(IFEVAL_ROW, {**IFEVAL_ROW, "key": 2, "prompt": [
            {"role": "user", "content": "Say hi."}, {"role": "user", "content": "No commas."}]}),
    }
    d.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (d / name).write_bytes(content)
    (d / "empty_dir").mkdir()
    write_eval_dir(d / "not_results", simple_rows([True])).joinpath("results.json").unlink()
    write_eval_dir(d / "good_eval", simple_rows([True, False]))
    edited = write_eval_dir(d / "edited_eval", simple_rows([True, False]))
    text = (edited / "results.json").read_text()
    (edited / "results.json").write_text(text.replace('"prompt_level_strict_acc": 0.5', '"prompt_level_strict_acc": 1.0'))
    run = write_run_dir(d / "runs" / "r1", run_id="r1", seed=1, config={}, checkpoints={2: simple_rows([True])})
    (run / "run.json").write_text(json.dumps({"run_id": "r1", "launches": [{"finished": "t", "final_step": 2}]}))
    (run / "metrics.json").write_bytes((run / "metrics.json").read_bytes()[:40])
    # a run directory of another config: resuming it with this command must be refused, untouched
    other = d / "other_run"
    other.mkdir()
    (other / "run.json").write_text(json.dumps({
        "run_id": "demo-000000000000", "config_hash": "0" * 64, "hash_ignore": [],
        "hashed_config": {"optim": {"lr": 0.5}, "seed": 42}, "launches": [{"time": "t", "pid": 1}]}))


def _source(path: str, heldout: int = 0) -> list[str]:
    return [f"data.sources=[{{name: mine, path: {path}}}]", f"data.heldout={heldout}"]


@dataclasses.dataclass(frozen=True)
class Row:
    id: str
    cli: str
    args: Callable[[Path], list[str]]  # given the inputs folder
    prefix: str  # of the one stderr line; "{d}" is the inputs folder
    code: int = 2
    left: str = "nothing"  # nothing | unchanged | written


ROWS = [
    # training data: sources, replay, held-out rows
    Row("source_missing_file", "train", lambda d: _source(f"{d}/nope.jsonl"),
        "ifdistill-train: error: data.sources 'mine': source 'mine': no data file at {d}/nope.jsonl"),
    Row("source_malformed_json", "train", lambda d: _source(f"{d}/malformed.jsonl"),
        "ifdistill-train: error: data.sources 'mine': {d}/malformed.jsonl:2: not valid JSON"),
    Row("source_missing_field", "train", lambda d: _source(f"{d}/missing_field.jsonl"),
        "ifdistill-train: error: data.sources 'mine': {d}/missing_field.jsonl:2: field"),
    Row("source_roles_not_alternating", "train", lambda d: _source(f"{d}/two_user_turns.jsonl"),
        "ifdistill-train: error: data.sources 'mine': {d}/two_user_turns.jsonl:2: field 'messages[1].role': "
        "a user turn after a user turn"),
    Row("source_field_twice", "train", lambda d: _source(f"{d}/field_twice.jsonl"),
        "ifdistill-train: error: data.sources 'mine': {d}/field_twice.jsonl:2: field 'completion': the field "
        "appears twice"),
    Row("source_empty_file", "train", lambda d: _source(f"{d}/empty.jsonl"),
        "ifdistill-train: error: data.sources 'mine': {d}/empty.jsonl holds no rows"),
    # accepted: the only problem reported is the step count (a BOM error would be listed with it)
    Row("source_bom_accepted", "train", lambda d: [*_source(f"{d}/bom.jsonl"), "trainer.max_steps=0"],
        "ifdistill-train: error: trainer.max_steps=0 must be an integer >= 1 (optimizer steps to train)$"),
    Row("source_bom_then_bad_row", "train", lambda d: _source(f"{d}/bom_then_bad.jsonl"),
        "ifdistill-train: error: data.sources 'mine': {d}/bom_then_bad.jsonl:2: field 'prompt'"),
    Row("source_invalid_utf8", "train", lambda d: _source(f"{d}/not_utf8.jsonl"),
        "ifdistill-train: error: data.sources 'mine': {d}/not_utf8.jsonl:3: not UTF-8 text " + _byte(SOURCE_LATIN1)),
    Row("source_json_invalid_utf8", "train", lambda d: _source(f"{d}/not_utf8.json"),
        "ifdistill-train: error: data.sources 'mine': {d}/not_utf8.json:3: not UTF-8 text " + _byte(JSON_FF)),
    Row("heldout_larger_than_source", "train", lambda d: _source(f"{d}/one_row.jsonl", heldout=8),
        "ifdistill-train: error: data.heldout=8 leaves no training example in data.sources 'mine' "
        "({d}/one_row.jsonl: 1 usable row)"),
    Row("heldout_larger_than_max_examples", "train", lambda d: ["+data.sources.0.max_examples=8", "data.heldout=8"],
        "ifdistill-train: error: data.heldout=8 leaves no training example in data.sources 'synthetic_train'"),
    Row("replay_missing_file", "train",
        lambda d: [*_source(f"{d}/bom.jsonl"), "data.ratio=0.2", f"data.replay=[{{name: rep, path: {d}/nope.jsonl}}]"],
        "ifdistill-train: error: data.replay 'rep': source 'rep': no data file at {d}/nope.jsonl"),
    Row("replay_malformed_json", "train",
        lambda d: [*_source(f"{d}/bom.jsonl"), "data.ratio=0.2", f"data.replay=[{{name: rep, path: {d}/malformed.jsonl}}]"],
        "ifdistill-train: error: data.replay 'rep': {d}/malformed.jsonl:2: not valid JSON"),
    # run directories: another config's run, a resume policy the directory cannot meet
    Row("resume_run_dir_of_changed_config", "train", lambda d: [*_source(f"{d}/bom.jsonl"), f"run.dir={d}/other_run"],
        "ifdistill-train: error: {d}/other_run/run.json: this run has config_hash 0000000000000000000000000000000000000000000000000000000000000000, "
        "the config given has", left="unchanged"),
    Row("resume_required_without_checkpoint", "train", lambda d: [*_source(f"{d}/bom.jsonl"), "run.resume=required"],
        "ifdistill-train: error: run.resume=required but "),
    # evaluation sets
    Row("eval_missing_file", "eval", lambda d: [f"eval.data.path={d}/nope.jsonl"],
        "ifdistill-eval: error: cannot load data source 'ifeval' ({d}/nope.jsonl)"),
    Row("eval_malformed_json", "eval", lambda d: [f"eval.data.path={d}/eval_malformed.jsonl"],
        "ifdistill-eval: error: {d}/eval_malformed.jsonl:2: not valid JSON"),
    Row("eval_missing_instructions", "eval", lambda d: [f"eval.data.path={d}/eval_no_ids.jsonl"],
        "ifdistill-eval: error: {d}/eval_no_ids.jsonl:1: field 'instruction_id_list'"),
    Row("eval_bom_then_bad_row", "eval", lambda d: [f"eval.data.path={d}/eval_bom_then_bad.jsonl"],
        "ifdistill-eval: error: {d}/eval_bom_then_bad.jsonl:2: field 'kwargs'"),
    Row("eval_prompt_as_two_user_turns", "eval", lambda d: [f"eval.data.path={d}/eval_two_user_turns.jsonl"],
        "ifdistill-eval: error: {d}/eval_two_user_turns.jsonl:2: field 'prompt[1].role'"),
    Row("eval_invalid_utf8", "eval", lambda d: [f"eval.data.path={d}/eval_not_utf8.jsonl"],
        "ifdistill-eval: error: {d}/eval_not_utf8.jsonl:2: not UTF-8 text " + _byte(EVAL_BROKEN)),
    # ifdistill-score inputs
    Row("score_missing_file", "score", lambda d: [f"{d}/nope.jsonl"], "ifdistill-score: error: no such file: {d}/nope.jsonl"),
    Row("score_malformed_json", "score", lambda d: [f"{d}/score_malformed.jsonl"],
        "ifdistill-score: error: {d}/score_malformed.jsonl:2: field '<json>'"),
    Row("score_missing_field", "score", lambda d: [f"{d}/score_no_response.jsonl"],
        "ifdistill-score: error: {d}/score_no_response.jsonl:1: field 'response'"),
    Row("score_unknown_instruction", "score", lambda d: [f"{d}/score_unknown_id.jsonl"],
        "ifdistill-score: error: {d}/score_unknown_id.jsonl:1: field 'instruction_id_list"),
    Row("score_invalid_utf8", "score", lambda d: [f"{d}/score_not_utf8.jsonl"],
        "ifdistill-score: error: {d}/score_not_utf8.jsonl:2: field '<utf-8>': not UTF-8 text " + _byte(SCORE_FF)),
    Row("score_bom_accepted", "score", lambda d: [f"{d}/score_bom.jsonl"], "", code=0, left="written"),
    # ifdistill-report and ifdistill-status inputs
    Row("report_missing_dir", "report", lambda d: [f"{d}/nope"], "ifdistill-report: error: "),
    Row("report_no_runs", "report", lambda d: [f"{d}/empty_dir"], "ifdistill-report: error: "),
    Row("report_base_model_without_results", "report", lambda d: [f"{d}/good_eval", "--base-model", f"{d}/not_results"],
        "ifdistill-report: error: {d}/not_results: --base-model holds no results.json"),
    Row("report_edited_results", "report", lambda d: [f"{d}/edited_eval"],
        "ifdistill-report: error: {d}/edited_eval/results.json: checksum mismatch"),
    Row("report_truncated_metrics", "report", lambda d: [f"{d}/runs/r1"],
        "ifdistill-report: error: {d}/runs/r1/metrics.json: invalid JSON"),
    Row("status_missing_dir", "status", lambda d: [f"{d}/nope"], "ifdistill-status: "),
    Row("status_truncated_metrics", "status", lambda d: [f"{d}/runs/r1"],
        "ifdistill-status: {d}/runs/r1/metrics.json: invalid JSON"),
]


def command(row: Row, d: Path, out: Path) -> list[str]:
    """The row's command line; everything it may write goes under ``out``."""
    extra = {
        "train": ["model=tiny", "logger=csv", f"paths.output_root={out}", f"hydra.run.dir={out}/hydra"],
        "eval": ["eval=ifeval_local", "eval.backend=hf", f"output_dir={out}"],
        "score": ["-o", f"{out}/scored.jsonl"],
        "report": ["-o", str(out)],
        "status": [],
    }[row.cli]
    return [sys.executable, "-m", MODULES[row.cli], *row.args(d), *extra]


def run_row(row: Row, d: Path, work: Path) -> dict:
    out = work / row.id
    before = (d / "other_run" / "run.json").read_bytes()
    proc = subprocess.run(command(row, d, out), cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "HYDRA_FULL_ERROR": "0"})
    return {"proc": proc, "out": out, "other_unchanged": (d / "other_run" / "run.json").read_bytes() == before}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, dict]:
    """Every row run once, three at a time (each is a Python start-up plus a config check)."""
    d = tmp_path_factory.mktemp("inputs")
    write_inputs(d)
    work = tmp_path_factory.mktemp("outputs")
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        futures = {row.id: pool.submit(run_row, row, d, work) for row in ROWS}
        return {rid: {**f.result(), "d": d} for rid, f in futures.items()}


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_bad_input_is_one_line_and_exit_2(row: Row, outcomes):
    got = outcomes[row.id]
    proc, d = got["proc"], got["d"]
    err = proc.stderr.strip()
    assert "Traceback" not in proc.stdout + proc.stderr, err
    assert proc.returncode == row.code, (proc.returncode, err)
    if row.code == 0:
        assert err == ""
    else:
        assert len(err.splitlines()) == 1, err
        assert re.match(re.escape(row.prefix.format(d=d).rstrip("$")) + ("$" if row.prefix.endswith("$") else ""),
                        err), err
    written = sorted(p.relative_to(got["out"]).as_posix() for p in got["out"].rglob("*") if ".hydra" not in p.parts
                     and p.name != "hydra" and p.suffix != ".log") if got["out"].exists() else []
    if row.left == "written":
        assert written == ["scored.jsonl"]
    else:
        assert written == [], written
    assert got["other_unchanged"]


@pytest.mark.slow
def test_a_bad_row_past_the_sampled_rows_marks_the_run_failed(tmp_path):
    """Preflight reads the first SAMPLE_ROWS rows; a bad row after them is found while the data is built,
    after the run directory exists: one line, exit 2, the run marked failed with the reason."""
    src = tmp_path / "late_bad.jsonl"
    src.write_bytes(_lines(*[GOOD] * (SAMPLE_ROWS + 5), {"prompt": "x", "completion": 7}))
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", MODULES["train"], *_source(str(src)), "model=tiny", "logger=csv", "trainer.max_steps=1",
         f"paths.output_root={out}", f"hydra.run.dir={out}/hydra"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    line = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    expected = f"{src}:{SAMPLE_ROWS + 6}: field 'completion'"
    assert line.startswith("ifdistill-train: error: ") and expected in line, line
    (run,) = (out / "train" / "runs").iterdir()
    launch = json.loads((run / "run.json").read_text())["launches"][-1]
    assert launch.get("failed") and expected in launch["failure"] and not launch.get("finished")
    status = subprocess.run([sys.executable, "-m", MODULES["status"], str(run), "--json"], capture_output=True,
                            text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert json.loads(status.stdout)["state"] == "failed"
