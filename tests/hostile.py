"""Helpers of the hostile-input tables (tests/test_hostile_*.py): run a CLI command, check
that a refusal is one clear line, and a real small disk to fill.

    r = invoke(["vitals", "--record", rec])
    assert_one_line_error(r, ["sampling rate", "bidmc01.hea"])
    with small_tmpfs(tmp_path / "full", "32k") as d: ...   # skips unless root
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

from liquid_stream.cli import main


def invoke(argv) -> object:
    """``liquid-stream ARGV`` through click's runner (every argument as a string)."""
    return CliRunner().invoke(main, [str(a) for a in argv])


def assert_one_line_error(r, needles) -> str:
    """Exit != 0 through click's error path, no traceback, the error on one line (the last
    non-empty one, the only one starting with ``Error:``) naming every needle."""
    assert r.exit_code != 0, f"accepted (exit 0):\n{r.output}"
    assert r.exception is None or isinstance(r.exception, SystemExit), (
        f"uncaught {type(r.exception).__name__}: {r.exception}\n{r.output}"
    )
    assert "Traceback" not in r.output, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert lines and lines[-1].startswith("Error: "), r.output
    assert sum(ln.startswith("Error:") for ln in lines) == 1, r.output
    for needle in needles:
        assert needle in lines[-1], (needle, lines[-1])
    return lines[-1]


def with_metadata(src: Path, dst: Path, **changes) -> Path:
    """A copy of the ONNX graph ``src`` at ``dst`` with metadata entries replaced (None:
    removed). Its content hash is kept as it was, so it no longer matches (or removed too
    with ``integrity=None``)."""
    import onnx

    m = onnx.load(str(src))
    props = {p.key: p.value for p in m.metadata_props}
    for k, v in changes.items():
        props.pop(k, None)
        if v is not None:
            props[k] = v
    del m.metadata_props[:]
    for k, v in props.items():
        m.metadata_props.add(key=k, value=v)
    onnx.save(m, str(dst))
    return dst


@contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A real tmpfs of ``size`` (e.g. ``"32k"``, ``"4m"``) mounted at ``path`` for a
    disk-full case; the test skips with a note when not root or when mounting fails."""
    if os.geteuid() != 0:
        pytest.skip("disk-full case: needs root to mount a small tmpfs (not root here)")
    path.mkdir(parents=True, exist_ok=True)
    p = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        pytest.skip(f"disk-full case: cannot mount a tmpfs here ({p.stderr.strip()})")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
