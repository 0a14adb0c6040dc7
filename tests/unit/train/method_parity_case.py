"""One training micro-step of SFT and of off-policy ICL distillation, as the method-parity test runs it
with two versions of ifdistill: the tree on ``PYTHONPATH`` (``python -m`` or a subprocess running
``python method_parity_case.py OUT``) and the checked-out one.

Each case builds the tiny model with LoRA from a fixed seed, gives the adapter non-zero values, builds
the batch from the synthetic data with the data layer of that version, runs ``training_step`` (the
objective, the token normalisation) and its backward, and returns the batch, the loss and every
gradient. One thread: the float operations then run in one order, so the two versions' results are
comparable bit for bit when their code computes the same thing.
"""

from __future__ import annotations

import inspect
import sys
import tempfile

import torch

TINY = {"name_or_path": "builtin:tiny"}
LORA = {"method": "lora", "r": 4, "alpha": 8, "dropout": 0.0}
DATA = {"sources": [{"name": "syn", "synthetic": "train", "max_examples": 24}], "heldout": 0, "max_length": 384}
# Where methods moved when they became folders (old name -> new name): the only change to their configs.
MOVED = {"ifdistill.train.sft_module.SFTModule": "ifdistill.methods.sft.module.SFTModule",
         "ifdistill.train.distill_module.ICLDistillModule": "ifdistill.methods.distill.module.ICLDistillModule",
         "ifdistill.train.teacher_pass_runner.ensure_teacher_cache":
             "ifdistill.methods.distill.teacher_pass_runner.ensure_teacher_cache",
         "ifdistill.rundir.config_hash": "ifdistill.runs.rundir.config_hash"}
# name -> (module class, constructor settings, ICL views: None for SFT batches)
CASES = {
    "sft": ("ifdistill.methods.sft.module.SFTModule", {}, None),
    "distill_forward": ("ifdistill.methods.distill.module.ICLDistillModule", {"kd_ratio": 0.5}, 2),
    "distill_reverse_chunked": ("ifdistill.methods.distill.module.ICLDistillModule",
                                {"kd_ratio": 0.7, "kl": "reverse", "logit_chunk_size": 7}, 2),
    "distill_cached": ("ifdistill.methods.distill.module.ICLDistillModule",
                       {"kd_ratio": 0.5, "teacher_source": "cache", "cache_k": 16}, 2),
}


def _items(k):
    from ifdistill.data.build import DataConfig, build_train_dataset
    from transformers import AutoTokenizer

    from ifdistill.models import resolve_model_path

    tok = AutoTokenizer.from_pretrained(resolve_model_path(TINY["name_or_path"]))
    views = None if k is None else {"k": k, "demos": "per_example"}
    keyword = "icl" if "icl" in inspect.signature(DataConfig.resolve).parameters else "method"  # before: method=
    data = DataConfig.resolve(DATA, **{keyword: views}, model=TINY)
    return build_train_dataset(data, tok).train.items[:4], tok.pad_token_id


def _get(name: str):
    """The object called ``name`` (a new name of :data:`MOVED`) in whichever version is imported. The old
    name first: the new modules are importable from the old tree too (through this checkout's editable
    install), the old ones only there."""
    from importlib import import_module

    for dotted in (*[old for old, new in MOVED.items() if new == name], name):
        module, _, attr = dotted.rpartition(".")
        try:
            return getattr(import_module(module), attr)
        except ModuleNotFoundError:
            continue
    raise ModuleNotFoundError(name)


def _construct(cls: type, settings: dict):
    """The module built through the constructor the running code has: one settings object beside
    ``TrainingInputs``, or (the code before) keyword arguments."""
    if "inputs" not in inspect.signature(cls).parameters:
        return cls(TINY, LORA, **settings)
    inputs = _get("ifdistill.train.method.TrainingInputs")
    supplied = {k: settings.pop(k) for k in list(settings) if k in inspect.signature(inputs).parameters}
    return cls(inputs(TINY, LORA, **supplied), cls.settings_class(**settings))


def run_case(name: str) -> dict:
    from ifdistill.data.collate import IclCollator, PadCollator

    target, settings, k = CASES[name]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        items, pad = _items(k)
        batch = (PadCollator(pad) if k is None else IclCollator(pad))(items)
        torch.manual_seed(0)
        extra = {"cache_dir": tempfile.mkdtemp()} if settings.get("teacher_source") == "cache" else {}
        module = _construct(_get(target), {**settings, **extra})
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for pname, p in module.lm.named_parameters():
                if "lora_B" in pname:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.05)
        if module.__dict__.get("teacher_cache") is not None:
            _get("ifdistill.methods.distill.teacher_pass_runner.ensure_teacher_cache")(module, items)
        loss = module.training_step(batch, 0)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in module.lm.named_parameters() if p.grad is not None}
        return {"batch": {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}, "loss": loss.detach(),
                "grads": grads}
    finally:
        torch.set_num_threads(threads)


# configs whose run directories (named by config_hash) must not move
HASHED = {"sft": [], "distill": ["method=distill"], "distill_cached": ["method=distill", "method.teacher_source=cache",
                                                                     "method.demos=per_example"],
          "qwen3_ifeval_distill": ["experiment=qwen3_ifeval_distill"], "replay_sweep": ["experiment=ifeval_replay_sweep"]}


def config_hashes(moved: bool = False) -> dict[str, str]:
    """``config_hash`` of the :data:`HASHED` configs, composed from the ``conf/`` beside the imported package;
    ``moved``: with ``method._target_`` renamed as :data:`MOVED` renames it."""
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import ifdistill
    config_hash = _get("ifdistill.runs.rundir.config_hash")

    import ifdistill.config

    if hasattr(ifdistill.config, "store_schemas"):  # the schemas its YAML extends (the code before had none),
        import ifdistill.conf  # noqa: F401  registered as their owners import

    conf = Path(ifdistill.__file__).resolve().parents[1] / "conf"
    out = {}
    for name, overrides in HASHED.items():
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
            cfg = compose("train", overrides=["paths.output_dir=/tmp/x", *overrides])
        if moved:
            cfg.method._target_ = MOVED.get(cfg.method._target_, cfg.method._target_)
        out[name] = config_hash(cfg)
    GlobalHydra.instance().clear()
    return out


if __name__ == "__main__":
    import ifdistill

    torch.save({"ifdistill": ifdistill.__file__, "hashes": config_hashes(),
                "hashes_moved": config_hashes(moved=True),
                **{name: run_case(name) for name in CASES}}, sys.argv[1])
