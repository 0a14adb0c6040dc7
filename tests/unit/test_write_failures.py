"""A write refused for lack of space or permission, on a real small filesystem (a tmpfs), as every writer
meets it: a plain ``OSError`` without a file name, safetensors' own error, a read-only mount."""

from __future__ import annotations

import errno

import pytest
import torch

from ifdistill.paths import write_text_atomic
from ifdistill.write_failures import WriteFailed, as_write_failure, cause, writing
from tests.support import small_filesystem


def test_safetensors_full_disk_names_the_export_and_the_free_space(tmp_path):
    """safetensors reports ENOSPC as a ``SafetensorError`` (no ``OSError``, no file name): read from its text."""
    from safetensors.torch import save_file

    fs = tmp_path / "fs"
    with small_filesystem(fs, 256 * 1024):
        target = fs / "exports" / "step_000002"
        with pytest.raises(WriteFailed) as info:
            with writing(target, "export"):
                target.mkdir(parents=True)
                save_file({"w": torch.zeros(2**18)}, str(target / "model.safetensors"))  # 1 MiB
        assert type(info.value.__cause__).__name__ == "SafetensorError"
        line = str(info.value)
        assert line.startswith(f"no space left to write export {target} (") and "\n" not in line
        assert line.endswith(" MiB free on that filesystem); free space and re-run the same command")
        assert info.value.errno == errno.ENOSPC and info.value.path == target


def test_an_atomic_write_on_a_full_disk_names_its_target_and_leaves_nothing(tmp_path):
    """``write()`` failing names no file; the atomic writer names its target, and removes its temp file."""
    fs = tmp_path / "fs"
    with small_filesystem(fs, 64 * 1024):
        target = fs / "reports" / "summary.json"
        with pytest.raises(OSError) as info:
            write_text_atomic(target, "x" * (1 << 20))
        assert info.value.errno == errno.ENOSPC and info.value.filename == str(target)
        failure = as_write_failure(info.value)
        assert str(failure).startswith(f"no space left to write file {target} (")
        assert list((fs / "reports").iterdir()) == []  # neither the file nor a temp file


def test_a_read_only_filesystem_is_a_refused_write_and_other_errors_pass_through(tmp_path):
    fs = tmp_path / "fs"
    with small_filesystem(fs, 64 * 1024):
        import subprocess

        subprocess.run(["mount", "-o", "remount,ro", str(fs)], check=True)
        with pytest.raises(OSError) as info:
            (fs / "evals").mkdir()
        assert cause(RuntimeError("wrapped")) is None
        wrapped = RuntimeError("could not save")
        wrapped.__cause__ = info.value
        failure = as_write_failure(wrapped)
        assert str(failure).startswith(f"cannot write file {fs / 'evals'}: read-only file system (")
        with pytest.raises(ValueError, match="not a write"):  # anything else is raised unchanged
            with writing(fs, "report"):
                raise ValueError("not a write")


def test_a_writers_own_line_is_kept():
    """A checkpoint's line (already naming its file and the free space) is told as it is; an error raised
    ``from None`` over a full disk (the teacher cache's, naming its shard) is not rewritten either."""
    from ifdistill.train.checkpointing import CheckpointWriteError

    own = CheckpointWriteError("no space left to write checkpoint /x/step=000002.ckpt (1.0 MiB free ...)")
    assert as_write_failure(own) is own
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise ValueError("/cache/shard-1.npz: cannot write the teacher cache (...)") from None
    except ValueError as err:
        assert cause(err) is None and as_write_failure(err) is None


def test_a_report_on_a_full_disk_is_one_line_and_exit_2(tmp_path, capsys):
    """``ifdistill-report`` writing into a full filesystem: one line naming the report folder and the free
    space, exit 2 (its inputs are read first, so the line is about the write alone)."""
    from ifdistill.cli.report import main
    from tests.unit.results.result_files import simple_rows, write_eval_dir

    evals = write_eval_dir(tmp_path / "eval", simple_rows([True, False]))
    fs = tmp_path / "fs"
    with small_filesystem(fs, 64 * 1024):
        with open(fs / "filler", "wb", buffering=0) as f:
            with pytest.raises(OSError):
                while True:
                    f.write(b"\0" * 4096)
        code = main([str(evals), "-o", str(fs / "report")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("ifdistill-report: error: no space left to write ") and str(fs / "report") in err, err
    assert " MiB free on that filesystem); free space and re-run the same command" in err
