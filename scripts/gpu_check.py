"""GPU readiness check: install what is missing from a local wheel folder, run ``pytest -m gpu`` and the GPU
benchmark, print one table and write it as JSON.

    python scripts/gpu_check.py                       # on a CUDA machine (make gpu-check)
    python scripts/gpu_check.py --cpu-smoke           # CI: tiny shapes, a few steps, on CPU, no install
    python scripts/gpu_check.py --print-requirements  # the pins to `pip download` on a networked machine

Steps (docs/gpu.md):

1. *install* (not with ``--cpu-smoke`` / ``--no-install``): every requirement the GPU tests and the benchmark
   import (ifdistill's runtime pins from pyproject.toml without torch, DeepSpeed and liger-kernel from the ``gpu``
   extra, pytest and pytest-timeout from ``dev``, TRL from ``bench``; not vLLM, whose CUDA build is too large to
   bring) is checked against the
   installed distributions. What is missing or at another version is installed with
   ``pip install --no-index --find-links <wheels>`` from ``--wheels`` (default ``$IFDISTILL_WHEELS`` or
   ``.whl/``; every sub-folder is a find-links too, so the folder can arrive in parts of < 64 MiB). A
   requirement with no file in the folder is named and the check stops before pip runs. ifdistill itself is
   installed editable without dependencies (``callbacks/`` and ``launchers/`` are mapped into its namespace).
2. *tests*: ``pytest -m gpu tests/gpu`` in a subprocess; counts and skip reasons come from its JUnit XML.
   On CPU the GPU tests are collected and skipped with their reason, and the counts say so.
3. *benchmark*: ``bench/bench_gpu.py`` in a subprocess (``--only`` picks models: each command on a lent GPU
   is limited to 10 minutes, so the two models can be measured in separate runs).

The JSON (``--json``, default ``outputs/gpu_check/<mode>-<time>.json``): ``mode``, ``device``, ``install``,
``tests``, ``bench`` (``rows``, ``ratios``, ``settings``), ``ok`` and ``seconds``. Exit status: 0 when every
step that ran succeeded, 1 when tests or the benchmark failed, 2 when a prerequisite is missing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shlex
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# pyproject pins the GPU tests and the benchmark need besides what a lent GPU machine has (TRL: the peer of the
# benchmark's rows; liger-kernel: kernels.liger); vLLM cannot be brought (> 64 MiB)
EXTRA_PINS = {"gpu": ("deepspeed", "liger-kernel"), "dev": ("pytest", "pytest-timeout"), "bench": ("trl",)}
NOT_BROUGHT = ("torch",)  # the machine's own CUDA build stays
# brought as pinned even where this environment lacks them (a CPU set-up has no gpu extra): what they need, the GPU
# machine has
PIN_ONLY = {"liger-kernel": "needs only torch and triton"}
SHARED_FILES = ("qwen3_tokenizer/tokenizer.json", "ifeval/input_data.jsonl", "nltk_data/tokenizers/punkt_tab/english")


def normalize(name: str) -> str:
    """PEP 503 project name: lower case, runs of ``-_.`` as one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements() -> list[str]:
    """The pinned requirements to bring, read from pyproject.toml (one home for the pins)."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    out = [r for r in project["dependencies"] if normalize(_name(r)) not in NOT_BROUGHT]
    for extra, names in EXTRA_PINS.items():
        out += [r for r in project["optional-dependencies"][extra] if normalize(_name(r)) in names]
    return out


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0]


def _requirement_class():
    """packaging's ``Requirement`` (pip's vendored copy where packaging itself is not installed)."""
    try:
        from packaging.requirements import Requirement
    except ImportError:
        from pip._vendor.packaging.requirements import Requirement
    return Requirement


def closure(reqs: list[str]) -> list[str]:
    """``name==version`` of the requirements and everything they need, as installed here: the list to
    ``pip download --no-deps`` for a machine that may lack any of them (torch and its CUDA libraries
    excepted: the GPU machine brings its own), plus pyproject's build requirements (setuptools, wheel) for
    the editable install and the sdists."""
    from importlib.metadata import PackageNotFoundError, distribution

    Requirement = _requirement_class()

    import tomllib

    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    seen: dict[str, str] = {normalize(_name(r)): r for r in build}  # as pyproject states them (editable install)
    followed: dict[str, set[str]] = {}  # project -> extras whose requirements are in todo ("" = none)
    todo = [Requirement(r) for r in reqs]
    while todo:
        req = todo.pop()
        key = normalize(req.name)
        # a parent's `typepy[datetime]` brings pytz too
        new = ({""} | {normalize(e) for e in req.extras}) - followed.get(key, set())
        if key in NOT_BROUGHT or key.startswith(("nvidia-", "triton")) or not new:
            continue
        try:
            dist = distribution(req.name)
        except PackageNotFoundError:
            if key in PIN_ONLY and str(req.specifier).startswith("=="):
                seen.setdefault(key, str(req))
                continue
            raise SystemExit(f"{req.name} is needed but not installed here: run --print-requirements --closure "
                             "in the project's set-up environment (make setup)") from None
        seen.setdefault(key, f"{dist.metadata['Name']}=={dist.version}")
        followed.setdefault(key, set()).update(new)
        for r in dist.requires or []:
            sub = Requirement(r)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in new):
                todo.append(sub)
    return sorted(seen.values(), key=str.lower)


def split_wheels(folder: Path, part_mib: float = 60.0) -> list[Path]:
    """Move the files of ``folder`` into ``folder/part-N`` sub-folders of at most ``part_mib`` MiB each (largest
    first, first fit), so that each part fits one transfer of at most 64 MiB; returns the parts."""
    files = sorted((f for f in folder.iterdir() if f.is_file()), key=lambda f: -f.stat().st_size)
    bins: list[tuple[float, list[Path]]] = []
    for f in files:
        size = f.stat().st_size / 2**20
        if size > part_mib:
            raise SystemExit(f"{f.name} is {size:.0f} MiB, more than one part of {part_mib:.0f} MiB")
        for i, (used, members) in enumerate(bins):
            if used + size <= part_mib:
                bins[i] = (used + size, members + [f])
                break
        else:
            bins.append((size, [f]))
    parts = []
    for i, (used, members) in enumerate(bins, 1):
        part = folder / f"part-{i}"
        part.mkdir(exist_ok=True)
        for f in members:
            f.rename(part / f.name)
        print(f"{part}: {len(members)} files, {used:.1f} MiB")
        parts.append(part)
    return parts


def without_present(reqs: list[str], have_text: str) -> list[str]:
    """``reqs`` less what a machine has, given its ``pip list --format=freeze`` (or bare names, one a line).

    A distribution the machine has is left out when its version satisfies what the kit asks: pyproject's
    own pins and ranges, and pyproject's build requirements (setuptools>=70); a dependency of those that
    this environment resolved (``name==version`` from :func:`closure`) is left out whatever the machine's
    version, as the machine's own packages were resolved together. A bare name counts as any version."""
    Requirement = _requirement_class()
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    stated = {normalize(_name(r)): Requirement(r) for r in [*requirements(), *project["build-system"]["requires"]]}
    present: dict[str, Optional[str]] = {}
    for line in have_text.split():
        name, _, ver = line.partition("==")
        present[normalize(name)] = ver or None
    out = []
    for r in reqs:
        key = normalize(_name(r))
        if key not in present:
            out.append(r)
        elif key in stated and present[key] is not None and present[key] not in stated[key].specifier:
            out.append(str(stated[key]))  # there at a version the kit does not allow: bring the stated one
    return out


def missing_requirements(reqs: list[str]) -> list[str]:
    """Requirements not installed here at a version their specifier allows."""
    from importlib.metadata import PackageNotFoundError, version

    Requirement = _requirement_class()

    out = []
    for r in reqs:
        req = Requirement(r)
        try:
            have = version(req.name)
        except PackageNotFoundError:
            out.append(r)
            continue
        if have not in req.specifier:
            out.append(r)
    return out


def wheel_dirs(folder: Path) -> list[Path]:
    return [folder, *sorted(p for p in folder.iterdir() if p.is_dir())] if folder.is_dir() else []


def files_in(folder: Path) -> dict[str, set[str]]:
    """``{project: {versions}}`` of the wheels and sdists in the folder and its sub-folders."""
    found: dict[str, set[str]] = {}
    for d in wheel_dirs(folder):
        for f in d.iterdir():
            m = re.match(r"^(.+?)-(\d[^-]*?)(-.*\.whl|\.tar\.gz|\.zip)$", f.name)
            if m:
                found.setdefault(normalize(m.group(1)), set()).add(m.group(2))
    return found


def not_in_folder(reqs: list[str], folder: Path) -> list[str]:
    Requirement = _requirement_class()

    have = files_in(folder)
    out = []
    for r in reqs:
        req = Requirement(r)
        if not any(v in req.specifier for v in have.get(normalize(req.name), ())):
            out.append(r)
    return out


def _pip(args: list[str], folder: Path) -> subprocess.CompletedProcess:
    links = [a for d in wheel_dirs(folder) for a in ("--find-links", str(d))]
    # no build isolation: an sdist (deepspeed imports torch in its setup.py) builds against this environment
    return subprocess.run([sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-index",
                           "--no-build-isolation", *links, *args], capture_output=True, text=True)


def install(folder: Path) -> dict[str, Any]:
    """Install the missing requirements (and ifdistill, editable) from ``folder``; raises SystemExit(2)."""
    reqs = requirements()
    missing = missing_requirements(reqs)
    setuptools_ok = not missing_requirements(["setuptools>=70", "wheel"])
    need_build = [] if setuptools_ok else ["setuptools>=70", "wheel"]
    report: dict[str, Any] = {"folder": str(folder), "missing_before": missing + need_build, "installed": []}
    absent = not_in_folder(missing + need_build, folder)
    if absent:
        print(f"[gpu-check] missing here and not in {folder}: " + " ".join(absent), file=sys.stderr)
        print("[gpu-check] bring them as wheels: see docs/gpu.md (python scripts/gpu_check.py --print-requirements)",
              file=sys.stderr)
        raise SystemExit(2)
    for group in (need_build, missing):
        if group:
            proc = _pip(group, folder)
            if proc.returncode != 0:
                print(proc.stdout[-2000:] + proc.stderr[-4000:], file=sys.stderr)
                print(f"[gpu-check] pip could not install {group} from {folder} (a dependency above is "
                      "missing from the folder)", file=sys.stderr)
                raise SystemExit(2)
            report["installed"] += group
    probe = subprocess.run([sys.executable, "-c", "import ifdistill.callbacks, ifdistill.launchers"], cwd="/",
                           capture_output=True)
    if probe.returncode != 0:
        proc = _pip(["--no-deps", "--no-build-isolation", "-e", str(ROOT)], folder)
        if proc.returncode != 0:
            print(proc.stderr[-4000:], file=sys.stderr)
            raise SystemExit(2)
        report["installed"].append("ifdistill (editable, --no-deps)")
    print(f"[gpu-check] installed: {report['installed'] or 'nothing (all present)'}")
    return report


def environment(shared: Optional[str]) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", WANDB_MODE="offline",
               TOKENIZERS_PARALLELISM="false")
    if shared:
        env["IFDISTILL_SHARED_DATA"] = str(Path(shared).absolute())
    return env


def check_shared_data(env: dict[str, str]) -> str:
    """The shared data folder the runs will read (tokenizer, IFEval prompts, punkt_tab); SystemExit(2) if absent."""
    candidates = [Path(env["IFDISTILL_SHARED_DATA"])] if env.get("IFDISTILL_SHARED_DATA") else []
    candidates.append(ROOT.parent / "shared" / "data")
    for c in candidates:
        if c.is_dir():
            absent = [f for f in SHARED_FILES if not (c / f).exists()]
            if absent:
                print(f"[gpu-check] the shared data folder {c} lacks {absent}", file=sys.stderr)
                raise SystemExit(2)
            return str(c)
    print(f"[gpu-check] no shared data folder: pass --shared-data DIR (a copy of ../shared/data); looked in "
          f"{[str(c) for c in candidates]}", file=sys.stderr)
    raise SystemExit(2)


def run_tests(env: dict[str, str], out: Path, timeout: float) -> dict[str, Any]:
    """``pytest -m gpu tests/gpu``; the counts and skip reasons from its JUnit XML."""
    junit = out.with_suffix(".junit.xml")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "tests/gpu", "-q", "-rs", "-p", "no:cacheprovider",
                           f"--junitxml={junit}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    print(proc.stdout[-6000:])
    result: dict[str, Any] = {"exit_code": proc.returncode, "seconds": round(time.perf_counter() - t0, 1),
                              "junit": str(junit)}
    if not junit.is_file():
        result.update(error=proc.stderr[-3000:], collected=0, passed=0, failed=0, errors=1, skipped=0, skip_reasons={})
        return result
    suite = ET.parse(junit).getroot()
    suite = suite.find("testsuite") if suite.tag == "testsuites" else suite
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    reasons: dict[str, int] = {}
    for case in suite.iter("testcase"):
        skip = case.find("skipped")
        if skip is not None:
            msg = skip.get("message", "")
            reasons[msg] = reasons.get(msg, 0) + 1
    result.update(collected=counts["tests"], failed=counts["failures"], errors=counts["errors"],
                  skipped=counts["skipped"],
                  passed=counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"],
                  skip_reasons=reasons)
    return result


def run_bench(env: dict[str, str], out: Path, smoke: bool, only: list[str], timeout: float,
              extra: tuple[str, ...] = ()) -> dict[str, Any]:
    path = out.with_suffix(".bench.json")
    argv = [sys.executable, str(ROOT / "bench" / "bench_gpu.py"), "--json", str(path), *(["--cpu-smoke"] if smoke else [])]
    if only:
        argv += ["--only", *only]
    argv += list(extra)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0 or not path.is_file():
        print(proc.stdout[-3000:] + proc.stderr[-6000:], file=sys.stderr)
        return {"error": f"bench_gpu.py exited {proc.returncode}: {proc.stderr[-1500:]}", "rows": [], "ratios": {}}
    bench = json.loads(path.read_text())
    path.unlink()
    bench["seconds"] = round(time.perf_counter() - t0, 1)
    return bench


def device_info() -> dict[str, Any]:
    import torch

    from bench.gpu_steps import peak_bf16_flops

    if not torch.cuda.is_available():
        return {"cuda": False, "name": "cpu", "count": 0, "torch": torch.__version__}
    props = torch.cuda.get_device_properties(0)
    return {"cuda": True, "name": props.name, "count": torch.cuda.device_count(),
            "total_memory_gib": round(props.total_memory / 2**30, 1), "peak_bf16_flops": peak_bf16_flops(props.name),
            "torch": torch.__version__, "cuda_version": torch.version.cuda}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny shapes, a few steps, on CPU; no install step")
    ap.add_argument("--wheels", default=os.environ.get("IFDISTILL_WHEELS", str(ROOT / ".whl")),
                    help="the local wheel folder (and its sub-folders); default $IFDISTILL_WHEELS or .whl/")
    ap.add_argument("--shared-data", default=None, help="a copy of ../shared/data (sets IFDISTILL_SHARED_DATA)")
    ap.add_argument("--json", default=None, help="where to write the JSON (default outputs/gpu_check/<mode>-<time>.json)")
    ap.add_argument("--no-install", action="store_true")
    ap.add_argument("--install-only", action="store_true")
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--skip-bench", action="store_true")
    ap.add_argument("--only", nargs="*", default=[], help="benchmark only these models (e.g. Qwen2.5-0.5B)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per step (tests, benchmark)")
    ap.add_argument("--bench-args", default="", help="more arguments of bench/bench_gpu.py, e.g. "
                    "'--levers --seqs 4096 --no-distill --no-generation' (its --help)")
    ap.add_argument("--print-requirements", action="store_true", help="print the pins to bring, one a line, and exit")
    ap.add_argument("--closure", action="store_true",
                    help="with --print-requirements: every distribution they need, name==version as installed here")
    ap.add_argument("--have", metavar="FILE", default=None,
                    help="with --print-requirements: leave out what FILE (the GPU machine's `pip list --format=freeze`) has")
    ap.add_argument("--split-wheels", metavar="DIR", default=None,
                    help="move the files of DIR into DIR/part-N folders of <= 60 MiB (one transfer each) and exit")
    args = ap.parse_args(argv)

    if args.split_wheels:
        split_wheels(Path(args.split_wheels))
        return 0
    if args.print_requirements:
        reqs = closure(requirements()) if args.closure else requirements()
        print("\n".join(without_present(reqs, Path(args.have).read_text()) if args.have else reqs))
        return 0
    t0 = time.perf_counter()
    mode = "cpu-smoke" if args.cpu_smoke else "gpu"
    report: dict[str, Any] = {"schema": 1, "mode": mode, "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    if args.cpu_smoke or args.no_install:
        report["install"] = {"skipped": True}
    else:
        report["install"] = install(Path(args.wheels))
        if args.install_only:
            return 0
    import torch

    if not args.cpu_smoke and not torch.cuda.is_available():
        print("[gpu-check] no CUDA device is visible; use --cpu-smoke on a machine without a GPU", file=sys.stderr)
        return 2
    env = environment(args.shared_data)
    report["shared_data"] = check_shared_data(env)
    out = Path(args.json) if args.json else ROOT / "outputs" / "gpu_check" / f"{mode}-{dt.datetime.now():%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    report["tests"] = {"skipped_step": True} if args.skip_tests else run_tests(env, out, args.timeout)
    report["bench"] = {"skipped_step": True, "rows": [], "ratios": {}} if args.skip_bench else \
        run_bench(env, out, args.cpu_smoke, args.only, args.timeout, tuple(shlex.split(args.bench_args)))
    tests, bench = report["tests"], report["bench"]
    report["ok"] = (tests.get("skipped_step") or (tests["failed"] == tests["errors"] == 0 and tests["exit_code"] in (0, 5))) \
        and "error" not in bench
    report["device"] = device_info()  # after the runs: no CUDA context of this process during them
    report["seconds"] = round(time.perf_counter() - t0, 1)
    out.write_text(json.dumps(report, indent=2) + "\n")

    from bench.bench_gpu import table

    rows = list(bench["rows"])
    if not tests.get("skipped_step"):
        rows.insert(0, {"model": "(tests)", "measurement": f"pytest -m gpu: {tests['collected']} collected, "
                        f"{tests['passed']} passed, {tests['failed']} failed, {tests['errors']} errors, "
                        f"{tests['skipped']} skipped"})
    print(f"\n== gpu-check ({mode}) on {report['device']['name']}\n" + table(rows))
    for name, value in bench.get("ratios", {}).items():
        print(f"{name}: {value:.2f}x")
    for reason, n in (tests.get("skip_reasons") or {}).items():
        print(f"skipped {n}: {reason}")
    print(f"{'OK' if report['ok'] else 'FAILED'} in {report['seconds']:.0f} s; JSON: {out}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
