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


@main.command("export")
@click.argument("checkpoint", type=click.Path(dir_okay=False))
@click.option(
    "--onnx",
    "onnx_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="Output .onnx file (streaming graph with explicit state).",
)
@click.option(
    "--chunk",
    default=160,
    show_default=True,
    type=click.IntRange(1),
    help="Chunk length T the graph is tuned for; longest single call.",
)
@click.option(
    "--opset", default=17, show_default=True, type=click.IntRange(17), help="ONNX opset (17+)."
)
@click.option(
    "--sub-block",
    default=None,
    type=click.IntRange(1),
    help="Sub-block S (power of two); default min(32, largest power of two ≤ chunk).",
)
@click.option(
    "--verify/--no-verify",
    default=False,
    show_default=True,
    help="Stream random input in random chunk sizes through onnxruntime and check "
    "against the torch convolutional forward (fails the export if off-contract).",
)
@click.option("--verify-length", default=16000, show_default=True, type=click.IntRange(1))
def export_cmd(checkpoint, onnx_path, chunk, opset, sub_block, verify, verify_length):
    """Convert a trained CHECKPOINT to its exact step-wise form and write it as ONNX."""
    from liquid_stream.checkpoint import CheckpointError
    from liquid_stream.export.pipeline import describe, export_checkpoint

    try:
        info, report = export_checkpoint(
            checkpoint, onnx_path, chunk, opset, sub_block, verify, verify_length
        )
    except (CheckpointError, ValueError, RuntimeError) as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"wrote {describe(info)}")
    if report is not None:
        click.echo(str(report))


def _register_training_commands() -> None:
    """train / evaluate / data live in liquid_stream.training (imported lazily inside)."""
    from liquid_stream.training.cli import evaluate_cmd, train_cmd
    from liquid_stream.training.data.cli import data

    for command in (train_cmd, evaluate_cmd, data):
        main.add_command(command)


# The live apps (liquid_stream.apps): (module, commands for `liquid-stream`, commands for
# `liquid-stream data`). Each module keeps onnxruntime/torch imports inside its commands.
APP_COMMANDS = [
    ("liquid_stream.apps.kws_cli", ("kws_cmd", "kws_eval_cmd", "kws_tune_cmd"), ()),
    ("liquid_stream.apps.vitals_cli", ("vitals_cmd",), ()),
]


def _register_app_commands() -> None:
    import importlib

    from liquid_stream.training.data.cli import data

    for module_name, top, under_data in APP_COMMANDS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name == module_name:  # app not present in this checkout
                continue
            raise
        for name in top:
            main.add_command(getattr(module, name))
        for name in under_data:
            data.add_command(getattr(module, name))


_register_training_commands()
_register_app_commands()


if __name__ == "__main__":  # pragma: no cover
    main()
