"""Atomic writes (torch-free): a reader sees the old file (or folder) or the new one, never
a part. The one implementation of the project's temporary-then-rename writes.

    atomic_write_bytes(path, data)                      # bytes
    with atomic_open(path, fsync=True) as f:            # a binary file object
        torch.save(obj, f)
    with atomic_path(path) as tmp:                      # a path to write (or a folder to fill)
        tmp.write_text(text)

The content goes to a temporary sibling (same folder, so the same file system), which is
renamed over ``path`` (``os.replace``: atomic on POSIX) once the block ends normally, and
removed if anything fails (``BaseException``: Ctrl-C too). By default the sibling is a new
hidden file ``.<name>.<host>-<pid>.<random>.tmp`` (``tempfile.mkstemp``: mode 0600, so the
written file is private, as for checkpoints and ONNX files; ``<host>``: 8 hex digits of
this machine's name, ``<pid>``: the writing process) and ``path``'s folder is created; a
caller may pass its own ``tmp`` instead — a file path it creates, or an existing folder,
which then replaces the folder ``path`` (an old ``path`` is removed just before the
rename). Folders made by ``training/data/cache.atomic_dir`` are named
``.<name>.tmp-<host>-<pid>-<random>``.

**Stale temporaries.** A run killed by SIGKILL (or a power cut) cannot remove its sibling.
The next write to ``path`` in a process (:func:`remove_stale`, once per target and process)
removes the siblings of ``path`` made here that are stale, by this rule:

- named with this machine's ``<host>``: stale when process ``<pid>`` is gone, or is a
  newer process that reused the number (it started after the file was last modified:
  ``/proc/<pid>/stat``); a live writer's file is never touched;
- named with another machine's ``<host>`` (a shared folder): never removed here (its
  processes cannot be seen);
- named without ``<host>-<pid>`` (written before the names carried them): stale when not
  modified for :data:`STALE_AFTER_S` (one day).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

STALE_AFTER_S = 86400.0  # an unmarked temporary unmodified this long is stale (docstring)
HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
_CLEANED: set[tuple[str, str]] = set()  # (folder, name) already cleaned by this process


def owner_tag() -> str:
    """``<host>-<pid>``: what the temporaries of this process carry in their names."""
    return f"{HOST}-{os.getpid()}"


def _started_after(pid: int, mtime: float) -> bool:
    """Whether process ``pid`` started after ``mtime`` (so it did not write a file last
    modified then: its number was reused); False when /proc cannot tell."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # field 22, starttime, in clock ticks after boot
        btime = next(
            int(ln.split()[1])
            for ln in Path("/proc/stat").read_text().splitlines()
            if ln.startswith("btime")
        )
        return btime + ticks / os.sysconf("SC_CLK_TCK") > mtime + 1.0
    except (OSError, ValueError, IndexError, StopIteration):
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def is_stale(p: Path, host: str | None, pid: int | None, now: float | None = None) -> bool:
    """The module docstring's rule for the temporary ``p`` named with ``host`` and ``pid``
    (both None: an unmarked name)."""
    try:
        mtime = p.lstat().st_mtime
    except OSError:
        return False
    if host is None or pid is None:
        return (time.time() if now is None else now) - mtime > STALE_AFTER_S
    if host != HOST:
        return False
    if pid == os.getpid():
        return False  # this process's own (a write in progress in another thread)
    return not _alive(pid) or _started_after(pid, mtime)


def remove_stale(path: str | os.PathLike) -> list[Path]:
    """Remove the stale temporaries of ``path`` (its hidden siblings made by
    :func:`atomic_path` and ``cache.atomic_dir``; the rule: module docstring); returns
    them. Runs once per target and process; errors are ignored (a sibling another cleaner
    removed first, a folder one cannot list)."""
    path = Path(path)
    key = (str(path.parent.absolute()), path.name)
    if key in _CLEANED:
        return []
    _CLEANED.add(key)
    name = re.escape(path.name)
    patterns = (
        re.compile(rf"^\.{name}\.(?:(?P<host>[0-9a-f]{{8}})-(?P<pid>\d+)\.)?[a-z0-9_]+\.tmp$"),
        re.compile(rf"^\.{name}\.tmp-(?:(?P<host>[0-9a-f]{{8}})-(?P<pid>\d+)-)?[a-z0-9_]+$"),
    )
    removed = []
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return []
    for e in entries:
        m = next((m for pat in patterns if (m := pat.match(e.name))), None)
        if m is None:
            continue
        p = Path(e.path)
        pid = int(m["pid"]) if m["pid"] else None
        if is_stale(p, m["host"], pid):
            _remove(p)
            removed.append(p)
    return removed


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


@contextmanager
def atomic_path(path: str | os.PathLike, tmp: str | os.PathLike | None = None) -> Iterator[Path]:
    """Yield the temporary sibling of ``path`` to write; rename it over ``path`` when the
    block ends normally, remove it on any exception (see the module docstring)."""
    path = Path(path)
    if tmp is None:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale(path)
        fd, name = tempfile.mkstemp(
            prefix=f".{path.name}.{owner_tag()}.", suffix=".tmp", dir=path.parent
        )
        os.close(fd)
        tmp = name
    tmp = Path(tmp)
    try:
        yield tmp
        if tmp.is_dir() and path.exists():
            shutil.rmtree(path)  # os.replace cannot replace a non-empty folder
        os.replace(tmp, path)
    except BaseException:
        _remove(tmp)
        raise


@contextmanager
def atomic_open(path: str | os.PathLike, fsync: bool = False) -> Iterator[BinaryIO]:
    """A binary file to write whose content replaces ``path`` atomically when the block
    ends normally; ``fsync``: flushed to disk before the rename (survives a power cut)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        yield f
        if fsync:
            f.flush()
            os.fsync(f.fileno())


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (creating its folder)."""
    with atomic_open(path) as f:
        f.write(data)
