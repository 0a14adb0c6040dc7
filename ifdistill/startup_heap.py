"""Start-up without the cyclic garbage collector walking every import-time object, again and again.

Importing torch, transformers, Lightning and vLLM leaves about 700 k long-lived objects (modules,
classes, functions). Python's cyclic collector walks all of them at every full collection: those its
allocation counters trigger during the imports themselves, and every explicit ``gc.collect()`` the
libraries make while they set up (a vLLM engine start makes about eight; DeepSpeed and Lightning a few).
None of those objects is ever garbage.

So the training and evaluation CLIs start with the collector paused (:func:`pause_collector`) and,
once the heavy modules are in and just before the long work starts (``trainer.fit``, an engine start,
a model load), move every live object to the permanent generation and resume collecting
(:func:`settle`) -- the pattern of :func:`gc.freeze`'s documentation. Objects made after that are
collected as usual. At exit the heap is unfrozen, so extension modules that check for leaks at
shutdown (nanobind, under triton) see their objects freed.

Both are no-ops unless a CLI paused the collector, so library code called from a notebook or a test
never changes the collector's state; ``IFDISTILL_GC_PAUSE=0`` turns the pause off.
``bench/bench_startup.py`` measures what it saves.
"""

from __future__ import annotations

import atexit
import gc
import os

_paused = False


def wanted() -> bool:
    """False when ``IFDISTILL_GC_PAUSE`` turns the pause off (``0``, ``false``, ``no``, ``off``)."""
    return os.environ.get("IFDISTILL_GC_PAUSE", "1").strip().lower() not in ("0", "false", "no", "off")


def pause_collector() -> None:
    """Pause cyclic collection for the process's start-up (the first thing a CLI's ``main`` does)."""
    global _paused
    if wanted() and gc.isenabled():
        gc.disable()
        _paused = True


def settle() -> None:
    """Freeze what is alive and resume collection; once per process, and only after :func:`pause_collector`."""
    global _paused
    if not _paused:
        return
    _paused = False
    gc.freeze()
    gc.enable()
    atexit.register(gc.unfreeze)


def paused() -> bool:
    return _paused
