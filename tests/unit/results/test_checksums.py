"""results.json and metrics.json carry a checksum; an edited or truncated file is refused, naming it.

The files are written by their real writers (the evaluator's ``dumps_results``, :mod:`run_metrics`) and
read by the real CLIs (``ifdistill-report``, ``ifdistill-status``) in-process.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from ifdistill import checksum
from ifdistill.evaluator import output
from ifdistill.results import run_metrics
from ifdistill.cli import status as status_cli
from ifdistill.cli.report import main as report_main

from .result_files import simple_rows, write_run_dir


@pytest.fixture
def run(tmp_path: Path) -> Path:
    path = write_run_dir(tmp_path / "runs" / "r1", run_id="r1", seed=1, config={"method": {"name": "sft"}},
                         checkpoints={10: simple_rows([True, False, True, True])})
    (path / "run.json").write_text(json.dumps({"run_id": "r1", "launches": [{"finished": "t", "final_step": 10}]}))
    return path


def _edit(file: Path, old: str, new: str) -> None:
    text = file.read_text()
    assert old in text, old
    file.write_text(text.replace(old, new, 1))


def _truncate(file: Path) -> None:
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])


def _refused(main, argv, file: Path, capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(file) in err, err
    return err


def test_written_files_carry_a_matching_checksum(run):
    for file in (run / "metrics.json", run / "evals/step_000010/results.json"):
        payload = json.loads(file.read_text())
        assert payload["checksum"].startswith("sha256:") and payload["checksum"] == checksum.digest(payload)
    assert run_metrics.read(run)["checkpoints"]["10"]["step"] == 10
    assert output.load(run / "evals/step_000010").metrics["prompt_level_strict_acc"] == 0.75


def test_reindented_content_still_verifies(run):
    """The checksum covers the content, not the layout: a tool that re-indents the file keeps it valid."""
    file = run / "metrics.json"
    file.write_text(json.dumps(json.loads(file.read_text())))
    assert run_metrics.read(run)["run_id"] == "r1"


# (file in the run, an edit of one value in it, the CLIs that must refuse it: (main, argv of the run))
FILES = {
    "metrics.json": ("metrics.json", ('"prompt_level_strict_acc": 0.75', '"prompt_level_strict_acc": 0.95'),
                     [(status_cli.main, lambda run, out: [str(run)]),
                      (report_main, lambda run, out: [str(run), "-o", str(out)])]),
    "results.json": ("evals/step_000010/results.json", ('"prompt_level_loose_acc": 0.75', '"prompt_level_loose_acc": 1.0'),
                     [(report_main, lambda run, out: [str(run / "evals/step_000010"), "-o", str(out)])]),
}


@pytest.mark.parametrize("damage", ["edit", "truncate"])
@pytest.mark.parametrize("name", list(FILES))
def test_a_damaged_file_is_refused_naming_it(run, name, damage, capsys, tmp_path):
    rel, (old, new), clis = FILES[name]
    file = run / rel
    if damage == "edit":
        _edit(file, old, new)
    else:
        _truncate(file)
    for main, argv in clis:
        err = _refused(main, argv(run, tmp_path / "report"), file, capsys)
        assert ("checksum mismatch" if damage == "edit" else "invalid JSON") in err
    assert not (tmp_path / "report").exists()


def test_file_without_checksum_is_read_with_a_warning(run, caplog):
    file = run / "metrics.json"
    payload = json.loads(file.read_text())
    del payload["checksum"]
    file.write_text(json.dumps(payload))
    with caplog.at_level(logging.WARNING, logger="ifdistill.checksum"):
        assert run_metrics.read(run)["run_id"] == "r1"
    assert [r.getMessage() for r in caplog.records] == [f"{file}: no checksum (written before checksums were "
                                                        "recorded); read unverified"]
    run_metrics.record_train_metrics(run, 10, {"val/tfa": 0.5})  # the next write records one
    assert json.loads(file.read_text())["checksum"] == checksum.digest(json.loads(file.read_text()))
