"""Progress in a log: one line per log_every_n_steps with the step, loss, tokens/s and ETA; Lightning's
INFO lines once, not twice."""

from __future__ import annotations

import io
import re

import torch
from torch.utils.data import DataLoader

from ifdistill.train.progress import ProgressLog, want_progress_bar


class _Tiny:
    """A LightningModule with a known loss: the mean squared value of one weight (logged as train/loss)."""

    @staticmethod
    def make():
        import lightning.pytorch as pl

        class M(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.w = torch.nn.Parameter(torch.ones(3))

            def training_step(self, batch, idx):
                loss = (self.w ** 2).mean() * batch["input_ids"].float().mean() / batch["input_ids"].float().mean()
                return loss

            def on_train_batch_end(self, outputs, batch, idx):
                self.log("train/loss", outputs["loss"].detach())

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        return M()


def _loader(n_batches: int, tokens: int):
    items = [{"input_ids": torch.ones(tokens, dtype=torch.long), "attention_mask": torch.ones(tokens, dtype=torch.long)}
             for _ in range(n_batches)]
    return DataLoader(items, batch_size=1)


def test_a_line_every_n_steps_with_the_logged_loss(tmp_path):
    import lightning.pytorch as pl

    out = io.StringIO()
    module = _Tiny.make()
    trainer = pl.Trainer(accelerator="cpu", max_steps=5, log_every_n_steps=2, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=[ProgressLog(2, stream=out)],
                         default_root_dir=tmp_path)
    trainer.fit(module, _loader(8, tokens=7))
    lines = out.getvalue().splitlines()
    assert [re.match(r"\[train\] step (\d+)/5", ln).group(1) for ln in lines] == ["2", "4", "5"]
    # SGD on mean(w^2), w0 = 1, lr 0.1: w_k = (1 - 0.2/3)^k, the loss logged at step k is w_{k-1}^2
    # (computed before that step's update); printed to 4 decimals.
    for ln in lines:
        step = int(re.search(r"step (\d+)", ln).group(1))
        expect = (1 - 0.2 / 3) ** (2 * (step - 1))
        assert f"loss {expect:.4f}" in ln, ln
        assert re.search(r"\| [\d,]+ tok/s \|", ln) and "elapsed 0:00:" in ln
    assert "ETA" in lines[0] and "ETA" not in lines[-1]  # nothing left at the last step


SCRIPT = """
import logging, sys
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="[root] %(message)s")  # as Hydra's job logging
import lightning.pytorch  # what train() imports after Hydra configured logging
if sys.argv[1] == "fixed":
    from ifdistill.train.progress import single_log_output
    single_log_output()
logging.getLogger("lightning.pytorch.utilities.rank_zero").info("GPU available: False")
"""


def test_lightning_info_lines_print_once_under_a_root_handler():
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    counts = {}
    for mode in ("as_is", "fixed"):
        proc = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "PYTHONPATH": str(root)})
        counts[mode] = (proc.stdout + proc.stderr).count("GPU available: False")
    assert counts == {"as_is": 2, "fixed": 1}  # Lightning's own console handler + the root handler


def test_progress_bar_auto_means_a_terminal(monkeypatch):
    import sys

    monkeypatch.setattr(sys.stdout, "isatty", lambda: False, raising=False)
    assert not want_progress_bar("auto") and want_progress_bar(True) and not want_progress_bar(False)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    assert want_progress_bar("auto")
