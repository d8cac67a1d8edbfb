"""Command-line entry point: ``liquid-stream``.

Subcommands (``train``, ``export``, ``data``, ``evaluate``, ...) are added to the
``main`` group as they are implemented. Keep heavy imports (torch, onnx, ...)
inside the command functions so that ``liquid-stream --help`` stays fast.
"""

from __future__ import annotations

import click

from liquid_stream import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="liquid-stream")
def main() -> None:
    """liquid-stream: train causal Liquid-S4 models, export them step-wise to ONNX,
    and run them on live streams."""


if __name__ == "__main__":  # pragma: no cover
    main()
