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
