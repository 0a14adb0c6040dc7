"""A re-run resumes from the newest *complete* checkpoint, whatever the strategy's on-disk form."""

from __future__ import annotations

import torch

from ifdistill.train.checkpointing import checkpoint_step, consolidated_state_dict, find_resume_checkpoint, is_complete


def _save(path, step):
    torch.save({"state_dict": {"w": torch.full((2,), float(step))}, "global_step": step}, path)


def test_newest_complete_file_wins_over_a_truncated_newer_one(tmp_path):
    for s in (2, 4, 6):
        _save(tmp_path / f"step={s:06d}.ckpt", s)
    data = (tmp_path / "step=000006.ckpt").read_bytes()
    (tmp_path / "step=000006.ckpt").write_bytes(data[: len(data) // 2])  # killed while writing
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    assert not is_complete(tmp_path / "step=000006.ckpt")
    assert find_resume_checkpoint(tmp_path) == tmp_path / "step=000004.ckpt"
    assert consolidated_state_dict(tmp_path / "step=000004.ckpt")["w"].tolist() == [4.0, 4.0]
    assert checkpoint_step("step=000123.ckpt") == 123


def test_sharded_folders_need_their_final_marker(tmp_path):
    ds = tmp_path / "step=000008.ckpt"  # DeepSpeed: `latest` names the tag folder, written last
    (ds / "checkpoint").mkdir(parents=True)
    torch.save({"x": 1}, ds / "checkpoint" / "mp_rank_00_model_states.pt")
    assert not is_complete(ds)
    (ds / "latest").write_text("checkpoint")
    assert is_complete(ds)
    fsdp = tmp_path / "step=000010.ckpt"  # FSDP2: .metadata (torch.distributed.checkpoint) + meta.pt
    fsdp.mkdir()
    torch.save({"global_step": 10}, fsdp / "meta.pt")
    assert not is_complete(fsdp)
    (fsdp / ".metadata").write_bytes(b"x")
    assert find_resume_checkpoint(tmp_path) == fsdp


def test_no_checkpoint_dir_means_a_fresh_run(tmp_path):
    assert find_resume_checkpoint(tmp_path / "missing") is None


def test_resume_sets_aside_truncated_and_corrupt_checkpoints_and_removes_temp_files(tmp_path):
    """An unreadable newer checkpoint is moved to set_aside/ (not resumed from, not deleted, not counted);
    a temp file of an interrupted write is removed; the newest good one is resumed from."""
    from ifdistill.train.checkpointing import SET_ASIDE

    for s in (2, 4, 6):
        _save(tmp_path / f"step={s:06d}.ckpt", s)
    data = bytearray((tmp_path / "step=000006.ckpt").read_bytes())
    (tmp_path / "step=000006.ckpt").write_bytes(data[: len(data) - 100])  # cut short
    data4 = bytearray((tmp_path / "step=000004.ckpt").read_bytes())
    member = data4.find(bytes(torch.tensor([4.0]).numpy().tobytes()))
    assert member > 0
    data4[member] ^= 0xFF  # same size, a flipped byte inside the tensor data: the zip's CRC catches it
    (tmp_path / "step=000004.ckpt").write_bytes(bytes(data4))
    assert is_complete(tmp_path / "step=000004.ckpt")  # the cheap check cannot see it ...
    assert not is_complete(tmp_path / "step=000004.ckpt", verify=True)  # ... the CRCs do
    (tmp_path / ".step=000008.ckpt.tmp").write_bytes(b"partial")
    assert checkpoint_step(".step=000008.ckpt.tmp") is None

    assert find_resume_checkpoint(tmp_path) == tmp_path / "step=000002.ckpt"  # read-only: moves nothing
    assert (tmp_path / "step=000006.ckpt").exists()
    assert find_resume_checkpoint(tmp_path, set_aside=True) == tmp_path / "step=000002.ckpt"
    assert sorted(p.name for p in tmp_path.iterdir()) == [SET_ASIDE, "step=000002.ckpt"]
    aside = sorted(p.name for p in (tmp_path / SET_ASIDE).iterdir())
    assert [n.rsplit(".", 1)[0] for n in aside] == ["step=000004.ckpt", "step=000006.ckpt"]


def test_retention_counts_complete_checkpoints_only(tmp_path):
    from ifdistill.train.checkpointing import StepCheckpoint

    for s in (2, 4, 6, 8):
        _save(tmp_path / f"step={s:06d}.ckpt", s)
    (tmp_path / "step=000010.ckpt").write_bytes(b"not a zip")  # incomplete: neither kept nor counted
    cb = StepCheckpoint(tmp_path, every_n_steps=2, keep_last=2)
    removed = cb.prune()
    assert sorted(p.name for p in removed) == ["step=000002.ckpt", "step=000004.ckpt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step=000006.ckpt", "step=000008.ckpt", "step=000010.ckpt"]


def test_a_full_disk_is_one_line_with_the_path_and_the_free_space(tmp_path):
    import errno
    import shutil

    from ifdistill.train.checkpointing import write_error

    target = tmp_path / "step=000020.ckpt"
    err = write_error(target, OSError(errno.ENOSPC, "No space left on device"))
    free_mib = shutil.disk_usage(tmp_path).free / 2**20
    text = str(err)
    assert "\n" not in text and str(target) in text and "free" in text
    # the free space printed is the filesystem's (to 0.1 MiB; another process may write meanwhile)
    printed = float(text.split("(")[1].split(" MiB")[0])
    assert abs(printed - free_mib) < max(1.0, 0.01 * free_mib)


def test_a_folder_checkpoint_is_incomplete_while_its_writing_marker_lies_beside_it(tmp_path):
    """DeepSpeed writes `latest` on rank 0 while another rank may still write its shard: the marker rank 0
    removes after the save's closing barrier decides; on resume a marked folder is set aside."""
    from ifdistill.train.checkpointing import SET_ASIDE, writing_marker

    for step in (2, 4):
        ds = tmp_path / f"step={step:06d}.ckpt"
        (ds / "checkpoint").mkdir(parents=True)
        torch.save({"x": step}, ds / "checkpoint" / "zero_pp_rank_0_mp_rank_00_model_states.pt")
        (ds / "latest").write_text("checkpoint")
    writing_marker(tmp_path / "step=000004.ckpt").touch()  # rank 1's optimizer shard still being written
    assert is_complete(tmp_path / "step=000002.ckpt") and not is_complete(tmp_path / "step=000004.ckpt")
    assert find_resume_checkpoint(tmp_path, set_aside=True) == tmp_path / "step=000002.ckpt"
    assert sorted(p.name for p in tmp_path.iterdir()) == [SET_ASIDE, "step=000002.ckpt"]
