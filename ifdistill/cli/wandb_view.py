"""The W&B workspace view of a sweep, defined in code: ``ifdistill-wandb-view``.

W&B's automatic layout puts every logged key in its own panel (~60 per-type IFEval panels), groups
nothing by the swept factors and shows no error bars, so every researcher rebuilds the same view by
hand. This module states that view once, as a JSON-able specification built from the training config:

- one section per eval section the config evaluates, under the W&B namespace that section logs
  (:func:`~ifdistill.benchmarks.registry.namespace`: the run's ``eval`` its benchmark's name, an extra
  ``evals.<name>`` its name): the metrics its benchmark logs for it
  (:meth:`~ifdistill.benchmarks.base.Benchmark.panel_metrics`) against ``<namespace>/step``;
- **Training**: train and held-out (``val/<name>/*``) teacher-forced CE and accuracy;
- **Teacher-forced vs <first section>**: per run, held-out accuracy against the first section's
  headline (a scatter of the latest values) and the two curves side by side;
- **Per type** (a benchmark with a per-type breakdown): one bar panel of every type, not one panel per key.

Runs are filtered to the sweep's W&B group and grouped by the swept values except the seed, so the
seeds of one (method, ratio) cell are one line: their mean with a standard-error band. The swept values
reach the W&B run config as ``sweep/<key>`` (:func:`ifdistill.runs.sweeps.swept_values`, logged by the training run), because
the method is a config *group* whose resolved section holds no name.

:func:`view_spec` uses only the config; :func:`to_workspace` turns a spec into
``wandb_workspaces`` objects (the ``wandb-view`` extra) and only :func:`main` without ``--dry-run``
contacts W&B.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Optional, Sequence

from omegaconf import DictConfig, OmegaConf

from ifdistill.command_line import ArgumentParser
from ifdistill.benchmarks import registry
from ifdistill.runs.sweeps import run_config_key, swept_keys

AGGREGATED = ("seed",)  # swept keys whose runs are averaged within a group rather than split by
TRAIN_STEP = "trainer/global_step"  # Lightning's WandbLogger x axis for train/* and val/*


def _conf_dir() -> Path:
    import ifdistill.conf

    return Path(ifdistill.conf.__file__).resolve().parent


def _plain(section: Any) -> dict:
    if not isinstance(section, DictConfig):
        return dict(section or {})
    try:
        return OmegaConf.to_container(section, resolve=True)
    except Exception:  # noqa: BLE001 - an interpolation only a running job resolves; the panels need none of it
        return OmegaConf.to_container(section, resolve=False)


def eval_sections(cfg: Any) -> dict[str, tuple[str, dict]]:
    """The eval sections a run evaluates at its checkpoints, by W&B namespace: ``{namespace: (benchmark,
    section)}`` of ``eval`` and each section of ``callbacks.checkpoint_eval.evals`` (``{name: eval
    section}``, as the callback reads it); a section without ``benchmark`` is the default benchmark's.
    Empty when no checkpoint-eval callback runs."""
    callback = (cfg.get("callbacks") or {}).get("checkpoint_eval")
    if callback is None or not callback.get("_target_"):  # training instantiates only entries with one
        return {}
    plain = {None: _plain(cfg.get("eval") or {}), **{str(k): _plain(v) for k, v in (callback.get("evals") or {}).items()}}
    bms = {k: str(v.get("benchmark") or registry.default_name()) for k, v in plain.items()}
    try:
        names = registry.namespaces(bms)
    except ValueError as err:
        raise ViewError(str(err)) from None
    return {names[k]: (bms[k], plain[k]) for k in plain}


def benchmarks(cfg: Any) -> list[str]:
    """The W&B namespaces a run logs its checkpoint evaluations under (:func:`eval_sections`), in config order."""
    return list(eval_sections(cfg))


def instruction_ids(benchmark: str) -> list[str]:
    """Every type id of ``benchmark``'s per-type breakdown (sorted; none for a benchmark without one)."""
    return sorted(registry.get(benchmark).type_ids({}))


def val_names(cfg: Mapping[str, Any]) -> list[str]:
    """The held-out sets a run validates on (``val/<name>/*``), as its data module names them (built once
    per distinct data, method and model sections: the jobs of a sweep mostly share them)."""
    from ifdistill.runs.rundir import resolved_tree

    tree = resolved_tree(cfg)
    key = json.dumps([tree.get(k) for k in ("data", "method", "model")], sort_keys=True, default=str)
    return list(_val_names(key, tree))


_VAL_NAMES: dict[str, tuple[str, ...]] = {}


def _val_names(key: str, tree: dict) -> tuple[str, ...]:
    if key not in _VAL_NAMES:
        from ifdistill.train.run import build_datamodule
        from ifdistill.train.schemas import TrainConfig

        _VAL_NAMES[key] = tuple(build_datamodule(TrainConfig.from_tree(tree)).val_names)
    return _VAL_NAMES[key]


def _line(title: str, x: str, y: Sequence[str]) -> dict:
    return {"type": "line", "title": title, "x": x, "y": list(y)}


def _title(ns: str, bm: str) -> str:
    """A section's title: the benchmark's display name, and the namespace when that is not the benchmark's."""
    display = registry.get(bm).display or bm
    return display if ns == bm else f"{ns} ({display})"


def _benchmark_section(ns: str, bm: str, metrics: Sequence[str]) -> dict:
    """A line panel per metric, as logged (a fraction in [0, 1], any other metric in its unit); a metric whose
    smaller values are better says so in its title (:meth:`~ifdistill.benchmarks.base.Benchmark.is_higher_better`)."""
    step, bench = f"{ns}/step", registry.get(bm)
    return {"name": _title(ns, bm), "panels": [
        _line(f"{ns} {v.replace('_acc', '').replace('_', ' ')}" + ("" if bench.is_higher_better(v) else " (lower is better)"),
              step, [f"{ns}/{v}"]) for v in metrics]}


def _types_section(ns: str, bm: str) -> Optional[dict]:
    bench = registry.get(bm)
    ids = instruction_ids(bm)
    if not ids:
        return None
    keys = [f"{ns}_type/{iid}/{bench.type_value}" for iid in ids]
    return {"name": f"{_title(ns, bm)} per {bench.type_label}", "panels": [
        {"type": "bar", "title": f"{ns} {bench.type_value.replace('_', ' ')} per {bench.type_label} (latest checkpoint)",
         "metrics": keys}]}


def view_spec(cfg: Mapping[str, Any], *, group: str, entity: Optional[str] = None, project: Optional[str] = None,
              name: Optional[str] = None, bench: Optional[Sequence[str]] = None) -> dict:
    """The view of ``group``'s runs as a JSON-able dict (what ``--dry-run`` prints); ``cfg`` is a training
    config tree as plain data (:func:`ifdistill.runs.rundir.resolved_tree`), its ``hydra`` section included."""
    by_ns = eval_sections(cfg)
    bms = list(bench) if bench is not None else list(by_ns)
    of = {ns: by_ns.get(ns, (ns if ns in registry.names() else registry.default_name(), {}))[0] for ns in bms}
    metrics = {ns: registry.get(of[ns]).panel_metrics(by_ns[ns][1] if ns in by_ns else {}) for ns in bms}
    vals = val_names(cfg)
    grouping = [run_config_key(k) for k in swept_keys(cfg) if k.split(".")[-1] not in AGGREGATED]
    training = [_line(f"train {m}", TRAIN_STEP, [f"train/{m}"]) for m in ("ce", "acc")]
    training += [_line(f"held-out {m}", TRAIN_STEP, [f"val/{v}/{m}" for v in vals]) for m in ("ce", "acc") if vals]
    if vals and (cfg.get("run") or {}).get("drift_from_base"):  # drift from the base (ifdistill.train.drift)
        training += [_line(f"drift {m}", TRAIN_STEP, [f"val/{v}/{m}" for v in vals]) for m in ("kl_base_model", "kl_model_base")]
    sections = [_benchmark_section(b, of[b], metrics[b]) for b in bms]
    headed = [b for b in bms if metrics[b]]
    if headed and vals:
        tf, bm = f"val/{vals[0]}/acc", headed[0]
        head = metrics[bm][0]
        sections.append({"name": "teacher-forced vs " + _title(bm, of[bm]), "panels": [
            {"type": "scatter", "title": f"{tf} vs {bm}/{head} per run (latest)", "x": tf, "y": f"{bm}/{head}"},
            _line(f"teacher-forced {tf}", TRAIN_STEP, [tf]),
            _line(f"{bm} {head}", f"{bm}/step", [f"{bm}/{head}"])]})
    sections.append({"name": "training", "panels": training})
    sections += [t for t in (_types_section(b, of[b]) for b in bms) if t is not None]
    logger = cfg.get("logger") or {}
    return {
        "entity": entity, "project": project or logger.get("project") or "ifdistill",
        "name": name or f"{group} (ifdistill)", "group": group,
        "groupby": grouping, "aggregate": {"func": "mean", "range": "stderr"},
        "benchmarks": bms, "sections": sections,
    }


def metric_keys(spec: dict) -> dict[str, set[str]]:
    """Every key the view reads: ``history`` (line and bar metrics and their x axes), ``summary``
    (scatter axes) and ``config`` (the grouping)."""
    out: dict[str, set[str]] = {"history": set(), "summary": set(), "config": set(spec["groupby"])}
    for section in spec["sections"]:
        for p in section["panels"]:
            if p["type"] == "line":
                out["history"].update([p["x"], *p["y"]])
            elif p["type"] == "bar":
                out["summary"].update(p["metrics"])
            else:
                out["summary"].update([p["x"], p["y"]])
    return out


def to_workspace(spec: dict) -> Any:
    """The spec as a ``wandb_workspaces`` Workspace (no network until ``.save()``)."""
    import wandb_workspaces.reports.v2 as wr
    import wandb_workspaces.workspaces as ws

    agg = dict(groupby_aggfunc=spec["aggregate"]["func"], groupby_rangefunc=spec["aggregate"]["range"])

    def panel(p: dict) -> Any:
        if p["type"] == "line":
            return wr.LinePlot(title=p["title"], x=p["x"], y=list(p["y"]), **agg)
        if p["type"] == "bar":
            return wr.BarPlot(title=p["title"], metrics=list(p["metrics"]), orientation="h", **agg)
        return wr.ScatterPlot(title=p["title"], x=wr.SummaryMetric(p["x"]), y=wr.SummaryMetric(p["y"]))

    return ws.Workspace(
        entity=spec["entity"] or "", project=spec["project"], name=spec["name"],
        sections=[ws.Section(name=s["name"], panels=[panel(p) for p in s["panels"]], is_open=True)
                  for s in spec["sections"]],
        runset_settings=ws.RunsetSettings(filters=ws.And(ws.Metric("Group") == spec["group"]),
                                          groupby=[ws.Config(k) for k in spec["groupby"]]))


def compose(overrides: Sequence[str]) -> DictConfig:
    """The ``ifdistill-train`` config (with its hydra section) for command-line style overrides."""
    from hydra import compose as hydra_compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    import ifdistill.config  # noqa: F401  (registers the resolvers the configs use)

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(_conf_dir()), version_base="1.3"):
        cfg = hydra_compose("train", overrides=list(overrides), return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    return cfg


def sweep_group(cfg: DictConfig, overrides: Sequence[str]) -> str:
    """The W&B group the sweep's runs share: the preset's ``run.group`` for the sweep directory given as
    ``hydra.sweep.dir=<dir>`` (without it Hydra's default names a new, time-stamped directory)."""
    if not any(str(o).startswith("hydra.sweep.dir=") for o in overrides) or not cfg.run.get("group"):
        raise ViewError("name the sweep by --group <W&B group>, by its directory, or by hydra.sweep.dir=<sweep dir> "
                        "with a preset that sets run.group")
    return str(cfg.run.group)


class ViewError(ValueError):
    """A view that cannot be made from the arguments given: one line, exit 2."""


def configs(overrides: Sequence[str]) -> tuple[list[DictConfig], bool]:
    """The configs the view describes and whether they were read from disk: the jobs of the sweep (or
    the job or run) a path names, or of the sweep directory ``hydra.sweep.dir=<dir>`` names when it
    holds jobs -- what ran, not what a new composition would give -- else the config the overrides
    compose (a view made before its sweep starts)."""
    from ifdistill.runs.sweep_configs import job_dirs, looks_like_path, read_configs

    paths = [o for o in overrides if looks_like_path(o)]
    if paths:
        rest = [o for o in overrides if o not in paths]
        if rest:
            raise ViewError(f"a path ({paths[0]}) names runs that exist: drop the overrides {' '.join(rest)}")
        return [cfg for p in paths for cfg in read_configs(p)], True
    sweep_dir = next((o.split("=", 1)[1] for o in overrides if str(o).startswith("hydra.sweep.dir=")), None)
    if sweep_dir and Path(sweep_dir).is_dir() and job_dirs(Path(sweep_dir)):
        return read_configs(sweep_dir), True
    try:
        return [compose(overrides)], False
    except Exception as err:  # noqa: BLE001 - Hydra's override parser and config errors
        raise ViewError(" ".join(str(err).split())[:400]) from None


def merge_specs(specs: Sequence[dict]) -> dict:
    """One view of several runs' specs: every section and panel any of them has (panels matched by type
    and title, their keys united in order), the grouping keys and benchmarks of all."""
    out = {**specs[0], "sections": [], "groupby": [], "benchmarks": []}
    sections: dict[str, dict[tuple[str, str], dict]] = {}
    for spec in specs:
        out["groupby"] += [k for k in spec["groupby"] if k not in out["groupby"]]
        out["benchmarks"] += [b for b in spec["benchmarks"] if b not in out["benchmarks"]]
        for section in spec["sections"]:
            panels = sections.setdefault(section["name"], {})
            for p in section["panels"]:
                have = panels.setdefault((p["type"], p["title"]), json.loads(json.dumps(p)))
                for field in ("y", "metrics"):  # a line's and a bar's key lists (a scatter's y is one key)
                    if isinstance(p.get(field), list):
                        have[field] += [k for k in p[field] if k not in have[field]]
    out["sections"] = [{"name": name, "panels": list(panels.values())} for name, panels in sections.items()]
    return out


def build_view(overrides: Sequence[str], *, group: Optional[str] = None, **kwargs: Any) -> dict:
    """The view spec for the command line's sweep (see :func:`configs`)."""
    from ifdistill.runs.rundir import resolved_tree
    from ifdistill.runs.sweep_configs import activate, select

    cfgs, on_disk = configs(overrides)
    if group is None:
        group = select(cfgs[0], "run.group") if on_disk else sweep_group(cfgs[0], overrides)
        if not group:
            raise ViewError("the runs name no W&B group (run.group): pass --group <W&B group>")
    specs = []
    for cfg in cfgs:
        activate(cfg)
        specs.append(view_spec(resolved_tree(cfg), group=str(group), **kwargs))
    return merge_specs(specs)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = ArgumentParser(
        prog="ifdistill-wandb-view", description="Save (or with --dry-run print) the W&B workspace view of a sweep.",
        epilog="examples: ifdistill-wandb-view outputs/train/multiruns/<time> --dry-run; "
               "ifdistill-wandb-view experiment=ifeval_replay_sweep hydra.sweep.dir=outputs/train/multiruns/<time> --dry-run")
    p.add_argument("overrides", nargs="*",
                   help="a sweep, job or run directory; or ifdistill-train overrides naming the sweep (experiment=..., "
                        "hydra.sweep.dir=<dir>: read from the sweep's own job configs when it exists)")
    p.add_argument("--group", default=None,
                   help="the sweep's W&B group (default: the runs' run.group)")
    p.add_argument("--entity", default=os.environ.get("WANDB_ENTITY"), help="W&B entity (default: $WANDB_ENTITY)")
    p.add_argument("--project", default=None, help="W&B project (default: logger.project, else ifdistill)")
    p.add_argument("--name", default=None, help="the view's name (default: '<group> (ifdistill)')")
    p.add_argument("--benchmark", action="append", default=None,
                   help="W&B namespace to show (an eval section's: repeatable; default: every section the "
                        "config evaluates)")
    p.add_argument("--dry-run", action="store_true", help="print the specification as JSON; no W&B contact")
    args = p.parse_args(argv)
    from ifdistill.runs.sweep_configs import SweepConfigError

    try:
        spec = build_view(args.overrides, group=args.group, entity=args.entity, project=args.project,
                          name=args.name, bench=args.benchmark)
    except (ViewError, SweepConfigError) as err:
        print(f"ifdistill-wandb-view: error: {err}", file=sys.stderr)
        return 2
    workspace = to_workspace(spec)  # validates the spec offline, also on --dry-run
    if args.dry_run:
        json.dump(spec, sys.stdout, indent=2)
        print()
        return 0
    if not args.entity:
        print("ifdistill-wandb-view: error: --entity (or $WANDB_ENTITY) is needed to save the view", file=sys.stderr)
        return 2
    workspace.save()
    print(workspace.url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
