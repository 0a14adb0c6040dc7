"""Checkpoints: when they are written, which one a re-run resumes from, and plain state dicts from any of them.

Three on-disk forms exist, depending on the strategy:

- a file ``step=000200.ckpt`` (single process, DDP): a ``torch.save`` zip archive;
- a folder ``step=000200.ckpt/`` with DeepSpeed's per-rank shards, ``latest`` and ``checkpoint/``;
- a folder ``step=000200.ckpt/`` with FSDP2's distributed checkpoint (``*.distcp``, ``.metadata``) and
  Lightning's ``meta.pt``.

A file checkpoint is written to ``.step=000200.ckpt.tmp``, fsynced and renamed into place, so a name
``step=*.ckpt`` only ever holds a whole checkpoint and a re-written step replaces the old file in one
step (never a ``-v1`` copy). A folder checkpoint keeps its strategy's own completeness marker, and
is also incomplete while ``.step=000200.ckpt.writing`` lies beside it (rank 0 creates it before the
collective save and removes it after the barrier that ends it).

:func:`find_resume_checkpoint` picks the newest *complete* one; with ``set_aside=True`` (the launching
rank, before resuming) every newer checkpoint that is incomplete or unreadable -- a disk that filled
up, a copy cut short, a file written before writes were atomic -- is moved to ``checkpoints/set_aside/``
with a message, and leftover temp files are removed: nothing is resumed from, counted, or overwritten
silently. Retention (``keep_last``) counts complete checkpoints only.
:func:`consolidated_state_dict` turns any form into one plain ``{name: tensor}`` dict (ZeRO-3 shards are
gathered with DeepSpeed's ``zero_to_fp32``, FSDP2's with ``dcp_to_torch_save``).
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import tempfile
import time
import zipfile
from weakref import proxy
from pathlib import Path
from typing import Any, Optional

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import ModelCheckpoint

from ifdistill.runs.rundir import checkpoint_step  # noqa: F401  (the checkpoint name's step: the run layout's rule)
from ifdistill.write_failures import WriteFailed, cause, failure_line

log = logging.getLogger(__name__)

FILENAME = "step={step:06d}"
SET_ASIDE = "set_aside"  # checkpoints/set_aside/: incomplete or unreadable checkpoints, kept for inspection
TMP_SUFFIX = ".tmp"
WRITING_SUFFIX = ".writing"  # .step=000200.ckpt.writing beside a folder checkpoint until every rank wrote


def writing_marker(path: str | Path) -> Path:
    """The file that says a folder checkpoint is still being written (DeepSpeed writes ``latest`` on
    rank 0 before the other ranks' shards are on disk, so ``latest`` alone does not prove completeness)."""
    path = Path(path)
    return path.with_name(f".{path.name}{WRITING_SUFFIX}")


class CheckpointWriteError(WriteFailed):
    """A checkpoint could not be written (the message names the path and, for a full disk, the free space)."""


def _zip_ok(path: Path, verify: bool = False) -> bool:
    """A readable zip archive (torch.save's format); ``verify`` also checks every member's CRC."""
    try:
        with zipfile.ZipFile(path) as z:
            return len(z.namelist()) > 0 and (not verify or z.testzip() is None)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError):
        return False


def is_complete(path: str | Path, verify: bool = False) -> bool:
    """Whether a checkpoint was written to the end (see the module docstring for the three forms);
    ``verify`` reads a file checkpoint whole and checks its CRCs (a corrupted middle, not only a cut end)."""
    path = Path(path)
    if writing_marker(path).exists():
        return False
    if path.is_file():
        return _zip_ok(path, verify)
    if not path.is_dir():
        return False
    if (path / "latest").is_file():  # DeepSpeed: `latest` names the tag folder, written after the shards
        tag = path / (path / "latest").read_text().strip()
        shards = list(tag.glob("*.pt")) if tag.is_dir() else []
        return bool(shards) and all(_zip_ok(s) for s in shards)
    if (path / ".metadata").is_file():  # torch.distributed.checkpoint writes .metadata last
        return (path / "meta.pt").is_file() and _zip_ok(path / "meta.pt")
    return False


def _checkpoints(ckpt_dir: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every ``step=*.ckpt`` entry, newest first."""
    if not ckpt_dir.is_dir():
        return []
    found = [(checkpoint_step(p), p) for p in ckpt_dir.iterdir() if not p.is_symlink()]
    return sorted(((s, p) for s, p in found if s is not None), key=lambda sp: sp[0], reverse=True)


def find_resume_checkpoint(ckpt_dir: str | Path, set_aside: bool = False) -> Optional[Path]:
    """The newest complete ``step=*.ckpt`` checkpoint under ``ckpt_dir``, or ``None``.

    ``set_aside``: move every newer incomplete or unreadable one to ``set_aside/`` (saying so) and remove
    temp files of interrupted writes -- only the process that owns the run directory may do this."""
    ckpt_dir = Path(ckpt_dir)
    if set_aside and ckpt_dir.is_dir():
        for tmp in ckpt_dir.glob(f".step=*{TMP_SUFFIX}"):
            log.warning("removing %s: a checkpoint write that never finished", tmp)
            shutil.rmtree(tmp) if tmp.is_dir() else tmp.unlink()
        for marker in ckpt_dir.glob(f".step=*{WRITING_SUFFIX}"):
            target = marker.with_name(marker.name[1:-len(WRITING_SUFFIX)])
            if target.exists():
                set_checkpoint_aside(target)
            marker.unlink()
    for _, path in _checkpoints(ckpt_dir):
        if is_complete(path, verify=True):
            return path
        if set_aside:
            set_checkpoint_aside(path)
    return None


def set_checkpoint_aside(path: Path) -> Path:
    """Move an incomplete or unreadable checkpoint to ``set_aside/`` (never deleted: it is evidence)."""
    dest_dir = path.parent / SET_ASIDE
    dest_dir.mkdir(exist_ok=True)
    dest = dest_dir / f"{path.name}.{time.strftime('%Y%m%dT%H%M%S')}"
    os.replace(path, dest)
    log.warning("checkpoint %s is incomplete or unreadable; moved to %s, resuming from an earlier one", path, dest)
    print(f"[checkpoint] {path.name} is incomplete or unreadable: moved to {dest}", flush=True)
    return dest


def _writes_one_file(strategy: Any) -> bool:
    """Whether the strategy saves one file from rank 0 (single device, DDP), not a folder of shards."""
    from lightning.pytorch.strategies import Strategy

    return type(strategy).save_checkpoint is Strategy.save_checkpoint


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_error(path: Path, err: OSError) -> CheckpointWriteError:
    """One line for a failed checkpoint write; a full disk or a refused write says how much space is left
    there (:func:`ifdistill.write_failures.failure_line`)."""
    found = cause(err)
    if found is not None:
        text = failure_line(path, "checkpoint", found[0], found[1],
                            then="re-run the same command to resume from the last complete checkpoint")
    else:
        text = f"could not write checkpoint {path}: {err.strerror or err}"
    out = CheckpointWriteError(text)  # one argument: str() is the line itself, without "[Errno 28]"
    out.errno = err.errno
    return out


class StepCheckpoint(ModelCheckpoint):
    """Every ``every_n_train_steps`` optimizer steps, keeping the newest ``keep_last``, plus the final step.

    The final checkpoint matters for re-runs: a finished run resumes at ``max_steps`` and stops at once
    instead of training again. Lightning keeps every checkpoint (``save_top_k=-1``, no version counter);
    :meth:`prune` applies ``keep_last`` to the complete checkpoints on disk, so files of earlier launches
    count and set-aside ones do not.
    """

    def __init__(self, dirpath: str | Path, every_n_steps: int, keep_last: int = 3, **kwargs: Any):
        super().__init__(dirpath=str(dirpath), filename=FILENAME, auto_insert_metric_name=False,
                         every_n_train_steps=int(every_n_steps), save_top_k=-1, monitor="step",
                         mode="max", save_last=False, save_on_train_epoch_end=False,
                         enable_version_counter=False, **kwargs)
        self.keep_last = int(keep_last)

    def _save_checkpoint(self, trainer, filepath: str) -> None:
        target = Path(filepath)
        if not _writes_one_file(trainer.strategy):  # a folder of shards, written by every rank
            if trainer.is_global_zero:
                writing_marker(target).touch()
            super()._save_checkpoint(trainer, filepath)  # ends with a barrier: every rank's shards are written
            if trainer.is_global_zero:
                writing_marker(target).unlink(missing_ok=True)
                _fsync_dir(target.parent)
        else:
            checkpoint = trainer._checkpoint_connector.dump_checkpoint(self.save_weights_only)
            failure: Optional[CheckpointWriteError] = None
            if trainer.is_global_zero:
                failure = self._write_file(trainer, checkpoint, target)
            # every rank learns of a failed write (otherwise the others would wait in the next collective)
            if not trainer.strategy.reduce_boolean_decision(failure is None, all=True):
                raise failure or CheckpointWriteError(f"rank 0 could not write checkpoint {target}")
            self._last_global_step_saved = trainer.global_step
            self._last_checkpoint_saved = filepath
            if trainer.is_global_zero:
                for logger in trainer.loggers:
                    logger.after_save_checkpoint(proxy(self))
        if trainer.is_global_zero:
            self.prune()
        trainer.strategy.barrier("StepCheckpoint.prune")

    @staticmethod
    def _write_file(trainer, checkpoint: dict, target: Path) -> Optional[CheckpointWriteError]:
        """temp file -> fsync -> rename over ``target``; a failure removes the temp file."""
        tmp = target.with_name(f".{target.name}{TMP_SUFFIX}")
        plugin = trainer.strategy.checkpoint_io
        try:
            if type(plugin) is TorchCheckpointIO:  # into the target folder (Lightning stages it in /tmp)
                # Serialised in memory first (as Lightning does): torch.save streaming into a file reports
                # a full disk as a RuntimeError from its zip writer, a plain write as OSError(ENOSPC).
                buffer = io.BytesIO()
                torch.save(checkpoint, buffer)
                with open(tmp, "wb") as f:
                    f.write(buffer.getbuffer())
                    f.flush()
                    os.fsync(f.fileno())
                del buffer
            else:  # a custom CheckpointIO plugin writes it
                plugin.save_checkpoint(checkpoint, tmp)
                with open(tmp, "rb+") as f:
                    os.fsync(f.fileno())
            os.replace(tmp, target)
            _fsync_dir(target.parent)
            return None
        except OSError as err:
            tmp.unlink(missing_ok=True)
            cause = err if err.errno is not None else (err.__cause__ or err.__context__ or err)
            return write_error(target, cause if isinstance(cause, OSError) else err)
        except BaseException:
            tmp.unlink(missing_ok=True)  # whatever failed, no partial file stays behind
            raise

    def prune(self) -> list[Path]:
        """Delete complete checkpoints beyond the newest ``keep_last`` (incomplete ones are not counted)."""
        if self.keep_last < 0:
            return []
        complete = [p for _, p in _checkpoints(Path(self.dirpath)) if is_complete(p)]
        removed = complete[self.keep_last:]
        for path in removed:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        self.best_k_models = {k: v for k, v in self.best_k_models.items() if Path(k) not in removed}
        return removed

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
