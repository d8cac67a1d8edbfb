"""Test-suite wiring shared by every module.

**Two installs.** The full suite runs in the development venv (``make test``: the base
install plus the ``train`` and ``dev`` extras). ``make test-runtime`` (run by CI) installs
the base package alone — the apps and the shipped models on onnxruntime, no torch, scipy or
matplotlib — into a fresh venv and runs there only the modules marked
``pytestmark = pytest.mark.runtime``: with torch absent (or ``LIQUID_STREAM_RUNTIME_ONLY=1``)
every other module is left out of collection, since importing it would need an extra.

**Folders.** The test modules sit in folders that mirror the source (``nn/``, ``runtime/``,
``io/``, ``export/``, ``apps/<domain>/``, ``training/...``; the entry points' and the
cross-cutting hostile-input tests here). The shared helpers stay here (``fixtures_*.py``,
``reference.py``, ``hostile.py``) and are imported as top-level modules from every folder
(``from fixtures_vitals import ...``), and some test modules import helpers of another
(``from test_layer import randomize``, across folders): this folder and every folder under
it are put on ``sys.path`` below (the test modules' names are unique across folders).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path[:0] = [
    d
    for d in dict.fromkeys(str(p) for p in [HERE, *sorted(HERE.glob("**/"))])
    if "__pycache__" not in d and d not in sys.path
]

RUNTIME_ONLY = (
    os.environ.get("LIQUID_STREAM_RUNTIME_ONLY") == "1" or importlib.util.find_spec("torch") is None
)
RUNTIME_MARK = "pytestmark = pytest.mark.runtime"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """In the runtime-only install, collect only the modules marked ``runtime``."""
    if not RUNTIME_ONLY or collection_path.suffix != ".py":
        return None
    if not collection_path.name.startswith("test_"):
        return None
    return RUNTIME_MARK not in collection_path.read_text(encoding="utf-8")


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty folder a hostile-input case runs in (the current directory); every output
    of the case points into it, so "nothing written" means it stays empty."""
    w = tmp_path / "work"
    w.mkdir()
    monkeypatch.chdir(w)
    return w
