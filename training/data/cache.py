"""Generated dataset folders: the cache root, stamps, atomic publishing, one builder at a time,
and the worker pool with a progress bar that renders them.

Publishing ``out`` (it is always complete or absent)::

    check_replaceable(out, STAMP, overwrite, "a simulated set")  # refuse a foreign folder
    with atomic_dir(out) as tmp:  # a hidden sibling, renamed onto out at the end
        build_into(tmp)
        write_stamp(tmp, STAMP, {"revision": 1}, report)  # last: what was generated

Writing one file (complete or untouched)::

    with atomic_file(path) as tmp:  # a hidden sibling, renamed onto path at the end
        tmp.write_bytes(data)

Caching it under ``cache_dir()`` (``$LIQUID_STREAM_CACHE``)::

    ensure_built(cache_dir() / "my-set", usable, build)  # build() under a lock unless usable()
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from liquid_stream.io.atomic import atomic_path, owner_tag, remove_stale


def cache_dir() -> Path:
    """``$LIQUID_STREAM_CACHE``, default ``~/.cache/liquid-stream`` (user-expanded)."""
    cache = os.environ.get("LIQUID_STREAM_CACHE") or os.path.join("~", ".cache", "liquid-stream")
    return Path(cache).expanduser()


def read_stamp(root: str | os.PathLike, name: str) -> dict | None:
    """The JSON stamp ``root/name``; None if missing or unreadable."""
    try:
        return json.loads((Path(root) / name).read_text())
    except (OSError, ValueError):
        return None


def matching_stamp(root: str | os.PathLike, name: str, want: dict) -> dict | None:
    """The stamp ``root/name`` if it has every key of ``want`` with that value, else None."""
    st = read_stamp(root, name)
    return st if st is not None and all(st.get(k) == v for k, v in want.items()) else None


def write_stamp(root: Path, name: str, stamp: dict, report) -> None:
    """Write ``root/name``: the JSON of ``stamp`` (what was asked for) and ``"report"``, the
    dataclass ``report`` (what came out) as a dict."""
    (root / name).write_text(json.dumps({**stamp, "report": asdict(report)}, indent=1))


def check_replaceable(out: Path, stamp_name: str, overwrite: bool, what: str) -> None:
    """FileExistsError if ``out`` is a non-empty folder that may not be replaced: unless
    ``overwrite``, and unless it is ``what`` (a set with the stamp ``stamp_name``)."""
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise FileExistsError(f"{out} exists and is not empty (use overwrite / --force)")
        if not (out / stamp_name).is_file():
            raise FileExistsError(f"{out} is not {what} (no {stamp_name}); refusing to replace it")


@contextmanager
def atomic_dir(out: Path) -> Iterator[Path]:
    """Yield a new hidden sibling folder ``.<name>.tmp-<host>-<pid>-<random>`` of ``out``
    (mode 755); when the block ends normally it replaces ``out`` (an old ``out`` is removed
    first), on any exception it is removed. So ``out`` is always complete or absent
    (:func:`liquid_stream.io.atomic.atomic_path`). The folders of killed builds into ``out``
    are removed first when stale (:func:`liquid_stream.io.atomic.remove_stale`: their process
    is gone; never a live build's)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(out)  # killed builds' folders (the rule: liquid_stream/io/atomic.py)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-{owner_tag()}-", dir=out.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the dataset is an ordinary folder
    with atomic_path(out, tmp) as tmp:
        yield tmp


@contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield the hidden sibling ``.<name>.tmp`` of ``path`` to write; when the block ends
    normally it replaces ``path``, on any exception it is removed. So ``path`` is always
    complete (the old or the new content; :func:`liquid_stream.io.atomic.atomic_path`, with the
    file mode of an ordinary file)."""
    path = Path(path)
    with atomic_path(path, path.with_name(f".{path.name}.tmp")) as tmp:
        yield tmp


def map_jobs(
    fn: Callable,
    jobs: Sequence,
    workers: int = 1,
    bar: dict | None = None,
    advance: Callable[[object], int] = lambda result: 1,
) -> list:
    """``[fn(job) for job in jobs]``, in ``workers`` processes when above 1 (the pool is shut
    down, pending jobs cancelled, on any error). ``bar``: show a tqdm progress bar with these
    arguments (``total``, ``desc``, ``unit``), moved on by ``advance(result)`` per job."""
    pbar = None
    if bar is not None:
        from tqdm import tqdm

        pbar = tqdm(**bar, dynamic_ncols=True)
    pool = ProcessPoolExecutor(max_workers=workers) if workers > 1 else None
    results = []
    try:
        for r in pool.map(fn, jobs) if pool else map(fn, jobs):
            results.append(r)
            if pbar is not None:
                pbar.update(advance(r))
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        if pbar is not None:
            pbar.close()
    return results


def ensure_built(root: Path, usable: Callable[[], bool], build: Callable[[], object]) -> Path:
    """``root``, after ``build()`` unless ``usable()``. One builder at a time per root (e.g.
    two trainers started together): the build runs under an exclusive lock on the file
    ``.<root.name>.lock`` next to ``root``, and ``usable()`` is asked again once it is held."""
    import fcntl

    if usable():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not usable():
            build()
    return root
