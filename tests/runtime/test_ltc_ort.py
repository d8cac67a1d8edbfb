"""The fused LTC custom op (liquid_stream/runtime/ltc_ort.py, ``ai.liquid_stream::LtcScan``): the op
alone in float64 against a literal loop written here (1e-9), thread-count independence, clear
errors for bad operands; a model exported with ``--ltc-op fused`` against the float64 model
over chunks 1, 7, 160, 1600 and mixes (docs/design.md §5), its state interchangeable with the
portable graph's; the CLI; and what happens where the op's library cannot be built."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from click.testing import CliRunner
from onnx import TensorProto, helper
from test_ltc_onnx import ltc_model, stream

from liquid_stream import OnnxStreamer
from liquid_stream.cli import main
from liquid_stream.export.ensemble import export_ensemble
from liquid_stream.export.pipeline import export_model
from liquid_stream.export.quantize import quantize_file
from liquid_stream.nn.checkpoint import save_checkpoint
from liquid_stream.runtime import ltc_ort
from liquid_stream.runtime.onnx_streamer import OnnxModelError

try:
    ltc_ort.library_path()
    UNAVAILABLE = None
except ltc_ort.LtcOpUnavailable as e:  # `make install` fetches the header; a bare venv may not
    UNAVAILABLE = str(e)
pytestmark = pytest.mark.skipif(UNAVAILABLE is not None, reason=str(UNAVAILABLE))


def literal(u, x, coef):
    """x_t = (Ā + B̃ tanh u_t) x_{t−1} + B̄ u_t, y_t = Re Σ_m C'_m x_t, one step at a time in
    complex128: ``u (B, T, H)``, ``x (B, 2, M, H)``, ``coef (4, H, M, 2)``."""
    A, Bl, Bb, C = (coef[k, ..., 0] + 1j * coef[k, ..., 1] for k in range(4))  # (H, M)
    xs = (x[:, 0] + 1j * x[:, 1]).transpose(0, 2, 1)  # (B, H, M)
    y = np.zeros(u.shape)
    for t in range(u.shape[1]):
        ut = u[:, t][..., None]  # (B, H, 1)
        xs = (A + Bl * np.tanh(ut)) * xs + Bb * ut
        y[:, t] = (C * xs).real.sum(-1)
    xs = xs.transpose(0, 2, 1)
    return y, np.stack([xs.real, xs.imag], 1)


def random_operands(rng, B, T, H, M):
    """A stable system (|Ā| + |B̃| < 1, so |a_t| < 1 for any u) and random u, x."""
    A = rng.uniform(0.2, 0.6, (H, M)) * np.exp(1j * rng.uniform(-np.pi, np.pi, (H, M)))
    Bl = rng.uniform(0.0, 0.35, (H, M)) * np.exp(1j * rng.uniform(-np.pi, np.pi, (H, M)))
    Bb, C = (rng.normal(size=(H, M)) + 1j * rng.normal(size=(H, M)) for _ in range(2))
    coef = np.stack([np.stack([z.real, z.imag], -1) for z in (A, Bl, Bb, C)])
    return rng.normal(size=(B, T, H)) * 2.0, rng.normal(size=(B, 2, M, H)), coef


def op_session(dtype, threads: int) -> ort.InferenceSession:
    """A graph of Tanh + LtcScan alone, in ``dtype`` (float32 or float64)."""
    tp = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}[dtype]
    nodes = [
        helper.make_node("Tanh", ["u"], ["g"]),
        helper.make_node(ltc_ort.OP, ["u", "g", "x", "coef"], ["y", "xn"], domain=ltc_ort.DOMAIN),
    ]
    io = [helper.make_tensor_value_info(n, tp, None) for n in ("u", "x", "coef", "y", "xn")]
    graph = helper.make_graph(nodes, "ltc_scan", io[:3], io[3:])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(ltc_ort.DOMAIN, 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    ltc_ort.register(options)
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


@pytest.mark.parametrize("B, T, H, M", [(1, 1, 16, 1), (2, 7, 20, 3), (3, 300, 37, 4)])
def test_op_float64_equals_the_literal_loop(B, T, H, M):
    """H not a multiple of the kernel's 8 lanes, one step, many, a batch: ≤ 1e-9."""
    u, x, coef = random_operands(np.random.default_rng(T), B, T, H, M)
    y, xn = op_session(np.float64, 1).run(None, {"u": u, "x": x, "coef": coef})
    y_ref, x_ref = literal(u, x, coef)
    assert np.abs(y - y_ref).max() <= 1e-9 * np.abs(y_ref).max()
    assert np.abs(xn - x_ref).max() <= 1e-9 * np.abs(x_ref).max()


def test_op_result_does_not_depend_on_threads():
    """Above the kernel's serial threshold the channel groups go to onnxruntime's threads;
    every channel has one owner, so 1, 2 and 3 threads give the same bits."""
    u, x, coef = random_operands(np.random.default_rng(1), 2, 1200, 40, 3)  # 144 k mode-steps
    feeds = {"u": u.astype(np.float32), "x": x.astype(np.float32), "coef": coef.astype(np.float32)}
    outs = [op_session(np.float32, th).run(None, feeds) for th in (1, 2, 3)]
    for other in outs[1:]:
        assert all(np.array_equal(a, b) for a, b in zip(outs[0], other, strict=True))
    y_ref, _ = literal(*(feeds[k].astype(np.float64) for k in ("u", "x", "coef")))
    assert np.abs(outs[0][0] - y_ref).max() <= 1e-5 * np.abs(y_ref).max()


@pytest.mark.parametrize("what", ["x", "coef", "g"])
def test_op_rejects_mismatched_operands(what):
    u, x, coef = random_operands(np.random.default_rng(0), 1, 5, 16, 2)
    feeds = {"u": u, "x": x, "coef": coef}
    if what == "x":
        feeds["x"] = x[:, :, :1]  # M = 1 where coef has M = 2
    elif what == "coef":
        feeds["coef"] = coef[:3]
    sess = op_session(np.float64, 1)
    if what == "g":  # u of another shape than the graph's g: feed a 2-D u
        feeds["u"] = u[0]
    with pytest.raises(Exception, match=r"LtcScan: (x must be|coef must be|u and g must be)"):
        sess.run(None, feeds)


def fused(tmp_path, seed=0, chunk=160):
    m = ltc_model(seed)
    info = export_model(m, tmp_path / "fused.onnx", chunk=chunk, ltc_op="fused")
    return m, info, tmp_path / "fused.onnx"


def test_fused_graph_is_one_op_a_layer(tmp_path):
    m, info, path = fused(tmp_path)
    proto = onnx.load(str(path))
    ops = [n.op_type for n in proto.graph.node]
    assert ops.count(ltc_ort.OP) == len(m.blocks) and "Scan" not in ops
    assert ltc_ort.uses_op(proto) and info["ltc_op"] == "fused"
    portable = export_model(m, tmp_path / "graph.onnx", chunk=160)
    assert info["state_spec"] == portable["state_spec"]  # the same states, names and layout
    assert not ltc_ort.uses_op(onnx.load(str(tmp_path / "graph.onnx")))
    assert info["nodes"] < portable["nodes"] / 3


PLANS = [[1] * 40, [7] * 30, [160] * 4, [1600, 1600], [37, 1, 160, 5, 1600, 13, 1, 300]]


@pytest.mark.parametrize("plan", PLANS)
def test_fused_graph_equals_the_float64_model(tmp_path, plan):
    """Outputs and carried states of the float32 graph within the contract of the float64
    model, for any chunking (a chunk longer than the export's chunk included)."""
    m, _, path = fused(tmp_path)
    rng = np.random.default_rng(len(plan))
    x = rng.standard_normal((2, sum(plan), 2)).astype(np.float32)
    x[1] *= 3.0  # tanh(u) near saturation
    y, state = stream(path, x, plan)
    m64 = ltc_model().double()
    ref = m64.forward_steps(torch.from_numpy(x).double()).detach().numpy()
    assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max()
    sm = m64.streaming(dtype=torch.float64)
    _, st = sm.step(torch.from_numpy(x).double(), sm.init_state(2))
    for i in range(len(m.blocks)):
        got = state[f"state.block{i}.ltc.x"]
        want = st[f"block{i}.ltc.x"].detach().numpy().transpose(0, 3, 2, 1)
        assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


def test_a_stream_moves_between_the_portable_and_the_fused_graph(tmp_path):
    m, _, path = fused(tmp_path, seed=3)
    export_model(m, tmp_path / "graph.onnx", chunk=160)
    x = np.random.default_rng(3).standard_normal((1, 900, 2)).astype(np.float32)
    a, b = OnnxStreamer(tmp_path / "graph.onnx"), OnnxStreamer(path)
    y1 = a.process(x[:, :450])
    b.state = a.state
    y2 = b.process(x[:, 450:])
    ref = ltc_model(3).double().forward_steps(torch.from_numpy(x).double()).detach().numpy()
    y = np.concatenate([y1, y2], 1)
    assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max()


def test_extreme_inputs_keep_the_state_finite(tmp_path):
    _, _, path = fused(tmp_path, seed=1)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 800, 2)) * 10.0 ** rng.integers(-3, 5, (1, 800, 1))
    x = x.astype(np.float32)
    y, state = stream(path, x, [160] * 5)
    assert np.isfinite(y).all() and all(np.isfinite(v).all() for v in state.values())
    ref = ltc_model(1).double().forward_steps(torch.from_numpy(x).double()).detach().numpy()
    assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max()


def test_cli_export_ltc_op_fused_verifies(tmp_path):
    ckpt = tmp_path / "m.pt"
    save_checkpoint(ckpt, ltc_model(), meta={"task": "test", "sample_rate": 125})
    out = tmp_path / "m.onnx"
    args = [
        "export",
        str(ckpt),
        "--onnx",
        str(out),
        "--chunk",
        "32",
        "--ltc-op",
        "fused",
        "--verify",
        "--verify-length",
        "3000",
    ]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert "OK" in r.output and '"ltc_op": "fused"' in r.output
    assert ltc_ort.uses_op(onnx.load(str(out)))


def test_without_the_library_export_and_load_say_why(tmp_path, monkeypatch):
    """No header: exporting with the op fails with one line naming the header and the fix,
    loading a graph that needs the op fails the same way, the portable graph still works."""
    m, _, path = fused(tmp_path)
    monkeypatch.setattr(ltc_ort, "include_dir", lambda: None)
    ltc_ort.library_path.cache_clear()
    try:
        with pytest.raises(ltc_ort.LtcOpUnavailable, match="onnxruntime_c_api.h.*make install"):
            export_model(m, tmp_path / "again.onnx", chunk=160, ltc_op="fused")
        assert not (tmp_path / "again.onnx").exists()
        with pytest.raises(OnnxModelError, match=r"fused\.onnx: .*onnxruntime_c_api\.h"):
            OnnxStreamer(path)
        export_model(m, tmp_path / "graph.onnx", chunk=160)
        OnnxStreamer(tmp_path / "graph.onnx").process(np.zeros((1, 10, 2), np.float32))
    finally:
        ltc_ort.library_path.cache_clear()


def test_a_fused_graph_quantizes_to_int8(tmp_path):
    """int8 export of a graph with the custom op: its Linear MatMuls in 8 bits, the op kept
    (float32), verified against the float32 graph within the int8 tolerance."""
    _, _, path = fused(tmp_path, seed=4)
    info, report = quantize_file(path, tmp_path / "q.onnx", verify=True, verify_length=2000)
    assert report.ok and report.rel > 0, str(report)
    q = onnx.load(str(tmp_path / "q.onnx"))
    ops = [n.op_type for n in q.graph.node]
    assert ops.count(ltc_ort.OP) == 2 and ops.count("MatMulInteger") == info["quantized"] > 0


def test_an_ensemble_of_ltc_models_exports_with_the_op(tmp_path):
    """`export A.pt B.pt --ltc-op fused`: every member's LTC layers as the op, each member
    and the weighted mean verified against torch."""
    paths = []
    for seed in (0, 5):
        paths.append(tmp_path / f"m{seed}.pt")
        meta = {"task": "test", "sample_rate": 125, "labels": ["a", "b", "c"]}  # a classifier
        save_checkpoint(paths[-1], ltc_model(seed), meta=meta)
    info, reports = export_ensemble(
        paths,
        tmp_path / "e.onnx",
        chunk=32,
        verify=True,
        verify_length=2000,
        weights=[1, 3],
        ltc_op="fused",
    )
    assert info["members"] == 2 and all(r.ok for r in reports) and len(reports) == 3
    ops = [n.op_type for n in onnx.load(str(tmp_path / "e.onnx")).graph.node]
    assert ops.count(ltc_ort.OP) == 4
