"""A write of a run that fails for lack of space or permission, told as one line.

Any write of a run -- a checkpoint, an export, evaluation outputs, a report, a cache -- can meet a full
disk, a quota, a read-only mount or a folder it may not write. Those are the user's to fix, so the
programs' edges (``ifdistill-train``, ``ifdistill-eval``) print one line naming the path and the free
space there and exit 2, instead of a library's traceback. The libraries say it in several ways: an
``OSError`` (``ENOSPC``, ``EDQUOT``, ``EACCES``, ``EPERM``, ``EROFS``), often without the file's name
when ``write`` failed rather than ``open``; safetensors' ``SafetensorError`` whose text holds the OS's
("No space left on device (os error 28)"); either wrapped as the cause of another error. :func:`cause`
reads all of them; :func:`writing` gives a block of writes the path to name.

Nothing half-written is read later: the writers write to a temp name and rename
(:func:`ifdistill.paths.atomic_write`, the export's temp folder), and remove the temp on failure.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
from pathlib import Path
from typing import Iterator, Optional

NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
NO_PERMISSION = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
# what libraries that wrap the OS error in their own exception (safetensors, Rust's io::Error) print
_TEXTS = {"space": re.compile(r"No space left on device|Disk quota exceeded|os error (28|122)\b|StorageFull"),
          "permission": re.compile(r"Permission denied|Read-only file system|os error (13|30|1)\b")}


class WriteFailed(OSError):
    """A write that failed for lack of space or permission; ``str()`` is the one line (``path`` the file
    or folder it names, ``errno`` the OS's)."""

    def __init__(self, line: str, path: Optional[Path] = None, code: Optional[int] = None):
        super().__init__(line)
        self.path, self.errno = path, code


def free_space(path: str | os.PathLike) -> str:
    """``"12.3 MiB free on that filesystem"`` for the nearest existing folder of ``path``."""
    folder = Path(path)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return f"{shutil.disk_usage(folder).free / 2**20:.1f} MiB free on that filesystem"
    except OSError:
        return "free space unknown"


def cause(err: BaseException) -> Optional[tuple[str, Optional[OSError]]]:
    """``("space" | "permission", the OSError if there is one)`` when ``err`` or an error it was raised
    from or during is a write refused for lack of space or permission; else ``None``."""
    seen: set[int] = set()
    texts = None
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in NO_SPACE:
            return "space", err
        if isinstance(err, OSError) and err.errno in NO_PERMISSION:
            return "permission", err
        if not isinstance(err, OSError) and texts is None:
            text = str(err)
            texts = next((kind for kind, pattern in _TEXTS.items() if pattern.search(text)), None)
        # ``raise ... from None``: the error says it all itself (its writer named the file already)
        err = err.__cause__ or (None if err.__suppress_context__ else err.__context__)
    return (texts, None) if texts else None


def failure_line(path: Optional[str | os.PathLike], what: str, kind: str, os_error: Optional[OSError] = None,
                 then: str = "re-run the same command", near: Optional[str | os.PathLike] = None) -> str:
    """The one line: what could not be written where, why, the free space there, and what to do
    (``near``: the folder the write was under, when the error names no file)."""
    where = f"{what} {path}" if path else f"a {what} under {near}" if near else f"a {what}"
    space = free_space(path or near) if (path or near) else "free space unknown"
    if kind == "space":
        return f"no space left to write {where} ({space}); free space and {then}"
    reason = (os_error.strerror if os_error is not None and os_error.strerror else "permission denied").lower()
    return f"cannot write {where}: {reason} ({space}); make it writable (or choose another folder) and {then}"


def as_write_failure(err: BaseException, path: Optional[str | os.PathLike] = None, what: str = "file", *,
                     near: Optional[str | os.PathLike] = None) -> Optional[WriteFailed]:
    """``err`` as a :class:`WriteFailed` naming ``path`` (else the OS error's file name, else a file under
    ``near``), or ``None`` when it is not a write refused for lack of space or permission."""
    if isinstance(err, WriteFailed):  # a writer's own line (a checkpoint's, an export's)
        return err
    found = cause(err)
    if found is None:
        return None
    kind, os_error = found
    if path is None and os_error is not None and os_error.filename:
        path = os_error.filename
    code = os_error.errno if os_error is not None else (errno.ENOSPC if kind == "space" else errno.EACCES)
    return WriteFailed(failure_line(path, what, kind, os_error, near=near), Path(path) if path else None, code)


@contextlib.contextmanager
def writing(path: str | os.PathLike, what: str = "file") -> Iterator[None]:
    """Inside the block, a write refused for lack of space or permission becomes a :class:`WriteFailed`
    naming ``path`` (what the user knows: the export folder, not the temp file being written)."""
    try:
        yield
    except WriteFailed:
        raise
    except Exception as err:
        failure = as_write_failure(err, path, what)
        if failure is None:
            raise
        raise failure from err
