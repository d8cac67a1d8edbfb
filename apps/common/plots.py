"""Plots are optional: the runtime install leaves matplotlib out (the ``plots`` extra,
pyproject.toml), and the apps then write their CSV / JSON reports without the PNG and say
so with :data:`NO_PLOT`."""

from __future__ import annotations

import importlib.util

NO_PLOT = "no plot: matplotlib is not installed (pip install 'liquid-stream[plots]')"


def can_plot() -> bool:
    """Whether matplotlib is installed (without importing it)."""
    return importlib.util.find_spec("matplotlib") is not None
