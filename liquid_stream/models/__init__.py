"""Pretrained models shipped with the package (ONNX, with a model card each).

    from liquid_stream.models import shipped
    path = shipped("kws-sc10")          # …/liquid_stream/models/kws-sc10.onnx

Each ``NAME.onnx`` here has a ``NAME.md`` model card beside it: the data, the exact
command that trained it, the git commit, the metrics on held-out data and the known
limits. Torch-free (the apps import this).
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
KWS = "kws-sc10"  # the keyword spotter `liquid-stream kws` uses when no MODEL is given


class ShippedModelMissing(FileNotFoundError):
    """The named model is not in this installation."""


def available() -> list[str]:
    """Names of the shipped models (``NAME`` of every ``NAME.onnx`` here)."""
    return sorted(p.stem for p in HERE.glob("*.onnx"))


def shipped(name: str) -> Path:
    """Path of the shipped model ``name`` (``ShippedModelMissing`` if absent)."""
    path = HERE / f"{name}.onnx"
    if not path.is_file():
        raise ShippedModelMissing(
            f"no shipped model {name!r} in {HERE} (available: {', '.join(available()) or 'none'})"
        )
    return path


def card(name: str) -> str:
    """The model card (markdown) of the shipped model ``name``."""
    return (HERE / f"{name}.md").read_text()
