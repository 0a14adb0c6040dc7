"""lm-eval's task index kept on disk (ifdistill.benchmarks.lmeval.task_index), with real TaskManagers.

- A second process loads the stored index instead of scanning, and it equals the one built (every entry:
  name, kind, YAML path, tags, parsed config).
- Editing an include YAML (same size, new mtime) or adding one gives a new key, and the new task name.
- A truncated pickle is rebuilt and replaced with one warning; an unusable cache folder costs one warning.
- The folder keeps the 4 most recently used pickles (a hit counts as a use), and drops stale temp files.

``$IFDISTILL_CACHE`` points at a tmp folder in every test. Only the first test scans lm-eval's own task
folder (a module fixture, ~7 s); the others index a tmp include folder alone (``include_defaults=False``).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ifdistill.benchmarks.lmeval import task_index
from ifdistill.benchmarks.lmeval.task_index import KEEP, SUBDIR, index_key, task_manager

LOGGER = task_index.__name__


def summary(manager) -> str:
    """What a manager indexes, as one digest (the first test's child process runs this same source)."""
    entries = {name: [e.name, e.kind.name, str(e.yaml_path), sorted(e.tags), e.cfg]
               for name, e in manager.task_index.items()}
    return hashlib.sha256(json.dumps([manager.all_tasks, entries], sort_keys=True, default=str).encode()).hexdigest()


def write_task(folder: Path, name: str, file: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{file or name}.yaml"
    path.write_text(f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {folder}/docs.jsonl\n"
                    "test_split: test\noutput_type: generate_until\ndoc_to_text: '{{question}}'\n"
                    "doc_to_target: '{{answer}}'\n")
    return path


def pickles(cache: Path) -> set[Path]:
    return set((cache / SUBDIR).glob("*.pickle"))


@pytest.fixture()
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("IFDISTILL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> dict:
    """One real scan of lm-eval's task folder plus a tiny include folder, stored in a module cache."""
    root = tmp_path_factory.mktemp("full_index")
    include = root / "include"
    write_task(include, "tiny_local_task")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IFDISTILL_CACHE", str(root / "cache"))
        manager = task_manager([str(include)])
    return {"cache": root / "cache", "include": include, "manager": manager}


@pytest.mark.slow  # the module fixture's scan of lm-eval's ~14,000 task YAMLs (~7 s) plus a child process
def test_a_fresh_process_loads_the_stored_index(full):
    (stored,) = pickles(full["cache"])
    assert stored.name == f"{index_key([str(full['include'])])}.pickle"
    assert "tiny_local_task" in full["manager"].all_tasks and "gsm8k" in full["manager"].all_tasks
    script = ("import hashlib, json, logging, sys\n" + inspect.getsource(summary) +
              "logging.basicConfig(level=logging.INFO, stream=sys.stderr)\n"
              "from ifdistill.benchmarks.lmeval.task_index import task_manager\n"
              "print(summary(task_manager([sys.argv[1]])))\n")
    proc = subprocess.run([sys.executable, "-c", script, str(full["include"])], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "IFDISTILL_CACHE": str(full["cache"])})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"loaded from {stored}" in proc.stderr and "built in" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stdout.strip() == summary(full["manager"])
    assert pickles(full["cache"]) == {stored}


def test_an_edited_or_added_include_yaml_reindexes(cache, tmp_path, caplog):
    include = tmp_path / "include"
    path = write_task(include, "tiny_aa", file="tiny")
    first = task_manager([include], include_defaults=False)
    assert "tiny_aa" in first.all_tasks and len(pickles(cache)) == 1
    with caplog.at_level(logging.INFO, logger=LOGGER):
        again = task_manager([include], include_defaults=False)
    assert any("loaded from" in r.getMessage() for r in caplog.records) and len(pickles(cache)) == 1
    assert summary(again) == summary(first)

    keys = [index_key([include], include_defaults=False)]
    before = path.stat()
    write_task(include, "tiny_bb", file="tiny")  # same size: only the mtime tells the edit apart
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    assert path.stat().st_size == before.st_size
    keys.append(index_key([include], include_defaults=False))
    edited = task_manager([include], include_defaults=False)
    assert "tiny_bb" in edited.all_tasks and "tiny_aa" not in edited.all_tasks

    write_task(include / "more", "tiny_cc")
    keys.append(index_key([include], include_defaults=False))
    added = task_manager([include], include_defaults=False)
    assert {"tiny_bb", "tiny_cc"} <= set(added.all_tasks)
    assert len(set(keys)) == 3 and {p.stem for p in pickles(cache)} == set(keys)


def test_an_unreadable_pickle_is_rebuilt_with_a_warning(cache, tmp_path, caplog):
    include = tmp_path / "include"
    write_task(include, "tiny_aa")
    built = task_manager([include], include_defaults=False)
    (stored,) = pickles(cache)
    data = stored.read_bytes()
    stored.write_bytes(data[: len(data) // 2])
    with caplog.at_level(logging.INFO, logger=LOGGER):
        rebuilt = task_manager([include], include_defaults=False)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(stored) in warnings[0] and "rebuilding" in warnings[0], warnings
    assert any("built in" in r.getMessage() for r in caplog.records)
    assert summary(rebuilt) == summary(built)
    assert pickles(cache) == {stored} and summary(pickle.loads(stored.read_bytes())) == summary(built)


@pytest.mark.parametrize("blocked", ["cache root", "index folder"])
def test_an_unwritable_cache_warns_once_and_the_index_is_built(tmp_path, monkeypatch, caplog, blocked):
    cache = tmp_path / "cache"
    if blocked == "cache root":  # cache_dir() cannot create its folder
        cache.write_text("a file, not a folder")
    else:  # the pickle cannot be stored
        cache.mkdir()
        (cache / SUBDIR).write_text("a file, not a folder")
    monkeypatch.setenv("IFDISTILL_CACHE", str(cache))
    include = tmp_path / "include"
    write_task(include, "tiny_aa")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        manager = task_manager([include], include_defaults=False)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "lm-eval task index not" in warnings[0], warnings
    assert "tiny_aa" in manager.all_tasks


def test_the_folder_keeps_the_most_recently_used(cache, tmp_path, caplog):
    folders = {name: tmp_path / name for name in "abcde"}
    for name, folder in folders.items():
        write_task(folder, f"tiny_{name}")
    stored = {}
    for name in "abcd":
        task_manager([folders[name]], include_defaults=False)
        stored[name] = cache / SUBDIR / f"{index_key([folders[name]], include_defaults=False)}.pickle"
    assert pickles(cache) == set(stored.values()) and len(stored) == KEEP
    now = time.time_ns()
    for age, name in enumerate("dcba", start=1):  # a oldest, d newest, whatever the clock's resolution
        os.utime(stored[name], ns=(now - age * 10**10, now - age * 10**10))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        task_manager([folders["a"]], include_defaults=False)  # a hit: a becomes the most recently used
    assert any("loaded from" in r.getMessage() for r in caplog.records)
    # temp files of stores: one interrupted long ago, one that may be in progress
    stale, recent = cache / SUBDIR / ".x.pickle.old.tmp", cache / SUBDIR / ".y.pickle.new.tmp"
    for tmp in (stale, recent):
        tmp.write_bytes(b"partial")
    old = now - (task_index.STALE_TMP_S + 60) * 10**9
    os.utime(stale, ns=(old, old))
    task_manager([folders["e"]], include_defaults=False)
    stored["e"] = cache / SUBDIR / f"{index_key([folders['e']], include_defaults=False)}.pickle"
    assert pickles(cache) == {stored[n] for n in "acde"}  # b, the least recently used, is gone
    assert recent.exists() and not stale.exists()
