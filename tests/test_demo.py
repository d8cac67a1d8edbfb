"""The README's main job (make demo) runs end to end: train → export → verify → stream."""

from __future__ import annotations

import sys

import onnx
import pytest

from liquid_stream import demo

pytestmark = pytest.mark.slow


def test_demo_runs_end_to_end(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["demo", "--steps", "3", "--out", str(tmp_path)])
    demo.main()
    out = capsys.readouterr().out
    assert "OK" in out and "real-time factor" in out
    for name in ("demo.pt", "demo.onnx", "demo.png"):
        assert (tmp_path / name).stat().st_size > 0
    onnx.checker.check_model(onnx.load(tmp_path / "demo.onnx"))
