"""The start-up collector pause (ifdistill.startup_heap): paused only by a CLI, resumed with the start-up
heap frozen, cycles made afterwards still collected, and no effect on code that never paused it. Each
case runs in a fresh interpreter: the collector's state is process-wide."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import gc, json, weakref
from ifdistill import startup_heap as h

class Node: pass

def cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)

out = {}
{steps}
print(json.dumps(out))
"""


def _probe(steps: str, **env: str) -> dict:
    code = PROBE.replace("{steps}", steps)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **env})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_paused_then_settled():
    out = _probe("""
h.pause_collector()
out["paused"] = [gc.isenabled(), h.paused()]
during = cycle()  # garbage made during start-up; no automatic pass frees it while paused
h.settle()
out["settled"] = [gc.isenabled(), h.paused(), gc.get_freeze_count() > 0]
out["frozen_survives_collect"] = (gc.collect(), during() is not None)[1]
after = cycle()
gc.collect()
out["later_cycle_freed"] = after() is None
h.settle()  # once per process
out["second_settle"] = [gc.isenabled(), gc.get_freeze_count() > 0]
""")
    assert out["paused"] == [False, True]
    assert out["settled"] == [True, False, True]
    # the cycle made during start-up is in the permanent generation: kept (start-up objects live to the end)
    assert out["frozen_survives_collect"] is True
    assert out["later_cycle_freed"] is True
    assert out["second_settle"] == [True, True]


def test_settle_without_a_pause_changes_nothing():
    out = _probe("""
h.settle()
out["state"] = [gc.isenabled(), gc.get_freeze_count()]
""")
    assert out["state"] == [True, 0]


def test_the_pause_can_be_turned_off():
    out = _probe("""
h.pause_collector()
out["state"] = [gc.isenabled(), h.paused()]
""", IFDISTILL_GC_PAUSE="0")
    assert out["state"] == [True, False]
