"""The ``liquid-stream`` command-line entry point."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import liquid_stream
from liquid_stream.cli import main


def test_version_cli_runner() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0, result.output
    assert liquid_stream.__version__ in result.output
    assert "liquid-stream" in result.output


def test_help_cli_runner() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
    assert "--version" in result.output


def _console_script() -> str:
    """Path of the installed ``liquid-stream`` script: next to this interpreter, else on PATH."""
    candidate = Path(sys.executable).parent / "liquid-stream"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("liquid-stream")
    if found is None:
        pytest.fail("console script `liquid-stream` is not installed (pip install -e .)")
    return found


def test_version_console_script() -> None:
    out = subprocess.run(
        [_console_script(), "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert liquid_stream.__version__ in out.stdout


def test_help_console_script() -> None:
    out = subprocess.run(
        [_console_script(), "--help"], capture_output=True, text=True, timeout=120, check=True
    )
    assert "Usage:" in out.stdout


def test_cli_module_does_not_import_torch() -> None:
    """cli.py itself must not import torch at module import time (fast ``--help``).

    Whatever ``liquid_stream/__init__.py`` imports is excluded: only the delta caused by
    importing ``liquid_stream.cli`` is checked.
    """
    code = (
        "import sys, liquid_stream; before = 'torch' in sys.modules; "
        "import liquid_stream.cli; after = 'torch' in sys.modules; "
        "print(int(after and not before))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={**os.environ},
    )
    assert out.stdout.strip() == "0"
