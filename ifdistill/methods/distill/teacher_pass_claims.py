"""Claims on teacher views: jobs that start together split one teacher pass through a shared folder.

A sweep starts its distillation jobs at once. Left alone, every job computes every view its cache
folder lacks, so the pass is paid once per job running at that moment. Instead a job *claims* the
views it is about to compute, computes only views that no live job claims, and waits for the rest.

Files, under the cache's namespace folder (no ``flock``/``fcntl`` lock: NFS does not reliably honour them):

- ``owners/<owner>.json``: one per job taking part -- host, pid, SLURM job and ``beat``, a counter that a
  thread rewrites every ``heartbeat_s`` (temp file + rename, :func:`ifdistill.paths.write_json_atomic`);
- ``claims/<view key>.<generation>``: made with ``O_CREAT | O_EXCL`` (one creator wins), holding the
  owner's id; a view's claim is its highest generation present. The owner removes it once the view's
  shard is written, the data before its manifest entry (:meth:`TeacherCache.write_shard`), so a view is
  in the manifest, or claimed, or free.
- A claim *expires* when its owner is provably gone -- on the watching job's own host, no process has the
  owner's pid with the owner's start time (:func:`~ifdistill.methods.distill.teacher_cache_clean.gone`): at
  once -- or when its owner's beat has not changed for ``expiry_s`` as timed by the job that looks at it,
  on that job's own monotonic clock (nodes need no common clock; a job that starts watching an owner on
  another host that died waits the full ``expiry_s``). An expired claim is taken over by creating the next
  generation with ``O_EXCL``: of several jobs that see it expire together, exactly one wins. The job that
  takes over from a gone owner removes that owner's temp shard files and owner file
  (:func:`~ifdistill.methods.distill.teacher_cache_clean.clean`).

Assumption on the filesystem: ``O_CREAT | O_EXCL`` creates a file in one atomic step and ``rename`` within
a folder is atomic -- true of local filesystems, NFSv3 and later, Lustre and GPFS. Where a client's
attribute caches delay what another node sees, the worst case is one view computed twice (the same
bytes: a view's numbers are a pure function of its key) or a later takeover; a reader still sees only
shards whose manifest entry exists and whose bytes match its sha256.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from ifdistill.methods.distill.teacher_cache_clean import clean, gone, me
from ifdistill.paths import write_json_atomic
from ifdistill.runs.rundir import now_iso

log = logging.getLogger(__name__)

CLAIMS, OWNERS = "claims", "owners"


@dataclasses.dataclass(frozen=True)
class Claim:
    """The current claim of one view: its generation and its owner's id (empty while being written)."""

    key: str
    generation: int
    owner: str


class ClaimBoard:
    """This job's claims in one cache folder, its heartbeat, and its view of the other jobs' claims.

    Use as a context manager around a pass: entering removes what writers of this host that are gone left
    (:func:`~ifdistill.methods.distill.teacher_cache_clean.clean`), writes the owner file and starts the heartbeat,
    leaving releases what is still held (a failed pass frees its views at once) and removes the owner file.
    """

    def __init__(self, folder: str | os.PathLike, *, expiry_s: float = 300.0, report_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic):
        if expiry_s <= 0:
            raise ValueError(f"the claim expiry must be > 0 seconds, got {expiry_s}")
        self.claims, self.owners = Path(folder) / CLAIMS, Path(folder) / OWNERS
        self.expiry_s = float(expiry_s)
        self.heartbeat_s = self.expiry_s / 6  # several beats per expiry: one late write does not expire a claim
        self.poll_s = min(2.0, self.expiry_s / 8)  # how often a waiting job looks again
        self.report_s = report_s  # how often a waiting job says what it waits for
        self.clock = clock
        self.me = me()
        self.owner = f"{self.me['host']}-{self.me['pid']}-{self.me['start']}-{uuid.uuid4().hex[:8]}"
        self.taken: set[str] = set()  # views this job took over from an expired claim
        self._held: dict[str, Path] = {}
        self._owners_seen: dict[str, str] = {}  # claim file name -> owner (a claim's content never changes)
        self._watch: dict[str, tuple[Any, float]] = {}  # owner (or claim) -> (beat seen, when first seen)
        self._records: dict[str, Optional[dict]] = {}  # owner -> its owner file, read once per scan
        self._gone: dict[str, bool] = {}  # owner -> provably gone, looked up once per scan
        self._beat = 0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # -- this job: heartbeat -----------------------------------------------------------------------
    def __enter__(self) -> "ClaimBoard":
        self.claims.mkdir(parents=True, exist_ok=True)
        self.owners.mkdir(parents=True, exist_ok=True)
        removed = clean(self.claims.parent)  # what writers of this host that are gone left behind
        if removed:
            log.warning("teacher pass: removed %s", removed)
        self._write_beat()  # before any claim: a claim's owner file exists from the start
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat_loop, name="teacher-pass-heartbeat", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release(list(self._held))
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        (self.owners / f"{self.owner}.json").unlink(missing_ok=True)

    def _write_beat(self) -> None:
        self._beat += 1
        write_json_atomic(self.owners / f"{self.owner}.json", {
            **self.me, "slurm_job_id": os.environ.get("SLURM_JOB_ID"), "beat": self._beat, "time": now_iso()})

    def _beat_loop(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            try:
                self._write_beat()
            except OSError as e:  # one missed beat; the next one may get through
                log.warning("teacher pass: heartbeat %s not written (%s)", self.owners / self.owner, e)

    # -- every job's claims ------------------------------------------------------------------------
    def scan(self) -> dict[str, Claim]:
        """The current claim of every claimed view (the owners' beats are read again after each scan)."""
        self._records.clear()
        self._gone.clear()
        top: dict[str, int] = {}
        for name in os.listdir(self.claims):
            key, _, gen = name.rpartition(".")
            if key and gen.isdigit():
                top[key] = max(top.get(key, -1), int(gen))
        return {key: Claim(key, gen, self._owner_of(f"{key}.{gen}")) for key, gen in top.items()}

    def _owner_of(self, name: str) -> str:
        if name in self._owners_seen:
            return self._owners_seen[name]
        try:
            owner = (self.claims / name).read_text().strip()
        except OSError:  # removed since the listing: its owner is done with it
            return ""
        if owner:  # empty: created, not yet written; read again next time
            self._owners_seen[name] = owner
        return owner

    def _record_of(self, owner: str) -> Optional[dict]:
        if owner not in self._records:
            try:
                self._records[owner] = json.loads((self.owners / f"{owner}.json").read_text())
            except (OSError, ValueError):  # gone, or not visible yet: timed like any other beat
                self._records[owner] = None
        return self._records[owner]

    def _beat_of(self, owner: str) -> Any:
        record = self._record_of(owner)
        return record.get("beat") if isinstance(record, dict) else None

    def owner_gone(self, owner: str) -> bool:
        """Whether ``owner`` is provably no longer running: its owner file (or, once that is removed, its
        id: ``<host>-<pid>-<start time>-<random>``) names a process of this host that is gone."""
        if not owner or owner == self.owner:
            return False
        if owner not in self._gone:
            record = self._record_of(owner)
            if not isinstance(record, dict):
                parts = owner.rsplit("-", 3)
                record = {"host": parts[0], "pid": parts[1], "start": parts[2]} if len(parts) == 4 else {}
            self._gone[owner] = gone(record)
        return self._gone[owner]

    def expired(self, claim: Claim) -> bool:
        """Whether ``claim``'s owner is provably gone, or has shown no new beat for ``expiry_s`` of this
        job's clock."""
        if claim.owner == self.owner:
            return False
        if self.owner_gone(claim.owner):
            return True
        watch = claim.owner or f"claim:{claim.key}.{claim.generation}"
        beat, now = (self._beat_of(claim.owner) if claim.owner else None), self.clock()
        seen = self._watch.get(watch)
        if seen is None or seen[0] != beat:
            self._watch[watch] = (beat, now)
            return False
        return now - seen[1] >= self.expiry_s

    def claimable(self, keys: Iterable[str], current: Mapping[str, Claim]) -> list[str]:
        """Those of ``keys`` that are free or whose claim has expired, in order."""
        return [k for k in keys if k not in current or self.expired(current[k])]

    def claim(self, keys: Sequence[str], current: Mapping[str, Claim]) -> list[str]:
        """Claim ``keys`` (free or expired in ``current``); returns the ones this job won, in order. Views
        taken over are logged as one line per former owner; a provably gone owner's leftovers are removed."""
        won, from_owner = [], {}
        for key in keys:
            old = current.get(key)
            path = self.claims / f"{key}.{0 if old is None else old.generation + 1}"
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:  # another job got there first
                continue
            with os.fdopen(fd, "w") as f:
                f.write(self.owner)
            if old is not None:
                self.taken.add(key)
                from_owner[old.owner] = from_owner.get(old.owner, 0) + 1
                (self.claims / f"{key}.{old.generation}").unlink(missing_ok=True)
            self._held[key] = path
            won.append(key)
        for owner, n in from_owner.items():
            dead = self.owner_gone(owner)
            log.warning("teacher pass: took over %d view(s) from %s (%s)", n,
                        owner or "an owner that never wrote its claim",
                        "its process is gone on this host" if dead else f"no heartbeat for {self.expiry_s:.0f} s")
            if dead:
                removed = clean(self.claims.parent)
                if removed:
                    log.warning("teacher pass: removed %s", removed)
        return won

    def describe_wait(self, keys: Iterable[str], current: Mapping[str, Claim]) -> str:
        """What waiting for ``keys`` means: how many views each owner holds, where it runs and how long
        since its last new beat (as this job saw it)."""
        per: dict[str, int] = {}
        for key in keys:
            claim = current.get(key)
            if claim is not None:
                per[claim.owner] = per.get(claim.owner, 0) + 1
        now, parts = self.clock(), []
        for owner, n in sorted(per.items(), key=lambda kv: -kv[1]):
            record = self._record_of(owner) if owner else None
            who = (f"pid {record.get('pid')} on {record.get('host')}" if isinstance(record, dict)
                   else owner or "an owner still writing its claim")
            seen = self._watch.get(owner or "")
            beat = f", last beat {now - seen[1]:.0f} s ago" if seen else ""
            parts.append(f"{n} by {who}{beat}")
        return "; ".join(parts) or "views being written"

    def release(self, keys: Iterable[str]) -> None:
        """Remove this job's claims on ``keys`` (done with them: written, or given up)."""
        for key in keys:
            path = self._held.pop(key, None)
            if path is not None:
                path.unlink(missing_ok=True)

    @property
    def held(self) -> list[str]:
        return list(self._held)
