"""Where ifdistill finds its shared inputs and caches, and how nltk is kept offline.

The machines that run ifdistill's tests cannot reach a model or dataset hub, so read-only inputs
(IFEval prompts, punkt_tab) live in a ``shared/data`` folder beside the checkout. Lookup order:
``$IFDISTILL_SHARED_DATA``, then ``<repo>/../shared/data``; a missing folder is an error naming both.

nltk must find punkt_tab *before* it is imported (lm-eval's IFEval code downloads at import when it
cannot), and ifdistill never downloads: :func:`ensure_nltk_data` points ``NLTK_DATA`` at a folder that
holds ``tokenizers/punkt_tab/english`` or raises :class:`MissingResourceError` saying how to get one.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import IO, Any, Callable, Iterator

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA_ENV = "IFDISTILL_SHARED_DATA"
CACHE_ENV = "IFDISTILL_CACHE"


class MissingResourceError(RuntimeError):
    """A local input that ifdistill needs is not there; the message says how to provide it."""


def shared_data_dir(required: bool = True) -> Path | None:
    """The shared read-only data folder (IFEval files, nltk_data)."""
    candidates = []
    if os.environ.get(SHARED_DATA_ENV):
        candidates.append(Path(os.environ[SHARED_DATA_ENV]))
    candidates.append(REPO_ROOT.parent / "shared" / "data")
    for c in candidates:
        if c.is_dir():
            return c.resolve()
    if required:
        raise MissingResourceError(
            "shared data folder not found: set $%s or place it at %s"
            % (SHARED_DATA_ENV, REPO_ROOT.parent / "shared" / "data")
        )
    return None


def cache_dir() -> Path:
    """Root of ifdistill's own caches (built tiny models): ``$IFDISTILL_CACHE`` or ``~/.cache/ifdistill``."""
    root = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "ifdistill")
    root.mkdir(parents=True, exist_ok=True)
    return root


def _has_punkt_tab(folder: Path) -> bool:
    return (folder / "tokenizers" / "punkt_tab" / "english").is_dir()


def find_nltk_data() -> Path | None:
    """First folder holding punkt_tab: $NLTK_DATA entries, the venv's record of setup, shared data."""
    candidates = [Path(p) for p in os.environ.get("NLTK_DATA", "").split(os.pathsep) if p]
    recorded = Path(sys.prefix) / "nltk_data_path"
    if recorded.is_file():
        candidates.append(Path(recorded.read_text().strip()))
    shared = shared_data_dir(required=False)
    if shared is not None:
        candidates.append(shared / "nltk_data")
    candidates.append(Path(sys.prefix) / "nltk_data")
    return next((c.resolve() for c in candidates if _has_punkt_tab(c)), None)


def ensure_nltk_data() -> Path:
    """Make punkt_tab visible to nltk without any download; return the folder used.

    Safe to call before or after nltk is imported (it also extends ``nltk.data.path``).
    """
    folder = find_nltk_data()
    if folder is None:
        raise MissingResourceError(
            "NLTK's English punkt_tab is missing and ifdistill never downloads at run time. "
            "Run `make setup` (it installs punkt_tab), or set NLTK_DATA to a folder holding "
            "tokenizers/punkt_tab/english (e.g. python -m nltk.downloader -d DIR punkt_tab)."
        )
    paths = os.environ.get("NLTK_DATA", "").split(os.pathsep)
    if str(folder) not in paths:
        os.environ["NLTK_DATA"] = os.pathsep.join([str(folder)] + [p for p in paths if p])
    if "nltk" in sys.modules:
        import nltk

        if str(folder) not in nltk.data.path:
            nltk.data.path.insert(0, str(folder))
    return folder


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", *, tag: str = "", **open_kwargs) -> Iterator[IO]:
    """Write ``path`` through a temp file in the same folder, flushed to disk, then renamed over it.

    Readers see the old file or the complete new one, never a partial write; on any error (or an
    exception raised by the caller inside the block) the temp file is removed and an existing
    ``path`` is left exactly as it was. ``tag`` goes into the temp file's name (``.<name>.<tag><random>.tmp``):
    a shared folder's cleaner tells by it whose temp file a killed process left.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{tag}", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, **open_kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(err, OSError) and not err.filename:  # a failed write() names no file: name the target
            err.filename = str(path)
        raise


def atomic_leftovers(path: str | os.PathLike) -> list[Path]:
    """The temp files that :func:`atomic_write` of ``path`` left behind (a writer killed mid-write); only
    an owner that knows no writer of ``path`` is alive may remove them."""
    path = Path(path)
    return sorted(path.parent.glob(f".{path.name}.*.tmp"))


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """``text`` to ``path`` through :func:`atomic_write`."""
    with atomic_write(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return Path(path)


def write_json_atomic(path: str | os.PathLike, payload: Any, *, sort_keys: bool = True) -> Path:
    """``payload`` as indented JSON (one trailing newline) to ``path`` through :func:`atomic_write`;
    values JSON cannot hold are written as their ``str``."""
    return write_text_atomic(path, json.dumps(payload, indent=2, sort_keys=sort_keys, default=str) + "\n")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def build_once(target: Path, marker: str, build: Callable[[Path], object]) -> Path:
    """A cached directory built by ``build(tmp_dir)`` at most once across processes: under a file lock,
    into a temp dir, then renamed; ``target/marker`` existing means it is complete."""
    if (target / marker).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / marker).is_file():
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
            try:
                build(tmp)
                tmp.chmod(0o755)  # mkdtemp makes it private; the cache is shared by every process
                os.replace(tmp, target)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return target
