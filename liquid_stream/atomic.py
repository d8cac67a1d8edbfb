"""Atomic file writes (torch-free): a reader sees the old file or the new one, never a part.

    atomic_write_bytes(path, data)

The bytes go to a temporary sibling (same folder, so the same file system), which is
renamed over ``path`` (``os.replace``: atomic on POSIX) once fully written, and removed if
anything fails.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (creating its folder)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
