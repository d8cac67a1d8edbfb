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
hidden file ``.<name>.<random>.tmp`` (``tempfile.mkstemp``: mode 0600, so the written file
is private, as for checkpoints and ONNX files) and ``path``'s folder is created; a caller
may pass its own ``tmp`` instead — a file path it creates, or an existing folder, which
then replaces the folder ``path`` (an old ``path`` is removed just before the rename).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


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
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
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
