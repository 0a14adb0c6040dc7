"""lm-eval's task index kept on disk between evaluator processes.

lm-eval's ``TaskManager`` parses every YAML of its own task folder (~14,000 files) and of each
``include_path`` folder on construction: 6-9 s that every fresh evaluator process (one per checkpoint
with the per-process engine, each persistent server, each ``ifdistill-eval``) pays before its first
task. The manager pickles (~16 MB, under a second to load), so :func:`task_manager` keeps it under
``cache_dir()/lmeval-index/<key>.pickle`` and builds it only when no pickle fits.

The index holds task names, kinds, tags and YAML paths, not task definitions: ``TaskManager.load``
re-reads each task's YAML from its path, so a kept index never serves a stale definition, at worst a
stale list of names. The key (:func:`index_key`) covers what that list is read from -- lm-eval's version,
Python's version, and for lm-eval's task folder and each include folder its path and every ``*.yaml``
under it (relative path, size, mtime_ns) -- so an upgraded or edited task folder, an edited or added
include YAML, re-indexes. Listing the files costs ~0.1 s.

The folder keeps the :data:`KEEP` most recently used pickles (a hit touches its file). A pickle that
cannot be read is rebuilt and replaced with a warning; a cache folder that cannot be written costs one
warning and the freshly built manager is used. Pickles are loaded from the user's own cache folder
only, the same trust as the code it runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import logging
import os
import pickle
import sys
import time
from pathlib import Path
from typing import Iterable, Optional

from lm_eval.tasks import TaskManager

from ifdistill.paths import atomic_write, cache_dir

log = logging.getLogger(__name__)

#: Pickles kept in the cache folder (the most recently used); each is ~16 MB.
KEEP = 4
#: A temp file of an interrupted store older than this many seconds is removed by the next store.
STALE_TMP_S = 3600
SUBDIR = "lmeval-index"


def lm_eval_tasks_dir() -> Path:
    """lm-eval's own task folder, as ``TaskManager`` finds it (the folder of its module)."""
    return Path(sys.modules[TaskManager.__module__].__file__).parent


def _yaml_listing(folder: Path) -> list[list]:
    """``[relative path, size, mtime_ns]`` of every ``*.yaml`` under ``folder``, sorted."""
    rows = []
    for root, _dirs, files in os.walk(folder):
        for name in files:
            if name.endswith(".yaml"):
                path = os.path.join(root, name)
                with contextlib.suppress(OSError):  # a dangling link: lm-eval skips it too
                    st = os.stat(path)
                    rows.append([os.path.relpath(path, folder), st.st_size, st.st_mtime_ns])
    return sorted(rows)


def index_key(include_path: Iterable[str], *, include_defaults: bool = True) -> str:
    """sha256 over what the index is read from (module docstring)."""
    folders = ([lm_eval_tasks_dir()] if include_defaults else []) + [Path(p) for p in include_path]
    h = hashlib.sha256(json.dumps({"lm_eval": importlib.metadata.version("lm_eval"), "python": sys.version,
                                   "include_defaults": include_defaults}).encode())
    for folder in folders:
        h.update(json.dumps({"folder": str(folder), "abspath": os.path.abspath(folder),
                             "yaml": _yaml_listing(folder)}).encode())
    return h.hexdigest()


def _read(path: Path) -> Optional[TaskManager]:
    try:
        with open(path, "rb") as handle:
            manager = pickle.load(handle)
    except (FileNotFoundError, NotADirectoryError):  # none stored (yet)
        return None
    except Exception as err:  # noqa: BLE001 - truncated, or pickled by another lm-eval: rebuilt
        log.warning("lm-eval task index %s cannot be read (%s: %s); rebuilding it",
                    path, type(err).__name__, str(err)[:200])
        return None
    if not isinstance(manager, TaskManager):
        log.warning("lm-eval task index %s holds a %s, not a TaskManager; rebuilding it", path, type(manager).__name__)
        return None
    return manager


def _prune(folder: Path, keep: int = KEEP) -> None:
    """Remove all but the ``keep`` most recently used pickles, and stale temp files of interrupted stores."""
    dated = []
    for path in folder.iterdir():
        with contextlib.suppress(FileNotFoundError):  # another process pruning at the same time
            mtime = path.stat().st_mtime_ns
            if path.name.endswith(".pickle"):
                dated.append((mtime, path))
            elif path.name.startswith(".") and path.name.endswith(".tmp"):
                if time.time_ns() - mtime > STALE_TMP_S * 10**9:  # older than any store in progress
                    path.unlink()
    for _, path in sorted(dated, reverse=True)[keep:]:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def task_manager(include_path: Iterable[str] = (), *, include_defaults: bool = True) -> TaskManager:
    """lm-eval's ``TaskManager(include_path=...)``, from the cache folder when a pickle fits, else built and
    stored there."""
    include_path = [str(p) for p in include_path]

    def build() -> TaskManager:
        return TaskManager(include_path=include_path or None, include_defaults=include_defaults)

    t0 = time.perf_counter()
    try:
        folder = cache_dir() / SUBDIR
        path = folder / f"{index_key(include_path, include_defaults=include_defaults)}.pickle"
    except OSError as err:
        log.warning("lm-eval task index not kept: cache folder unusable (%s)", err)
        return build()
    manager = _read(path)
    if manager is not None:
        with contextlib.suppress(OSError):  # a read-only cache still serves its pickles
            os.utime(path)
        log.info("lm-eval task index loaded from %s in %.1f s", path, time.perf_counter() - t0)
        return manager
    manager = build()
    t1 = time.perf_counter()
    try:
        with atomic_write(path, "wb") as handle:
            pickle.dump(manager, handle, protocol=pickle.HIGHEST_PROTOCOL)
        _prune(folder)
    except Exception as err:  # noqa: BLE001 - an unwritable folder, a full disk: the evaluation goes on
        log.warning("lm-eval task index not stored at %s (%s: %s)", path, type(err).__name__, str(err)[:200])
    else:
        log.info("lm-eval task index built in %.1f s, stored at %s", t1 - t0, path)
    return manager
