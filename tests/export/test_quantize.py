"""int8 export (export/quantize.py): what is quantized and what stays float32, the metadata,
the verify tolerance, corrupted scales refused at load and by verify, and the int8 graphs
in a real onnxruntime session (the shipped models and a tiny trained-form checkpoint)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import numpy_helper
from test_onnx import CASES, model

from liquid_stream import OnnxStreamer
from liquid_stream.cli import main
from liquid_stream.export.pipeline import export_model
from liquid_stream.export.quantize import (
    QUANT_RTOL,
    float_tables_unchanged,
    quantize_file,
    verify_quantized,
    weight_roles,
)
from liquid_stream.models import shipped
from liquid_stream.nn.checkpoint import save_checkpoint
from liquid_stream.runtime.meta import ModelMeta
from liquid_stream.runtime.onnx_streamer import OnnxModelError
from liquid_stream.runtime.quantized import QuantizationError, stamp_integrity, tensor_digest

KWS, VITALS = shipped("kws-sc10"), shipped("vitals-ppg-hr")


@pytest.fixture(scope="module")
def kws_int8(tmp_path_factory):
    out = tmp_path_factory.mktemp("q") / "kws-int8.onnx"
    info, _ = quantize_file(KWS, out)
    return out, info


@pytest.fixture(scope="module")
def vitals_int8(tmp_path_factory):
    out = tmp_path_factory.mktemp("q") / "vitals-int8.onnx"
    quantize_file(VITALS, out)
    return out


def _props(proto: onnx.ModelProto) -> dict[str, str]:
    return {p.key: p.value for p in proto.metadata_props}


def _io_types(proto: onnx.ModelProto) -> dict[str, int]:
    vals = [*proto.graph.input, *proto.graph.output]
    return {v.name: v.type.tensor_type.elem_type for v in vals}


def test_weight_roles_of_the_shipped_graphs():
    kws = weight_roles(onnx.load(KWS))
    counts = {r: sum(v == r for v in kws.values()) for r in ("linear", "ssm", "frontend")}
    # encoder + 6 blocks × 2 GLU halves in each of the blocks' two branches (whole call,
    # chunked) + decoder; 6 × (G, [K_loc; E]) + 6 whole-call maps W; DFT conv + mel
    assert counts == {"linear": 1 + 6 * 2 * 2 + 1, "ssm": 6 * 3, "frontend": 2}
    front = onnx.load(KWS)
    ops = {n.name: n.op_type for g in [front.graph] for n in g.node}
    assert "Conv" not in {ops.get(n) for n, r in kws.items() if r != "frontend"}
    vit = weight_roles(onnx.load(VITALS))
    counts = {r: sum(v == r for v in vit.values()) for r in ("linear", "ssm", "frontend")}
    # encoder + 4 × 2 GLU halves in each of three branches (whole calls of 13 and of 12
    # frames at 12.5 Hz, chunked) + decoder; 4 × 2 SSM tables + 2 × 4 whole-call maps W; the
    # scale-norm front end's two within-block EMA Toeplitz products (mean, variance), which
    # stay float32
    assert counts == {"linear": 1 + 4 * 2 * 3 + 1, "ssm": 4 * 2 + 2 * 4, "frontend": 2}


@pytest.mark.slow
@pytest.mark.parametrize("mode,liquid,P,norm", CASES)
def test_every_layer_kind_quantizes_within_tolerance(tmp_path, mode, liquid, P, norm):
    """Two blocks of each kind (dplr / diag, PB / KB / none / LTC): the Linear layers
    quantized, each chunked SSM's two table MatMuls kept (the LTC scan has none)."""
    f32, q = tmp_path / "m.onnx", tmp_path / "q.onnx"
    export_model(model(mode, liquid, P, norm), f32, chunk=160)
    roles = weight_roles(onnx.load(f32))
    assert sum(r == "linear" for r in roles.values()) == 1 + 2 * 2 + 1
    assert sum(r == "ssm" for r in roles.values()) == (0 if liquid == "ltc" else 2 * 2)
    _, report = quantize_file(f32, q, verify=True, verify_length=2000)
    assert report.ok and report.rel > 0, str(report)


def test_int8_graph_metadata_and_what_stays_float32(kws_int8):
    path, info = kws_int8
    f32, q = onnx.load(KWS), onnx.load(path)
    props = _props(q)
    record = ModelMeta.from_onnx_props(props, strict=True).quantization
    assert record["method"] == "dynamic" and record["bits"] == 8
    assert record["weights"].startswith("uint8")  # W @ x: onnxruntime's first-input type
    assert record["rtol"] == QUANT_RTOL
    roles = weight_roles(f32)
    assert record["quantized"] == [n for n, r in roles.items() if r == "linear"]
    assert record["float32"] == {
        "ssm": [n for n, r in roles.items() if r == "ssm"],
        "frontend": [n for n, r in roles.items() if r == "frontend"],
    }
    assert record["params"] and all(len(v) == 16 for v in record["params"].values())
    # every other entry of the float32 graph's metadata is carried over unchanged (the
    # content hash is the int8 graph's own)
    for key, value in _props(f32).items():
        assert key == "integrity" or props[key] == value, key
    # the state path: same inputs and outputs, same float32 types; the state spec unchanged
    assert _io_types(q) == _io_types(f32)
    # every float initializer (SSM tables, scan powers, front end, norms, biases) bit for bit
    assert float_tables_unchanged(f32, q) == []
    ints = [n for n in _walk(q.graph) if n.op_type == "MatMulInteger"]
    # the GLU halves run in both branches of the blocks (whole call, chunked): 2 nodes each
    assert len(ints) == len(record["quantized"]) == info["quantized"] == 1 + 6 * 2 * 2 + 1
    # int8 weights: the file shrinks by at least half the float32 bytes of the quantized
    # weights (3/4 of them, less the scales; the whole-call maps W stay float32)
    inits = {t.name: t for t in f32.graph.initializer}
    linear = {i for n in _walk(f32.graph) if roles.get(n.name) == "linear" for i in n.input}
    lin_bytes = sum(4 * int(np.prod(inits[i].dims)) for i in linear if i in inits)
    assert KWS.stat().st_size - info["bytes"] >= 0.5 * lin_bytes > 0


def _walk(g):
    for n in g.node:
        yield n
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _walk(a.g)


def test_verify_passes_and_the_streamer_runs_the_int8_graph(vitals_int8):
    report = verify_quantized(VITALS, vitals_int8, length=4000)
    assert report.ok and report.finite and 0 < report.rel <= QUANT_RTOL, str(report)
    assert "OK" in str(report)
    ref, q = OnnxStreamer(VITALS), OnnxStreamer(vitals_int8)
    assert q.state_spec == ref.state_spec and q.chunk == ref.chunk
    rng = np.random.default_rng(1)
    # a minute of a large PPG-like signal in mixed chunks: finite, close to float32
    x = 500 * np.sin(np.arange(7500) / 125 * 2 * np.pi * 1.3) + rng.normal(0, 50, 7500)
    x = x.astype(np.float32)[:, None]
    pos = 0
    for c in [1, 7, 125, 300, 2000, 5067]:
        y0, y1 = ref.process(x[pos : pos + c]), q.process(x[pos : pos + c])
        assert np.isfinite(y1).all()
        assert np.abs(y1 - y0).max() <= QUANT_RTOL * max(np.abs(y0).max(), 1.0)
        pos += c
    assert pos == len(x)
    for k, v in q.state.items():
        assert v.dtype == ref.state[k].dtype and np.isfinite(v).all(), k


def _restamped(src, dst, edit) -> None:
    """Copy the int8 graph ``src`` to ``dst`` with ``edit(array)`` applied to its first
    weight scale; the checksum in the metadata updated to match (so only verify can tell)."""
    q = onnx.load(src)
    props = _props(q)
    record = json.loads(props["quantization"])
    name = next(n for n in record["params"] if n.endswith("_scale"))
    t = next(t for t in q.graph.initializer if t.name == name)
    t.CopyFrom(numpy_helper.from_array(edit(numpy_helper.to_array(t)), name))
    record["params"][name] = tensor_digest(t)
    props["quantization"] = json.dumps(record)
    del q.metadata_props[:]
    for k, v in props.items():
        q.metadata_props.add(key=k, value=v)
    stamp_integrity(q)  # and the content hash
    onnx.save(q, dst)


@pytest.mark.slow
def test_verify_enforces_the_tolerance(tmp_path, vitals_int8):
    good = verify_quantized(VITALS, vitals_int8, length=3000)
    assert good.ok
    strict = verify_quantized(VITALS, vitals_int8, length=3000, rtol=good.rel / 2)
    assert not strict.ok and "FAILED" in str(strict)  # the same graph, a tolerance it misses
    bad = tmp_path / "bad.onnx"  # a scale ×2, consistently stamped: loads, runs, is wrong
    _restamped(vitals_int8, bad, lambda a: (a * 2).astype(a.dtype))
    OnnxStreamer(bad).process(np.zeros((10, 1), np.float32))
    report = verify_quantized(VITALS, bad, length=3000)
    assert report.finite and report.rel > QUANT_RTOL and not report.ok, str(report)
    # and the quantization itself, refused past the tolerance: its SSM tables quantized too
    # (vitals-ppg-rr: 0.14–0.32 of max|y| over 16 000 steps; their error grows with time)
    with pytest.raises(RuntimeError, match="outside its tolerance; removed"):
        quantize_file(
            shipped("vitals-ppg-rr"), tmp_path / "t.onnx", verify=True, roles=("linear", "ssm")
        )
    assert not (tmp_path / "t.onnx").exists()


@pytest.mark.slow
def test_verify_refuses_quantized_ssm_tables_that_the_tolerance_would_pass(tmp_path):
    """The spotter with its SSM tables quantized too moves little on random input (0.026–
    0.039 of max|y|, inside QUANT_RTOL) but 28 % on speech: verify refuses it by role (the
    float graph's own weight_roles), naming the nodes, whatever the numbers."""
    out = tmp_path / "kws-ssm-int8.onnx"
    with pytest.raises(RuntimeError, match="must stay float32") as e:
        quantize_file(KWS, out, verify=True, verify_length=2000, roles=("linear", "ssm"))
    assert not out.exists() and "\n" not in str(e.value)
    quantize_file(KWS, out, roles=("linear", "ssm"))  # written without verify: then checked
    report = verify_quantized(KWS, out, length=2000)
    ssm = [n for n, r in weight_roles(onnx.load(KWS)).items() if r == "ssm"]
    assert report.rel <= QUANT_RTOL and report.finite  # numerically it would pass
    assert not report.ok and set(report.not_linear) == set(ssm) and len(ssm) > 0


@pytest.mark.parametrize(
    "edit,why",
    [(lambda a: a * 1e3, "does not match its checksum"), (lambda a: a * np.nan, "not finite")],
)
def test_corrupted_scale_is_refused_at_load_and_by_verify(tmp_path, kws_int8, edit, why):
    path, _ = kws_int8
    q = onnx.load(path)
    name = next(n for n in json.loads(_props(q)["quantization"])["params"] if "scale" in n)
    t = next(t for t in q.graph.initializer if t.name == name)
    t.CopyFrom(numpy_helper.from_array(edit(numpy_helper.to_array(t)).astype(np.float32), name))
    bad = tmp_path / "corrupt.onnx"
    onnx.save(q, bad)
    with pytest.raises(OnnxModelError, match=why) as e:
        OnnxStreamer(bad)
    assert "\n" not in str(e.value) and name in str(e.value) and str(bad) in str(e.value)
    with pytest.raises(QuantizationError, match=why):
        verify_quantized(KWS, bad, length=100)


def test_cli_export_int8_from_a_checkpoint_and_from_onnx(tmp_path):
    m = model("dplr", "pb", 2, "batch")
    ckpt = tmp_path / "m.pt"
    save_checkpoint(ckpt, m, meta={"task": "test", "sample_rate": 125})
    out = tmp_path / "m-int8.onnx"
    args = [
        "export",
        str(ckpt),
        "--onnx",
        str(out),
        "--chunk",
        "32",
        "--quantize",
        "int8",
        "--verify",
        "--verify-length",
        "3000",
    ]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert "verify: 3000 steps" in r.output and "contract ≤ 0.0001) OK" in r.output
    assert "verify int8:" in r.output and f"tolerance ≤ {QUANT_RTOL:g})" in r.output
    assert json.loads(r.output.splitlines()[0].removeprefix("wrote "))["quantized"] == 2 * 2 + 2
    s = OnnxStreamer(out)
    y = s.process(np.random.default_rng(0).standard_normal((200, 2)).astype(np.float32))
    assert y.shape == (200, 4) and np.isfinite(y).all()
    assert json.loads(s.metadata["quantization"])["method"] == "dynamic"
    # an exported float32 graph is quantized directly; an int8 graph is not quantized twice
    f32 = tmp_path / "m.onnx"
    assert CliRunner().invoke(main, ["export", str(ckpt), "--onnx", str(f32)]).exit_code == 0
    again = tmp_path / "again.onnx"
    r = CliRunner().invoke(
        main,
        [
            "export",
            str(f32),
            "--onnx",
            str(again),
            "--quantize",
            "int8",
            "--verify",
            "--verify-length",
            "2000",
        ],
    )
    assert r.exit_code == 0 and "verify int8:" in r.output and "OK" in r.output, r.output
    r = CliRunner().invoke(
        main, ["export", str(again), "--onnx", str(tmp_path / "x.onnx"), "--quantize", "int8"]
    )
    assert r.exit_code != 0 and "already quantized" in r.output
    r = CliRunner().invoke(main, ["export", str(f32), "--onnx", str(tmp_path / "y.onnx")])
    assert r.exit_code != 0 and "needs --quantize" in r.output
    assert not (tmp_path / "x.onnx").exists() and not (tmp_path / "y.onnx").exists()
