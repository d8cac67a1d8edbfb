"""An ensemble as one streaming graph (export/ensemble.py): a classifiers' ensemble's
posteriors are the mean of the members' — against the members' float64 torch forwards and
against the member graphs streamed alone, in random chunks; a regressors' ensemble's
estimate is the mean of the members' estimates, in physical units, and the vitals app reads
it as any estimator; the members' states are the graph's, so the batched server steps it
like any graph; checkpoints that cannot be averaged are refused before anything is
written."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from liquid_stream import LiquidS4Model
from liquid_stream.cli import main as cli
from liquid_stream.export.ensemble import export_ensemble
from liquid_stream.nn.checkpoint import save_checkpoint
from liquid_stream.runtime.meta import ModelMeta
from liquid_stream.runtime.onnx_streamer import OnnxStreamer

SR = 16000
LABELS = ["yes", "no", "_silence_"]


def _member(path, seed: int, labels=LABELS, d_model: int = 16, task: str = "speech-stream"):
    """A small untrained causal log-mel classifier (random weights from ``seed``) saved as
    a checkpoint with a keyword spotter's metadata."""
    torch.manual_seed(seed)
    model = LiquidS4Model(
        1,
        len(labels),
        d_model=d_model,
        n_layers=2,
        d_state=4,
        mode="diag",
        liquid="pb",
        liquid_order=2,
        norm="layer",
        decoder="window",
        decoder_window=5,
        dt_min=1e-3,
        dt_max=0.1,
        frontend={"kind": "logmel", "n_mels": 8},
    ).eval()
    meta = {
        "task": task,
        "labels": list(labels),
        "sample_rate": SR,
        "input_mean": [0.0],
        "d_input": 1,
        "d_output": len(labels),
        "input_std": [1.0],
        "silence_class": len(labels) - 1,
    }
    save_checkpoint(path, model, meta)
    return model


def _posteriors(y: np.ndarray) -> np.ndarray:
    z = np.exp(y - y.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def _stream(path, x: np.ndarray, chunks) -> np.ndarray:
    s = OnnxStreamer(path, batch=x.shape[0])
    out, pos = [], 0
    for c in chunks:
        out.append(s.process(x[:, pos : pos + c]))
        pos += c
    return np.concatenate(out, 1)


@pytest.fixture(scope="module")
def ensemble(tmp_path_factory):
    d = tmp_path_factory.mktemp("ens")
    models = [_member(d / f"m{i}.pt", seed=i) for i in range(2)]
    info, reports = export_ensemble(
        [d / "m0.pt", d / "m1.pt"], d / "ens.onnx", chunk=480, verify=True, verify_length=4000
    )
    return d, models, info, reports


def test_ensemble_posteriors_are_the_members_mean(ensemble):
    d, models, info, reports = ensemble
    assert info["members"] == 2 and [r.quantity for r in reports] == ["y", "y", "p"]
    assert all(r.ok for r in reports)
    rng = np.random.default_rng(3)
    x = (0.1 * rng.standard_normal((2, 6000, 1))).astype(np.float32)
    chunks = []
    while sum(chunks) < x.shape[1]:  # random sizes 1 … 480, not aligned with the 160 hop
        chunks.append(int(min(rng.integers(1, 481), x.shape[1] - sum(chunks))))
    p = _posteriors(_stream(d / "ens.onnx", x, chunks).astype(np.float64))
    with torch.no_grad():  # float64 reference: the mean of the members' posteriors
        ref = np.mean(
            [
                torch.softmax(m.double().forward_steps(torch.from_numpy(x).double()), -1).numpy()
                for m in models
            ],
            0,
        )
    assert np.abs(p - ref).max() <= 1e-4 * np.abs(ref).max()
    # any chunking: the same posteriors
    one_shot = _posteriors(_stream(d / "ens.onnx", x, [480] * 12 + [240]).astype(np.float64))
    assert np.abs(one_shot - p).max() <= 1e-6


def test_ensemble_state_and_metadata(ensemble):
    d, _, _, _ = ensemble
    s = OnnxStreamer(d / "ens.onnx")
    meta = ModelMeta.from_onnx_props(s.metadata)
    names = [x["name"] for x in meta.state_spec]
    assert names and all(n.startswith(("m0.", "m1.")) for n in names)
    assert sum(n.startswith("m0.") for n in names) == sum(n.startswith("m1.") for n in names)
    assert meta.ensemble["members"] == 2 and len(meta.ensemble["member_sha256"]) == 2
    assert meta.labels == LABELS and meta.sample_rate == SR


def test_cli_ensemble_matches_member_graphs(ensemble, tmp_path):
    """``export A.pt B.pt``: the ensemble of the CLI equals the mean posterior of the two
    member graphs that ``export A.pt`` / ``export B.pt`` write, streamed alone."""
    d, _, _, _ = ensemble
    run = CliRunner().invoke(
        cli,
        [
            "export",
            str(d / "m0.pt"),
            str(d / "m1.pt"),
            "--onnx",
            str(tmp_path / "e.onnx"),
            "--chunk",
            "480",
            "--verify",
            "--verify-length",
            "2000",
        ],
    )
    assert run.exit_code == 0, run.output
    assert run.output.count(" OK") == 3 and "max|Δp|" in run.output
    for i in range(2):
        r = CliRunner().invoke(
            cli,
            [
                "export",
                str(d / f"m{i}.pt"),
                "--onnx",
                str(tmp_path / f"m{i}.onnx"),
                "--chunk",
                "480",
            ],
        )
        assert r.exit_code == 0, r.output
    x = (0.1 * np.random.default_rng(5).standard_normal((1, 3000, 1))).astype(np.float32)
    chunks = [160, 7, 333, 480, 1, 479, 1540]
    p = _posteriors(_stream(tmp_path / "e.onnx", x, chunks).astype(np.float64))
    ref = np.mean(
        [
            _posteriors(_stream(tmp_path / f"m{i}.onnx", x, chunks).astype(np.float64))
            for i in range(2)
        ],
        0,
    )
    assert np.abs(p - ref).max() <= 1e-6


def _regressor(path, seed: int, target: str = "hr", channels=("PLETH", "II"), hop: int = 5):
    """A small untrained HR estimator (random weights from ``seed``; the scale-norm front
    end, so any units) saved with a vital-sign model's metadata."""
    torch.manual_seed(seed)
    model = LiquidS4Model(
        len(channels),
        1,
        d_model=8,
        n_layers=2,
        d_state=4,
        mode="diag",
        liquid="pb",
        liquid_order=2,
        norm="layer",
        decoder="window",
        decoder_window=6,
        dt_min=1e-3,
        dt_max=0.1,
        frontend={"kind": "scalenorm", "hop": hop},
        output_shift=80.0,
        output_scale=15.0,
    ).eval()
    meta = {
        "task": "bidmc",
        "labels": [target],
        "target": target,
        "units": "bpm",
        "sample_rate": 125,
        "d_input": len(channels),
        "d_output": 1,
        "channels": list(channels),
        "window": 30,
        "input_mean": [0.0] * len(channels),
        "input_std": [1.0] * len(channels),
        "target_mean": 80.0,
        "target_std": 15.0,
    }
    save_checkpoint(path, model, meta)
    return model


def test_regressors_ensemble_is_the_mean_estimate(tmp_path):
    """Two HR estimators of different seeds: the graph's y equals the mean of the members'
    float64 torch outputs and of the member graphs streamed alone (any chunking), in bpm;
    its metadata keeps the target and channels; the CLI's --verify checks it."""
    models = [_regressor(tmp_path / f"h{i}.pt", seed=i) for i in range(2)]
    run = CliRunner().invoke(
        cli,
        [
            "export",
            str(tmp_path / "h0.pt"),
            str(tmp_path / "h1.pt"),
            "--onnx",
            str(tmp_path / "e.onnx"),
            "--chunk",
            "125",
            "--verify",
            "--verify-length",
            "2000",
        ],
    )
    assert run.exit_code == 0, run.output
    assert run.output.count(" OK") == 3 and "max|Δp|" not in run.output
    for i in range(2):
        r = CliRunner().invoke(
            cli,
            [
                "export",
                str(tmp_path / f"h{i}.pt"),
                "--onnx",
                str(tmp_path / f"h{i}.onnx"),
                "--chunk",
                "125",
            ],
        )
        assert r.exit_code == 0, r.output
    rng = np.random.default_rng(2)
    x = (300.0 * rng.standard_normal((1, 1500, 2)) + 1000.0).astype(np.float32)
    chunks = [125, 1, 60, 124, 125, 3, 1062]
    y = _stream(tmp_path / "e.onnx", x, chunks).astype(np.float64)
    alone = [_stream(tmp_path / f"h{i}.onnx", x, chunks).astype(np.float64) for i in range(2)]
    assert np.abs(alone[0] - alone[1]).max() > 1.0  # the members differ
    assert np.abs(y - (alone[0] + alone[1]) / 2).max() <= 1e-4 * np.abs(y).max()
    with torch.no_grad():
        ref = np.mean(
            [m.double().forward_steps(torch.from_numpy(x).double()).numpy() for m in models], 0
        )
    assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max()
    meta = ModelMeta.from_onnx_props(OnnxStreamer(tmp_path / "e.onnx").metadata)
    assert meta.target == "hr" and meta.channels == ["PLETH", "II"] and meta.units == "bpm"
    assert meta.ensemble["combine"] == "mean of the members' outputs"


def test_members_of_different_hops_share_the_shorter_longest_call(tmp_path):
    """Pooled by 5 and by 10 samples and exported for 125-sample chunks, the members accept
    calls of up to 125 and 130 samples (the hop rounds the chunk up); the ensemble takes
    up to 125, and its output is the mean of the members' per-sample outputs."""
    models = [_regressor(tmp_path / f"h{h}.pt", seed=h, hop=h) for h in (5, 10)]
    info, reports = export_ensemble(
        [tmp_path / "h5.pt", tmp_path / "h10.pt"],
        tmp_path / "e.onnx",
        chunk=125,
        verify=True,
        verify_length=2000,
    )
    assert info["max_chunk"] == 125 and all(r.ok for r in reports) and len(reports) == 3
    meta = ModelMeta.from_onnx_props(OnnxStreamer(tmp_path / "e.onnx").metadata)
    assert meta.max_chunk == 125 and meta.chunk == 125
    x = (30.0 * np.random.default_rng(3).standard_normal((1, 1000, 2)) + 7.0).astype(np.float32)
    y = _stream(tmp_path / "e.onnx", x, [125, 1, 124, 7, 118, 125, 500]).astype(np.float64)
    with torch.no_grad():
        ref = np.mean(
            [m.double().forward_steps(torch.from_numpy(x).double()).numpy() for m in models], 0
        )
    assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max()


def test_weighted_regressors_ensemble(tmp_path):
    """``export A B C --weights 1,1,3``: y = Σ w_i y_i with w = (0.2, 0.2, 0.6), against the
    members' float64 torch outputs and the member graphs streamed alone (any chunking);
    the weights are in the metadata, summing to 1; `evaluate --mean --weights` and the
    weights-free graph differ as they must."""
    models = [_regressor(tmp_path / f"h{i}.pt", seed=i) for i in range(3)]
    ck = [str(tmp_path / f"h{i}.pt") for i in range(3)]
    run = CliRunner().invoke(
        cli,
        [
            "export",
            *ck,
            "--onnx",
            str(tmp_path / "w.onnx"),
            "--chunk",
            "125",
            "--weights",
            "1,1,3",
            "--verify",
            "--verify-length",
            "2000",
        ],
    )
    assert run.exit_code == 0, run.output
    assert run.output.count(" OK") == 4
    for i in range(3):
        r = CliRunner().invoke(
            cli, ["export", ck[i], "--onnx", str(tmp_path / f"h{i}.onnx"), "--chunk", "125"]
        )
        assert r.exit_code == 0, r.output
    rng = np.random.default_rng(4)
    x = (300.0 * rng.standard_normal((1, 1500, 2)) - 500.0).astype(np.float32)
    chunks = [7, 125, 1, 124, 243, 1000]
    y = _stream(tmp_path / "w.onnx", x, chunks).astype(np.float64)
    alone = np.stack(
        [_stream(tmp_path / f"h{i}.onnx", x, chunks).astype(np.float64) for i in range(3)]
    )
    w = np.array([0.2, 0.2, 0.6])
    assert np.abs(y - np.tensordot(w, alone, axes=1)).max() <= 1e-5 * np.abs(y).max()
    assert np.abs(y - alone.mean(0)).max() > 1e-2 * np.abs(y).max()  # not the plain mean
    with torch.no_grad():
        ref = np.tensordot(
            w,
            np.stack(
                [m.double().forward_steps(torch.from_numpy(x).double()).numpy() for m in models]
            ),
            axes=1,
        )
    assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max()
    meta = ModelMeta.from_onnx_props(OnnxStreamer(tmp_path / "w.onnx").metadata)
    assert meta.ensemble["weights"] == pytest.approx([0.2, 0.2, 0.6], abs=1e-15)
    assert meta.ensemble["combine"] == "weighted mean of the members' outputs"
    # a weighted torch mean (what `evaluate --mean --weights` scores) is the graph's y at
    # the frames' last samples (hop 5)
    from liquid_stream.training.evaluate_vitals import MeanOf

    with torch.no_grad():
        mean = MeanOf([m.double() for m in models], [1, 1, 3])(torch.from_numpy(x).double())
    assert np.abs(mean.numpy() - ref[:, 4::5]).max() <= 1e-12 * np.abs(ref).max()


def test_weighted_classifiers_ensemble_is_the_weighted_posterior(tmp_path):
    """Weights on a spotter's ensemble: its posteriors are Σ w_i softmax(y_i) (float64
    torch reference), the --verify of export_ensemble checks the same."""
    models = [_member(tmp_path / f"m{i}.pt", seed=i) for i in range(2)]
    info, reports = export_ensemble(
        [tmp_path / "m0.pt", tmp_path / "m1.pt"],
        tmp_path / "w.onnx",
        chunk=480,
        verify=True,
        verify_length=2000,
        weights=[3, 1],
    )
    assert all(r.ok for r in reports) and [r.quantity for r in reports] == ["y", "y", "p"]
    x = (0.1 * np.random.default_rng(6).standard_normal((1, 3000, 1))).astype(np.float32)
    p = _posteriors(_stream(tmp_path / "w.onnx", x, [480, 1, 7, 160, 2352]).astype(np.float64))
    with torch.no_grad():
        post = [
            torch.softmax(m.double().forward_steps(torch.from_numpy(x).double()), -1).numpy()
            for m in models
        ]
    assert np.abs(p - (0.75 * post[0] + 0.25 * post[1])).max() <= 1e-4
    assert np.abs(p - (post[0] + post[1]) / 2).max() > 1e-3
    meta = ModelMeta.from_onnx_props(OnnxStreamer(tmp_path / "w.onnx").metadata)
    assert meta.ensemble["weights"] == [0.75, 0.25]


@pytest.mark.parametrize(
    ("weights", "n", "want"),
    [
        ("1,2", 3, "2 ensemble weights for 3 members"),
        ("1,0,1", 3, "finite and positive"),
        ("1,-1", 2, "finite and positive"),
        ("1,nan", 2, "finite and positive"),
        ("a,b", 2, "not comma-separated numbers"),
        ("1", 1, "two or more checkpoints"),
    ],
)
def test_bad_weights_are_refused_before_anything_is_written(tmp_path, weights, n, want):
    ck = [str(tmp_path / f"h{i}.pt") for i in range(n)]
    for i in range(n):
        _regressor(ck[i], seed=i)
    out = tmp_path / "w.onnx"
    r = CliRunner().invoke(cli, ["export", *ck, "--onnx", str(out), "--weights", weights])
    assert r.exit_code != 0 and not out.exists()
    msg = r.output.strip().splitlines()[-1]
    assert msg.startswith("Error: ") and want in msg, msg


@pytest.mark.parametrize("bad", ["labels", "regression", "quantize", "channels"])
def test_refused_before_anything_is_written(tmp_path, bad):
    _member(tmp_path / "a.pt", seed=0)
    args = []
    if bad == "labels":
        _member(tmp_path / "b.pt", seed=1, labels=["up", "down", "_silence_"])
    elif bad == "regression":  # a vitals-style regression checkpoint: no class posteriors
        torch.manual_seed(0)
        m = LiquidS4Model(
            1, 1, d_model=8, n_layers=1, d_state=4, mode="diag", decoder="window", decoder_window=4
        )
        meta = {
            "task": "bidmc",
            "labels": ["hr"],
            "target": "hr",
            "units": "bpm",
            "sample_rate": 125,
            "d_input": 1,
            "d_output": 1,
            "channels": ["PLETH"],
            "window": 4,
            "input_mean": [0.0],
            "input_std": [1.0],
            "target_mean": 80.0,
            "target_std": 10.0,
        }
        save_checkpoint(tmp_path / "b.pt", m, meta)
    elif bad == "channels":  # two regressors that read their channels in another order
        _regressor(tmp_path / "a.pt", seed=0)
        _regressor(tmp_path / "b.pt", seed=1, channels=("II", "PLETH"))
    else:
        _member(tmp_path / "b.pt", seed=1)
        args = ["--quantize", "int8"]
    out = tmp_path / "e.onnx"
    r = CliRunner().invoke(
        cli, ["export", str(tmp_path / "a.pt"), str(tmp_path / "b.pt"), "--onnx", str(out), *args]
    )
    assert r.exit_code != 0 and not out.exists()
    msg = r.output.strip().splitlines()[-1]
    want = {
        "labels": "'labels'",
        "regression": "a regressor and member 0 a classifier",
        "quantize": "without --quantize",
        "channels": "'channels'",
    }
    assert want[bad] in msg
    assert msg.startswith("Error: ")


def test_batched_server_session_steps_the_ensemble_like_any_graph(ensemble):
    """The server's BatchedSession: streams joining at different rounds, each stream's
    posteriors and states equal to its own OnnxStreamer's (float32 rounding)."""
    from liquid_stream.apps.batch import BatchedSession

    d, _, _, _ = ensemble
    path = d / "ens.onnx"
    bs = BatchedSession(path, max_streams=4)
    T = bs.chunk
    rng = np.random.default_rng(1)
    sig = {k: (0.1 * rng.standard_normal((T * 4, 1))).astype(np.float32) for k in range(3)}
    join = {0: 0, 1: 0, 2: 1}
    refs, pos = {}, dict.fromkeys(sig, 0)
    for r in range(5):
        for k in sig:
            if join[k] == r:
                bs.add(k)
                refs[k] = OnnxStreamer(path, threads=1)
        blocks = {k: sig[k][pos[k] : pos[k] + T] for k in bs.keys() if pos[k] + T <= len(sig[k])}
        if not blocks:
            break
        out = bs.step(blocks)
        assert not bs.errors and out.keys() == blocks.keys()
        for k, x in blocks.items():
            ref = refs[k].process(x)
            assert np.abs(_posteriors(out[k]) - _posteriors(ref)).max() <= 1e-5
            pos[k] += T
            for s, v in refs[k].state.items():
                np.testing.assert_allclose(
                    bs.state(k)[s], v, rtol=1e-5, atol=1e-5 * max(float(np.abs(v).max()), 1e-30)
                )
