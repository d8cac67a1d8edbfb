"""Click command ``export`` (added to ``liquid-stream`` by the main CLI).

    liquid-stream export runs/speech/best.pt --onnx kws.onnx [--chunk 160] [--verify]

Heavy imports (torch, onnx, the pipeline) stay inside the function so ``--help`` is fast.
"""

from __future__ import annotations

import click


@click.command("export")
@click.argument("checkpoint", type=click.Path(dir_okay=False))
@click.option("--onnx", "onnx_path", required=True, type=click.Path(dir_okay=False),
              help="Output .onnx file (streaming graph with explicit state).")  # fmt: skip
@click.option("--chunk", default=160, show_default=True, type=click.IntRange(1),
              help="Chunk length T the graph is tuned for; longest single call.")  # fmt: skip
@click.option("--opset", default=17, show_default=True, type=click.IntRange(17),
              help="ONNX opset (17+).")  # fmt: skip
@click.option("--sub-block", default=None, type=click.IntRange(1),
              help="Sub-block S (power of two); default min(32, largest power of two "
                   "≤ chunk).")  # fmt: skip
@click.option("--verify/--no-verify", default=False, show_default=True,
              help="Stream random input in random chunk sizes through onnxruntime and check "
                   "against the torch convolutional forward (fails the export if "
                   "off-contract).")  # fmt: skip
@click.option("--verify-length", default=16000, show_default=True, type=click.IntRange(1))
def export_cmd(checkpoint, onnx_path, chunk, opset, sub_block, verify, verify_length):
    """Convert a trained CHECKPOINT to its exact step-wise form and write it as ONNX."""
    from liquid_stream.checkpoint import CheckpointError

    from .pipeline import describe, export_checkpoint

    try:
        info, report = export_checkpoint(
            checkpoint, onnx_path, chunk, opset, sub_block, verify, verify_length
        )
    except (CheckpointError, ValueError, RuntimeError) as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"wrote {describe(info)}")
    if report is not None:
        click.echo(str(report))
