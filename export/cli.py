"""Click command ``export`` (added to ``liquid-stream`` by the main CLI).

    liquid-stream export runs/speech/best.pt --onnx kws.onnx [--chunk 160] [--verify]
    liquid-stream export runs/speech/best.pt --onnx kws-int8.onnx --quantize int8 --verify
    liquid-stream export kws.onnx --onnx kws-int8.onnx --quantize int8 --verify
    liquid-stream export a/best.pt b/best.pt --onnx kws.onnx --verify   # an ensemble
    liquid-stream export a/best.pt b/best.pt c/best.pt --onnx rr.onnx --weights 1,1,3

Heavy imports (torch, onnx, the pipeline) stay inside the function so ``--help`` is fast.
"""

from __future__ import annotations

import click


@click.command("export")
@click.argument("checkpoints", nargs=-1, required=True, type=click.Path(dir_okay=False))
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
    help="Sub-block S (power of two); default min(32, largest power of two "
    "≤ chunk). S = 1 with a short chunk (its stack steps + the state size ≤ "
    "64) runs a call of exactly the chunk as one MatMul a layer (the "
    "vital-sign models' 1-s calls: 1.6-2x faster).",
)
@click.option(
    "--verify/--no-verify",
    default=False,
    show_default=True,
    help="Stream random input in chunks (half whole, half random sizes) "
    "through onnxruntime and check against the torch convolutional forward "
    "(fails the export if off-contract).",
)
@click.option("--verify-length", default=16000, show_default=True, type=click.IntRange(1))
@click.option(
    "--quantize",
    type=click.Choice(["int8"]),
    default=None,
    help="Store the weight MatMuls in 8 bits (onnxruntime dynamic quantization); "
    "the state path, the SSM tables and the front end stay float32. "
    "--verify then also checks the int8 graph against the float32 one "
    "(looser tolerance, in the metadata).",
)
@click.option(
    "--ltc-op",
    type=click.Choice(["graph", "fused"]),
    default="graph",
    show_default=True,
    help="LTC layers (liquid=ltc) as standard ONNX ops (graph: runs on any "
    "onnxruntime) or as one custom op a layer (fused: ai.liquid_stream::"
    "LtcScan, the training kernel; needs its library, which liquid-stream "
    "registers itself; ~3-4x faster, docs/benchmarks.md §2.3).",
)
@click.option(
    "--weights",
    default=None,
    metavar="W0,W1,...",
    help="An ensemble's weights, one positive number per checkpoint (divided "
    "by their sum): the graph outputs the weighted mean.",
)
def export_cmd(
    checkpoints,
    onnx_path,
    chunk,
    opset,
    sub_block,
    verify,
    verify_length,
    quantize,
    ltc_op,
    weights,
):
    """Convert a trained CHECKPOINT to its exact step-wise form and write it as ONNX.

    With --quantize, CHECKPOINT may also be an exported float32 .onnx graph: it is
    quantized as it is (--chunk, --opset and --sub-block are then the graph's own).
    Several checkpoints of one classifier task: one graph whose posteriors are the mean
    of theirs, or with --weights their weighted mean (an ensemble, export/ensemble.py;
    --verify checks each member and the mean)."""
    from liquid_stream.nn.checkpoint import CheckpointError

    from .ensemble import export_ensemble
    from .pipeline import describe, export_checkpoint
    from .quantize import quantize_file

    checkpoint = checkpoints[0]
    try:
        if weights is not None and len(checkpoints) < 2:
            raise ValueError(
                "--weights weigh the members of an ensemble: give two or more checkpoints"
            )
        if len(checkpoints) > 1:
            if quantize is not None or any(c.endswith(".onnx") for c in checkpoints):
                raise ValueError(
                    "an ensemble is exported from checkpoints (.pt), without --quantize"
                )
            info, reports = export_ensemble(
                list(checkpoints),
                onnx_path,
                chunk,
                opset,
                sub_block,
                verify,
                verify_length,
                weights,
                ltc_op,
            )
        elif checkpoint.endswith(".onnx"):
            if quantize is None:
                raise ValueError(f"{checkpoint} is an ONNX graph: exporting one needs --quantize")
            info, report = quantize_file(checkpoint, onnx_path, verify, verify_length)
            reports = [report]
        else:
            info, report = export_checkpoint(
                checkpoint,
                onnx_path,
                chunk,
                opset,
                sub_block,
                verify,
                verify_length,
                quantize,
                ltc_op,
            )
            reports = [report]
    except (CheckpointError, ValueError, RuntimeError) as e:  # MetaError is a ValueError
        raise click.ClickException(str(e)) from None
    except OSError as e:  # a full disk, a read-only folder: the output as it was
        raise click.ClickException(
            f"export failed: {e.strerror or e}; {onnx_path} not written (an existing one is "
            "untouched)"
        ) from None
    click.echo(f"wrote {describe(info)}")
    if "float32_verify" in info:
        click.echo(info["float32_verify"])
    for r in reports:
        if r is not None:
            click.echo(str(r))
