"""``ifdistill-eval serve``: one long-lived evaluator that scores a training run's checkpoints on request.

Why: a per-checkpoint ``ifdistill-eval`` process pays vLLM's start-up (imports, engine and worker
processes, weights, on GPU compilation and CUDA graphs) for every checkpoint -- on CPU 25-70 s for
10-15 s of generation. This server starts the engine once and loads each checkpoint into it, while
keeping the guarantee that matters: the result equals a fresh ``ifdistill-eval`` process's, byte for
byte in samples.jsonl. It is the same program and the same code path -- each request is the job's own
``ifdistill-eval`` command line (:func:`~ifdistill.evaluator.launch.evaluator_command`), composed into
the same config and run through :func:`~ifdistill.evaluator.run.prepare` and
:func:`~ifdistill.evaluator.run.execute`; only the engine is reused.

Per checkpoint (:class:`ServedEngine`):

- LoRA export: the same base engine, a new ``LoRARequest`` (new id and name per checkpoint, unloaded
  after its generation); no weight reload.
- Full weights (``model/`` or ``merged/``): the exported safetensors are loaded into the running
  engine in place (vLLM worker ``reload_weights``); skipped when the engine already holds exactly
  these weights (same sha256 of every file).
- Then every cache that could carry state across checkpoints is cleared: vLLM's prefix cache (on, as
  in a fresh process; its KV blocks are keyed by token ids, so without a reset the next checkpoint
  would reuse KV computed with the previous weights), and the encoder and multimodal caches.
- On GPU with ``eval.runtime.gpu_shared_with_training``: the engine sleeps (level 1) after each
  evaluation and wakes before the next (see :meth:`VLLMBackend.sleep` for what is freed). Never on CPU.
- A request the running engine cannot serve (other base model, architecture, tokenizer, dtype,
  context length, runtime settings, a larger LoRA rank, LoRA vs full weights) restarts the engine
  inside the server, recorded in results.json's ``runtime``.

Protocol (a spool directory, every file written to a temporary name and renamed, so a reader never
sees half a file): the client writes ``requests/<id>.json`` (``{"id", "argv"}``); the server takes
the oldest, runs it and writes ``replies/<id>.json`` (``{"id", "status": ok | input_error | error,
"exit_code", "error"}``: 0, 2 like ``ifdistill-eval``'s input errors, 1 for anything else, after
which the server exits -- its engine's state is unknown). ``heartbeat`` is touched every second by a
thread of the server, which also watches the running engine's processes (an engine in processes of its
own: GPU's default, ``eval.runtime.engine_in_process``): when one dies (vLLM's engine core killed, OOM),
a request waiting on it would never return, so the thread writes ``engine_dead``
(the dead pids) and stops beating; ``ready`` is touched whenever an engine has finished starting (so a client can
time a request's evaluation apart from the engine's start-up); ``stop`` asks it to finish the current
request and exit. The client
(:mod:`ifdistill.launchers.persistent_eval`) detects a dead server (its process), a frozen one (a
stale heartbeat) and a hung one (a request past its timeout).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Optional, Sequence

log = logging.getLogger("ifdistill.evaluator.serve")

REQUESTS, REPLIES, HEARTBEAT, STOP, PID, READY = "requests", "replies", "heartbeat", "stop", "server.pid", "ready"
ENGINE_DEAD = "engine_dead"  # written by the server when a process of its running engine has died
#: Test-only: "1" skips the prefix-cache reset between checkpoints (shows that the reset matters).
NO_PREFIX_RESET_ENV = "IFDISTILL_SERVE_NO_PREFIX_RESET"
HEARTBEAT_EVERY_S = 1.0


# -- the spool directory (shared by server and client) ----------------------------------------------
def write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


def init_spool(spool: str | os.PathLike) -> Path:
    root = Path(spool)
    for sub in (REQUESTS, REPLIES):
        (root / sub).mkdir(parents=True, exist_ok=True)
    return root


def submit(spool: Path, request_id: str, argv: Sequence[str]) -> None:
    """Queue one evaluation: ``argv`` is the job's ``ifdistill-eval`` command line (from
    :func:`~ifdistill.evaluator.launch.evaluator_command`; interpreter and module included)."""
    write_json_atomic(spool / REQUESTS / f"{request_id}.json", {"id": request_id, "argv": list(argv)})


def read_reply(spool: Path, request_id: str) -> Optional[dict[str, Any]]:
    path = spool / REPLIES / f"{request_id}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def touched_at(spool: Path, name: str) -> Optional[float]:
    """When the server last touched ``spool/name`` (HEARTBEAT, READY; wall-clock seconds), None if never."""
    try:
        return (spool / name).stat().st_mtime
    except FileNotFoundError:
        return None


def servable(argv: Sequence[str]) -> bool:
    """Whether ``argv`` is an ``ifdistill-eval`` evaluation this server can take (not e.g. a custom command)."""
    return len(argv) >= 3 and list(argv[1:3]) == ["-m", "ifdistill.evaluator.cli"] and argv[3:4] != ["backfill"]


def job_overrides(argv: Sequence[str]) -> list[str]:
    """The Hydra overrides of an ``ifdistill-eval`` command line, for :func:`~ifdistill.evaluator.cli.load_config`:
    ``--config-dir=D`` becomes ``hydra.searchpath`` (it only adds D to the search path)."""
    if not servable(argv):
        raise ValueError(f"not an ifdistill-eval evaluation command: {list(argv)[:4]}")
    out, dirs = [], []
    for arg in argv[3:]:
        if arg.startswith("--config-dir="):
            dirs.append(arg.split("=", 1)[1])
        elif arg.startswith("-"):
            raise ValueError(f"unsupported ifdistill-eval flag for the server: {arg}")
        else:
            out.append(arg)
    if dirs:
        out.insert(0, "hydra.searchpath=[" + ",".join(f"'file://{d}'" for d in dirs) + "]")
    return out


# -- the engine's processes ---------------------------------------------------------------------------
def child_processes(pid: int) -> set[int]:
    """The live child processes of ``pid`` (Linux ``/proc``; empty where it cannot be read)."""
    found: set[int] = set()
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found.update(int(c) for c in children.read_text().split())
        except OSError:
            continue
    return {c for c in found if process_alive(c)}


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie -- killed, not reaped yet -- does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


# -- the engine and what it holds -------------------------------------------------------------------
def _architecture(model_dir: str) -> dict[str, Any]:
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    return {k: v for k, v in cfg.items() if k not in ("_name_or_path", "transformers_version")}


class ServedEngine:
    """One backend kept across checkpoints, and the identity of what it holds."""

    def __init__(self, on_start: Any = None) -> None:
        self.on_start = on_start  # called once an engine has started
        self.backend: Any = None
        self.key: Optional[str] = None
        self.weights: Optional[dict[str, str]] = None  # sha256 per weight file of the loaded (base) weights
        self.served = 0
        self.processes: frozenset[int] = frozenset()  # the running engine's processes (vLLM's engine core)

    def _key(self, plan: Any) -> str:
        """Everything that fixes an engine at start-up; a request with another key needs a new one."""
        s, src = plan.settings, plan.source
        runtime = {k: v for k, v in vars(s.runtime).items() if k != "progress"}
        return json.dumps({
            "backend": s.backend, "dtype": s.dtype, "context_len": plan.context_len, "seed": s.generation.seed,
            "sampled": not s.generation.greedy,  # a vLLM-CPU engine that samples runs without chunked prefill
            "runtime": runtime, "adapter": bool(src.adapter_dir),
            "base": src.model_dir if src.adapter_dir else _architecture(src.model_dir),
            "tokenizer": plan.model_identity["tokenizer_sha256"]}, sort_keys=True, default=str)

    def _start(self, plan: Any) -> None:
        from ifdistill.evaluator.backends import make_backend

        s = plan.settings
        self.backend = make_backend(s, plan.source, context_len=plan.context_len, seed=s.generation.seed,
                                    persistent=True, requests=getattr(plan, "requests", ()))
        self.key, self.weights = self._key(plan), plan.model_identity["weights_sha256"]
        self.processes = frozenset(child_processes(os.getpid()))
        if self.on_start is not None:
            self.on_start()

    def load(self, plan: Any) -> dict[str, Any]:
        """Make the engine serve ``plan``'s model with no state of earlier checkpoints; returns the
        ``runtime`` record for results.json."""
        t0 = time.perf_counter()
        info: dict[str, Any] = {"engine": "persistent", "server_pid": os.getpid()}
        key, weights = self._key(plan), plan.model_identity["weights_sha256"]
        # The HF backend holds one model and adapter: it is rebuilt per request (still no process start).
        reusable = self.backend is not None and key == self.key and plan.settings.backend == "vllm" and (
            plan.source.adapter_dir is None or self.backend.serves(plan.source))
        if not reusable:
            if self.backend is not None:
                log.info("restarting the engine: the request needs another one")
                info["engine_restarted"] = True
                self.close()
            self._start(plan)
            info["weights"] = "engine start"
        else:
            self.backend.wake_up()
            if weights != self.weights:
                self.backend.load_weights(plan.source.model_dir)
                self.weights = weights
                info["weights"] = "reloaded in place"
            else:
                info["weights"] = "unchanged" if plan.source.adapter_dir is None else "base unchanged (adapter request)"
            if os.environ.get(NO_PREFIX_RESET_ENV) == "1":
                log.warning("%s=1: prefix cache NOT reset (test only)", NO_PREFIX_RESET_ENV)
                info["caches_reset"] = False
            else:
                self.backend.reset_caches()
                info["caches_reset"] = True
        self.served += 1
        info.update(checkpoint_index=self.served, load_s=round(time.perf_counter() - t0, 3))
        return info

    def after(self) -> None:
        if self.backend is not None and hasattr(self.backend, "sleep"):
            self.backend.sleep()

    def dead_processes(self) -> list[int]:
        """Processes of the running engine that have died (the server would wait on them forever)."""
        return sorted(p for p in self.processes if not process_alive(p))

    def close(self) -> None:
        self.processes = frozenset()  # first: its processes end on purpose now
        backend, self.backend, self.key, self.weights = self.backend, None, None, None
        if backend is not None:
            backend.close()


# -- the server loop ---------------------------------------------------------------------------------
def handle(engine: ServedEngine, argv: Sequence[str]) -> dict[str, Any]:
    """One request: compose the job's config, prepare, load into the engine, execute (one code path)."""
    from ifdistill.evaluator.cli import load_config
    from ifdistill.evaluator.errors import input_errors
    from ifdistill.evaluator.output import RESULTS_FILE
    from ifdistill.evaluator.run import execute, prepare

    try:
        plan = prepare(load_config(job_overrides(argv)))
    except input_errors() as err:
        return {"status": "input_error", "exit_code": 2, "error": f"{type(err).__name__}: {err}"}
    runtime = engine.load(plan)
    try:
        results = execute(plan, backend=engine.backend, runtime=runtime)
    finally:
        engine.after()
    return {"status": "ok", "exit_code": 0, "results": str(Path(plan.run.output_dir) / RESULTS_FILE),
            "metrics": results["metrics"], "runtime": runtime}


def _record_dead_engine(spool: Path, engine: ServedEngine) -> bool:
    """Write ``ENGINE_DEAD`` when a process of the running engine has died; whether one has."""
    dead = engine.dead_processes()
    if dead and not (spool / ENGINE_DEAD).is_file():
        write_json_atomic(spool / ENGINE_DEAD, {"pids": dead, "time": time.time()})
        log.error("engine process(es) %s died", dead)
    return bool(dead)


def _beat(spool: Path, stop: threading.Event, engine: ServedEngine) -> None:
    """Touch the heartbeat every second; when a process of the running engine has died, say so in
    ``ENGINE_DEAD`` instead (a request waiting on that engine never returns) and stop beating."""
    path = spool / HEARTBEAT
    while not stop.is_set():
        if _record_dead_engine(spool, engine):
            return
        path.touch()
        stop.wait(HEARTBEAT_EVERY_S)


def serve(spool: str | os.PathLike, poll_s: float = 0.2) -> int:
    root = init_spool(spool)
    (root / PID).write_text(str(os.getpid()))
    stop = threading.Event()
    engine, code = ServedEngine(on_start=(root / READY).touch), 0
    threading.Thread(target=_beat, args=(root, stop, engine), daemon=True, name="heartbeat").start()
    log.info("serving evaluations from %s (pid %d)", root, os.getpid())
    try:
        while not (root / STOP).exists():
            pending = sorted((root / REQUESTS).glob("*.json"))
            if not pending:
                time.sleep(poll_s)
                continue
            req = json.loads(pending[0].read_text())
            pending[0].unlink()
            t0 = time.perf_counter()
            try:
                reply = handle(engine, req["argv"])
            except Exception:  # noqa: BLE001 - reported to the client, which falls back to a fresh process
                # vLLM may raise (EngineDeadError) before the heartbeat thread looks: the death is recorded
                # first, so the client names the cause rather than the exception it led to
                _record_dead_engine(root, engine)
                reply = {"status": "error", "exit_code": 1, "error": traceback.format_exc()[-4000:]}
            reply.update(id=req["id"], seconds=round(time.perf_counter() - t0, 3))
            write_json_atomic(root / REPLIES / f"{req['id']}.json", reply)
            log.info("request %s: %s in %.1fs", req["id"], reply["status"], reply["seconds"])
            if reply["status"] == "error":
                log.error("%s", reply["error"])
                code = 1
                break
    finally:
        stop.set()
        engine.close()
    return code


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="ifdistill-eval serve", description=__doc__.split("\n\n")[0])
    ap.add_argument("--spool", required=True, help="the spool directory (requests/, replies/, heartbeat, stop)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s: %(message)s",
                        stream=sys.stderr)
    from ifdistill.paths import ensure_nltk_data

    ensure_nltk_data()
    return serve(args.spool)


if __name__ == "__main__":  # how PersistentRunner starts it: python -m ifdistill.evaluator.serve --spool=DIR
    from ifdistill.evaluator.launch import clean_environment

    clean_environment(os.environ)
    sys.exit(main())
