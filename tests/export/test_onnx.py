"""Exported ONNX graphs in a real onnxruntime session vs the torch convolutional forward."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
import torch
from click.testing import CliRunner
from test_layer import randomize
from test_streaming import chunk_sizes

from liquid_stream import LiquidS4Model, OnnxStreamer
from liquid_stream.cli import main
from liquid_stream.export.pipeline import export_model, verify_onnx
from liquid_stream.nn.checkpoint import save_checkpoint
from liquid_stream.runtime.onnx_streamer import OnnxModelError
from liquid_stream.runtime.quantized import stamp_integrity


def model(mode, liquid, P, norm, decoder="window", d_state=7, seed=0, **kw):
    torch.manual_seed(seed)
    m = LiquidS4Model(
        2,
        4,
        d_model=16,
        n_layers=2,
        d_state=d_state,
        mode=mode,
        liquid=liquid,
        liquid_order=P,
        norm=norm,
        decoder=decoder,
        decoder_window=50,
        dt_min=0.005,
        dt_max=0.1,
        **kw,
    )
    for block in m.blocks:
        randomize(block.ssm, seed)
    m.train()
    with torch.no_grad():
        m(torch.randn(4, 64, 2))
    return m.eval()


def run(path, x: np.ndarray, sizes) -> np.ndarray:
    s = OnnxStreamer(path, batch=x.shape[0], threads=2)
    out, pos = [], 0
    for c in sizes:
        out.append(s.process(x[:, pos : pos + c]))
        pos += c
    return np.concatenate(out, 1)


CASES = [
    ("dplr", "pb", 2, "batch"),
    ("dplr", "kb", 3, "layer"),
    ("diag", "pb", 4, "layer"),
    ("diag", "kb", 2, "batch"),
    ("dplr", None, 2, "batch"),
    ("diag", "ltc", 2, "batch"),
]


@pytest.mark.slow
@pytest.mark.parametrize("mode,liquid,P,norm", CASES)
@pytest.mark.parametrize("sizes", [1, 7, 160, "mix", "max", 1600])
def test_onnx_matches_conv_forward(tmp_path, mode, liquid, P, norm, sizes):
    """chunk 1/7/160/mix: closed-form sub-block recursion; "max": every call the graph's
    longest (n_max sub-blocks + state, the whole power table of ``columns_layer``, as the
    vital-sign models' 1-s calls); 1600: the log-depth scan."""
    m = model(mode, liquid, P, norm)
    path = tmp_path / "m.onnx"
    info = export_model(m, path, chunk={1: 1, 1600: 1600}.get(sizes, 160))
    assert (info["levels"] > 3) == (sizes == 1600)  # sub-block scan depth (not used by ltc)
    L = 2000 if sizes == 1 else 16000
    x = np.random.default_rng(1).standard_normal((1, L, 2)).astype(np.float32)
    y = run(path, x, chunk_sizes(info["max_chunk"] if sizes == "max" else sizes, L))
    ref = m.forward_steps(torch.from_numpy(x)).detach().numpy()
    assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max()


@pytest.mark.parametrize("decoder", ["pool", "last"])
def test_decoders_and_dense_transition(tmp_path, decoder):
    torch.manual_seed(0)  # HiPPO-LegS init at N = 16: eigenvectors too ill-conditioned → dense
    m = LiquidS4Model(
        2,
        4,
        d_model=16,
        n_layers=2,
        d_state=16,
        mode="dplr",
        liquid="kb",
        liquid_order=2,
        norm="layer",
        decoder=decoder,
    ).eval()
    assert {b.ssm.transition for b in m.streaming().blocks} == {"dense"}
    path = tmp_path / "m.onnx"
    info = export_model(m, path, chunk=64)
    assert info["nodes"] > 0
    x = np.random.default_rng(2).standard_normal((2, 3000, 2)).astype(np.float32)
    y = run(path, x, chunk_sizes("mix", 3000))
    ref = m.forward_steps(torch.from_numpy(x)).detach().numpy()
    assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max()


def test_state_carry_reset_and_metadata(tmp_path):
    m = model("dplr", "pb", 2, "batch")
    path = tmp_path / "m.onnx"
    meta = {
        "task": "speech",
        "sample_rate": 16000,
        "labels": ["a", "b", "c", "d"],
        "input_mean": 0.5,
        "input_std": 3.0,
    }
    export_model(m, path, chunk=160, meta=meta)
    proto = onnx.load(path)
    onnx.checker.check_model(proto)
    props = {p.key: p.value for p in proto.metadata_props}
    for key in (
        "model_config",
        "state_spec",
        "chunk",
        "sample_rate",
        "labels",
        "liquid_stream_version",
        "input_mean",
        "input_std",
        "sub_block",
    ):
        assert key in props, key
    assert json.loads(props["labels"]) == ["a", "b", "c", "d"]
    real = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.INT64)
    assert all(v.type.tensor_type.elem_type in real for v in proto.graph.input)

    s = OnnxStreamer(path)
    assert s.sample_rate == 16000 and s.labels == ["a", "b", "c", "d"]
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((300, 2)), rng.standard_normal((500, 2))
    whole = s.process(np.concatenate([a, b]))
    s.reset()
    parts = np.concatenate([s.process(a), s.process(b)])
    np.testing.assert_allclose(parts, whole, rtol=0, atol=1e-5 * np.abs(whole).max())
    s.reset()
    np.testing.assert_allclose(s.process(a), whole[:300], rtol=0, atol=1e-5 * np.abs(whole).max())
    # The graph standardises raw input itself: compare with the torch model on (x − μ)/σ.
    ref = m.forward_steps(torch.from_numpy((np.concatenate([a, b]) - 0.5) / 3.0).float()[None])
    assert np.abs(whole - ref[0].detach().numpy()).max() <= 1e-4 * np.abs(whole).max()
    report = verify_onnx(m, path, length=4000, meta=meta)
    assert report.ok, str(report)


def test_bad_inputs_and_files(tmp_path):
    m = model("diag", "pb", 2, "batch")
    path = tmp_path / "m.onnx"
    export_model(m, path, chunk=16)
    s = OnnxStreamer(path)
    with pytest.raises(ValueError, match="shape"):
        s.process(np.zeros((10, 3), np.float32))
    before = {k: v.copy() for k, v in s.state.items()}
    bad = np.zeros((10, 2), np.float32)
    bad[4, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        s.process(bad)
    assert all(np.array_equal(before[k], s.state[k]) for k in before)  # nothing lost
    with pytest.raises(OnnxModelError, match="not found"):
        OnnxStreamer(tmp_path / "missing.onnx")
    trunc = tmp_path / "trunc.onnx"
    trunc.write_bytes(path.read_bytes()[:2000])
    with pytest.raises(OnnxModelError, match="not a valid ONNX"):
        OnnxStreamer(trunc)
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00not onnx at all" * 10)
    with pytest.raises(OnnxModelError):
        OnnxStreamer(junk)
    plain = tmp_path / "plain.onnx"  # a valid ONNX file that is not a streaming model
    g = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])],
    )
    onnx.save(onnx.helper.make_model(g), plain)
    with pytest.raises(OnnxModelError, match="not a liquid-stream"):
        OnnxStreamer(plain)


def test_bidirectional_export_refused(tmp_path):
    m = LiquidS4Model(1, 2, d_model=4, n_layers=1, d_state=4, bidirectional=True)
    with pytest.raises(ValueError, match="bidirectional"):
        export_model(m, tmp_path / "m.onnx")


def test_cli_export_verify_and_errors(tmp_path):
    m = model("dplr", "pb", 2, "batch")
    ckpt = tmp_path / "m.pt"
    save_checkpoint(ckpt, m, meta={"task": "test", "sample_rate": 125})
    out = tmp_path / "m.onnx"
    r = CliRunner().invoke(
        main,
        [
            "export",
            str(ckpt),
            "--onnx",
            str(out),
            "--chunk",
            "32",
            "--verify",
            "--verify-length",
            "3000",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "OK" in r.output and out.is_file()
    bad = tmp_path / "bad.pt"
    bad.write_bytes(ckpt.read_bytes()[:100])
    r = CliRunner().invoke(main, ["export", str(bad), "--onnx", str(tmp_path / "x.onnx")])
    assert r.exit_code != 0 and "corrupt" in r.output


def test_streamer_runtime_does_not_import_torch(tmp_path):
    m = model("diag", None, 2, "batch")
    path = tmp_path / "m.onnx"
    export_model(m, path, chunk=16)
    code = (
        "import sys, numpy as np\n"
        "from liquid_stream import OnnxStreamer\n"
        f"s = OnnxStreamer({str(path)!r})\n"
        "y = s.process(np.zeros((5, 2), np.float32))\n"
        "assert y.shape == (5, 4), y.shape\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _mapped_model(kind: str) -> LiquidS4Model:
    """The models of the torch → ONNX state test: every state layout of the table in
    export/to_onnx.py's module docstring."""
    if kind == "diag-pb":  # ssm.z diag, w_buf; u_buf kept in ssm.buf (note b)
        return model("diag", "pb", 3, "layer", liquid_len=4)
    if kind == "dplr-kb":  # R > 1: ssm.buf with its R axis, u_buf
        return model("dplr", "kb", 3, "batch")
    if kind == "dense-kb":  # ssm.z dense
        return model("dplr", "kb", 2, "layer", d_state=16)
    if kind == "ltc":
        return model("diag", "ltc", 2, "batch")
    torch.manual_seed(0)
    if kind.startswith("logmel"):  # frontend.buffer / phase / held, decoder.history
        fe = {"kind": "logmel", **({"cmn_s": 0.3} if kind == "logmel-cmn" else {})}
        return LiquidS4Model(  # logmel-cmn: frontend.cmn / cmn_weight too
            1,
            5,
            d_model=16,
            n_layers=2,
            d_state=8,
            mode="diag",
            liquid="pb",
            liquid_order=2,
            norm="layer",
            decoder="window",
            decoder_window=7,
            frontend=fe,
        ).eval()
    hop = 10 if kind == "scalenorm-10" else 5  # 10: the main job's 12.5 Hz stack
    return LiquidS4Model(  # scalenorm: frontend.origin / mean / var / weight / acc / ...
        2,
        3,
        d_model=16,
        n_layers=2,
        d_state=8,
        mode="diag",
        liquid="pb",
        liquid_order=2,
        norm="layer",
        decoder="pool",
        frontend={"kind": "scalenorm", "tau_s": 0.5, "hop": hop},
    ).eval()


@pytest.mark.parametrize(
    "kind", ["diag-pb", "dplr-kb", "dense-kb", "ltc", "logmel", "logmel-cmn", "scalenorm"]
)
@pytest.mark.slow
def test_torch_state_continues_in_onnx(tmp_path, kind):
    """export/to_onnx.py's state table as code (onnx_state_from_torch): a stream begun in
    torch (model.streaming(), two chunks) continues in onnxruntime from the converted state
    exactly as an ONNX-only run of the whole stream (float32 rounding, 1e-5 relative)."""
    from liquid_stream.export.to_onnx import onnx_state_from_torch

    m = _mapped_model(kind)
    path = tmp_path / "m.onnx"
    info = export_model(m, path, chunk=3200 if kind.startswith("logmel") else 160)
    assert info["sub_block"] > 1  # a partly filled sub-block carried over (ssm.fill > 0)
    L, first = (8000, [1234, 1001]) if m.hop > 1 else (600, [37, 50])
    x = np.random.default_rng(3).standard_normal((2, L, m.d_input)).astype(np.float32)
    if kind == "scalenorm":
        x = x * 30 + 500
    whole = run(path, x, chunk_sizes("mix", L))

    sm = m.streaming(sub_block=info["sub_block"])
    state, n = sm.init_state(2), 0
    for c in first:
        _, state = sm.step(torch.from_numpy(x[:, n : n + c]), state)
        n += c
    s = OnnxStreamer(path, batch=2, threads=2)
    converted = onnx_state_from_torch(state, s.state_spec)
    assert [e["name"] for e in s.state_spec] == list(converted)
    s.state = {f"state.{k}": v for k, v in converted.items()}
    rest = np.concatenate([s.process(x[:, i : i + 160]) for i in range(n, L, 160)], 1)
    ref = whole[:, n:]
    assert np.abs(rest - ref).max() <= 1e-5 * np.abs(ref).max()


def test_torch_state_of_another_sub_block_refused(tmp_path):
    from liquid_stream.export.to_onnx import onnx_state_from_torch

    m = _mapped_model("diag-pb")
    info = export_model(m, tmp_path / "m.onnx", chunk=160)
    sm = m.streaming(sub_block=info["sub_block"] // 2)
    with pytest.raises(ValueError, match="sub_block"):
        onnx_state_from_torch(sm.init_state(1), info["state_spec"])


def _whole_tables(model_proto: onnx.ModelProto) -> list[str]:
    """The initializers of the whole-call MatMuls (the 3-D constants of MatMuls in the
    ``whole`` branch of the stack's ``If``, export/to_onnx.py ``whole_layer``), at any
    depth."""
    inits = {t.name for t in model_proto.graph.initializer if len(t.dims) == 3}
    found = []

    def walk(graph):
        for node in graph.node:
            for a in node.attribute:
                if a.type != onnx.AttributeProto.GRAPH:
                    continue
                if a.g.name.startswith("whole"):
                    mats = [n for n in a.g.node if n.op_type == "MatMul"]
                    found.extend(n.input[0] for n in mats if n.input[0] in inits)
                walk(a.g)

    walk(model_proto.graph)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["columns", "rows", "scalenorm", "scalenorm-10"])
def test_whole_call_matmul(tmp_path, kind):
    """Sub-blocks of one step: a call of exactly the export's chunk runs each layer as one
    MatMul [y; next z] = W·[u; z] (``whole_layer``; "columns": the batch-last layout of
    a graph of ≤ 8 sub-blocks, "rows": the (B, 1, H·Mr) state of longer ones, "scalenorm":
    a vital-sign-like graph, 125-sample calls of 25 frames; "scalenorm-10": pooled by 10,
    so a 125-sample call makes 12 or 13 frames, and each count has its own branch). Equal
    to the conv forward for calls of only that length and mixed with others; and it is the
    path taken: the tables scaled by 1.01 break the run of whole calls, not a run of other
    lengths."""
    if kind.startswith("scalenorm"):
        m, chunk = _mapped_model(kind), 125
    else:
        m, chunk = model("diag", "pb", 2, "layer", d_state=16), {"columns": 6, "rows": 24}[kind]
    path = tmp_path / "m.onnx"
    export_model(m, path, chunk=chunk, sub_block=1)
    proto = onnx.load(path)
    tables = _whole_tables(proto)
    assert len(tables) == len(m.blocks) * (2 if kind == "scalenorm-10" else 1)
    L = 8000 if kind.startswith("scalenorm") else 4800
    x = np.random.default_rng(2).standard_normal((2, L, m.d_input)).astype(np.float32)
    if kind.startswith("scalenorm"):
        x = x * 30 + 500
    ref = m.forward_steps(torch.from_numpy(x)).detach().numpy()
    whole = [chunk] * (L // chunk) + ([L % chunk] if L % chunk else [])
    rng = np.random.default_rng(0)
    mixed = []
    while sum(mixed) < L:
        mixed.append(chunk if rng.random() < 0.5 else int(rng.integers(1, chunk + 1)))
    short = chunk - 2 * m.hop  # a stack step or two short of a whole call
    other = [short] * (-(-L // short))
    for sizes in (whole, mixed, other):
        y = run(path, x, sizes)
        assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max()

    for t in proto.graph.initializer:
        if t.name in tables:
            t.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(t) * 1.01, t.name))
    bad = tmp_path / "scaled.onnx"
    stamp_integrity(proto)  # scaled on purpose: stamped so that it loads
    onnx.save(proto, bad)
    assert np.abs(run(bad, x, whole) - ref).max() > 1e-3 * np.abs(ref).max()
    assert np.abs(run(bad, x, other) - ref).max() <= 1e-4 * np.abs(ref).max()
