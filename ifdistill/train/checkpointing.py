"""Checkpoints: when they are written, which one a re-run resumes from, and plain state dicts from any of them.

Three on-disk forms exist, depending on the strategy:

- a file ``step=000200.ckpt`` (single process, DDP): a ``torch.save`` zip archive;
- a folder ``step=000200.ckpt/`` with DeepSpeed's per-rank shards, ``latest`` and ``checkpoint/``;
- a folder ``step=000200.ckpt/`` with FSDP2's distributed checkpoint (``*.distcp``, ``.metadata``) and
  Lightning's ``meta.pt``.

:func:`find_resume_checkpoint` picks the newest *complete* one: a process killed while writing leaves
a truncated zip or a folder without its final marker, and resuming from that would fail (or worse).
:func:`consolidated_state_dict` turns any form into one plain ``{name: tensor}`` dict (ZeRO-3 shards are
gathered with DeepSpeed's ``zero_to_fp32``, FSDP2's with ``dcp_to_torch_save``).
"""

from __future__ import annotations

import re
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Optional

import torch
from lightning.pytorch.callbacks import ModelCheckpoint

STEP_RE = re.compile(r"step=(\d+)")
FILENAME = "step={step:06d}"


def checkpoint_step(path: str | Path) -> Optional[int]:
    m = STEP_RE.search(Path(path).name)
    return int(m.group(1)) if m else None


def _zip_ok(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as z:
            return len(z.namelist()) > 0
    except (zipfile.BadZipFile, OSError):
        return False


def is_complete(path: str | Path) -> bool:
    """Whether a checkpoint was written to the end (see the module docstring for the three forms)."""
    path = Path(path)
    if path.is_file():
        return _zip_ok(path)
    if not path.is_dir():
        return False
    if (path / "latest").is_file():  # DeepSpeed: `latest` names the tag folder, written after the shards
        tag = path / (path / "latest").read_text().strip()
        shards = list(tag.glob("*.pt")) if tag.is_dir() else []
        return bool(shards) and all(_zip_ok(s) for s in shards)
    if (path / ".metadata").is_file():  # torch.distributed.checkpoint writes .metadata last
        return (path / "meta.pt").is_file() and _zip_ok(path / "meta.pt")
    return False


def find_resume_checkpoint(ckpt_dir: str | Path) -> Optional[Path]:
    """The newest complete ``step=*`` checkpoint under ``ckpt_dir``, or ``None``."""
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        return None
    found = [(checkpoint_step(p), p) for p in ckpt_dir.iterdir() if not p.is_symlink() and checkpoint_step(p) is not None]
    for _, path in sorted(found, key=lambda sp: sp[0], reverse=True):
        if is_complete(path):
            return path
    return None


class StepCheckpoint(ModelCheckpoint):
    """Every ``every_n_train_steps`` optimizer steps, keeping the newest ``keep_last``, plus the final step.

    The final checkpoint matters for re-runs: a finished run resumes at ``max_steps`` and stops at once
    instead of training again.
    """

    def __init__(self, dirpath: str | Path, every_n_steps: int, keep_last: int = 3, **kwargs: Any):
        super().__init__(dirpath=str(dirpath), filename=FILENAME, auto_insert_metric_name=False,
                         every_n_train_steps=int(every_n_steps), save_top_k=int(keep_last), monitor="step",
                         mode="max", save_last=False, save_on_train_epoch_end=False, **kwargs)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        if 0 < trainer.max_steps <= trainer.global_step and not self._should_skip_saving_checkpoint(trainer):
            candidates = self._monitor_candidates(trainer)
            self._save_topk_checkpoint(trainer, candidates)

    def save_now(self, trainer) -> None:
        """Save the current step (unless it is saved already) under the same name and ``keep_last`` rule;
        collective, like every save (all ranks call it). Used on a requeue signal."""
        if self._last_global_step_saved != trainer.global_step:
            self._save_topk_checkpoint(trainer, self._monitor_candidates(trainer))


def consolidated_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """Plain float tensors of the LightningModule's state dict from any checkpoint form (CPU, one process)."""
    path = Path(path)
    if path.is_file():
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
        return dict(ckpt["state_dict"])
    if (path / "latest").is_file():
        from lightning.pytorch.utilities.deepspeed import convert_zero_checkpoint_to_fp32_state_dict

        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "consolidated.ckpt"
            convert_zero_checkpoint_to_fp32_state_dict(path, out)
            return dict(torch.load(out, map_location="cpu", weights_only=False)["state_dict"])
    if (path / ".metadata").is_file():
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "consolidated.pt"
            dcp_to_torch_save(path, out)
            state = torch.load(out, map_location="cpu", weights_only=False)
            return dict(state["state_dict"])
    raise FileNotFoundError(f"{path} is not a complete Lightning, DeepSpeed or FSDP2 checkpoint")


def save_consolidated(path: str | Path, out_file: str | Path) -> Path:
    """Write :func:`consolidated_state_dict` of ``path`` to ``out_file`` (``torch.save``)."""
    out = Path(out_file)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(consolidated_state_dict(path), out)
    return out
