"""The log-mel front end (liquid_stream/nn/frontend.py): the features against a literal float64
reference, and the exactness contract (docs/design.md §5) for whole models that take raw
samples: step form = forward to 1e-9 in float64 and ONNX within 1e-4·max|y| in float32,
for chunks that are shorter than the hop and not aligned with it."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch

from liquid_stream import LiquidS4Model
from liquid_stream.nn.frontend import LogMel, LogMelConfig, LogMelStep, hold
from liquid_stream.runtime.onnx_streamer import OnnxStreamer

pytest.importorskip("onnxruntime")
from liquid_stream.export.pipeline import export_model  # noqa: E402

SR = 16000


def literal_logmel(x: np.ndarray, cfg: LogMelConfig) -> np.ndarray:
    """Frames, window, |DFT|², mel matrix and log written out from their definitions
    (loops over frames, bins and bands; nothing shared with the implementation)."""
    W, R, N = cfg.win, cfg.hop, cfg.n_fft
    x = np.concatenate([np.zeros(W), x])  # samples before the stream are 0
    window = np.array([0.5 - 0.5 * np.cos(2 * np.pi * n / W) for n in range(W)])
    freqs = np.arange(N // 2 + 1) * cfg.sample_rate / N

    def hz_to_mel(f):
        return 2595.0 * np.log10(1.0 + f / 700.0)

    mels = np.linspace(hz_to_mel(cfg.fmin), hz_to_mel(cfg.fmax), cfg.n_mels + 2)
    edges = 700.0 * (10 ** (mels / 2595.0) - 1.0)
    bank = np.zeros((cfg.n_mels, len(freqs)))
    for m in range(cfg.n_mels):
        lo, mid, hi = edges[m], edges[m + 1], edges[m + 2]
        for j, f in enumerate(freqs):
            if lo < f <= mid:
                bank[m, j] = (f - lo) / (mid - lo)
            elif mid < f < hi:
                bank[m, j] = (hi - f) / (hi - mid)
    out = []
    for k in range((len(x) - W) // R):
        end = W + (k + 1) * R  # frame k ends at stream sample (k+1)·R − 1
        frame = x[end - W : end] * window
        n = np.arange(W)
        spec = np.array(
            [np.sum(frame * np.exp(-2j * np.pi * j * n / N)) for j in range(len(freqs))]
        )
        out.append(np.log(bank @ np.abs(spec) ** 2 + cfg.log_floor))
    z = np.array(out)
    mean = np.zeros(cfg.n_mels) if cfg.mean is None else np.array(cfg.mean)
    std = np.ones(cfg.n_mels) if cfg.std is None else np.array(cfg.std)
    return (z - mean) / std


def test_logmel_equals_literal_reference_float64():
    rng = np.random.default_rng(0)
    cfg = LogMelConfig(mean=list(rng.normal(-5, 1, 40)), std=list(rng.uniform(1, 3, 40)))
    t = np.arange(2000) / SR
    x = 0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * rng.standard_normal(len(t))
    z = LogMel(cfg)(torch.from_numpy(x)[None, :, None]).numpy()[0]
    ref = literal_logmel(x, cfg)
    assert z.shape == (2000 // cfg.hop, 40) == ref.shape
    assert np.abs(z - ref).max() <= 1e-9 * max(1.0, np.abs(ref).max())
    # a 440 Hz tone puts its energy in the band whose centre is nearest 440 Hz
    raw = LogMel(LogMelConfig())(torch.from_numpy(np.sin(2 * np.pi * 440 * t))[None, :, None])
    assert int(raw[0, -1].argmax()) == int(np.abs(_band_centres(LogMelConfig()) - 440).argmin())


def _band_centres(cfg: LogMelConfig) -> np.ndarray:
    mels = np.linspace(*(2595 * np.log10(1 + np.array([cfg.fmin, cfg.fmax]) / 700)), cfg.n_mels + 2)
    return (700.0 * (10 ** (mels / 2595.0) - 1.0))[1:-1]


def test_logmel_is_causal_and_counts_frames():
    f = LogMel(LogMelConfig())
    x = torch.randn(1, 1000, 1, dtype=torch.float64)
    z = f(x)
    assert z.shape[1] == 1000 // 160
    x2 = x.clone()
    x2[:, 640:] += 1.0  # samples from 640 on change: frames ending before 640 must not
    z2 = f(x2)
    assert torch.equal(z[:, :4], z2[:, :4]) and not torch.equal(z[:, 4:], z2[:, 4:])
    assert f(x[:, :159]).shape == (1, 0, 40)


def literal_cmn(z: np.ndarray, beta: float) -> np.ndarray:
    """Each frame minus the weighted mean of the frames so far, written as the weighted sum
    it is: Σ_{j≤k} (1−β)·β^{k−j}·z_j / Σ_{j≤k} (1−β)·β^{k−j} (no recurrence)."""
    out = np.empty_like(z)
    for k in range(len(z)):
        wts = np.array([(1 - beta) * beta ** (k - j) for j in range(k + 1)])
        out[k] = z[k] - (wts[:, None] * z[: k + 1]).sum(0) / wts.sum()
    return out


def test_cmn_equals_literal_reference_float64():
    cfg = LogMelConfig(cmn_s=0.05, mean=list(np.linspace(-3, 1, 40)), std=[2.0] * 40)
    x = np.random.default_rng(4).standard_normal(4000) * 0.1
    ref = literal_cmn(literal_logmel(x, cfg), cfg.cmn_beta)
    got = LogMel(cfg)(torch.from_numpy(x).reshape(1, -1, 1))[0].numpy()
    assert got.shape == ref.shape == (25, 40)
    assert np.abs(got - ref).max() <= 1e-9 * np.abs(ref).max()
    assert np.abs(got[0]).max() < 1e-12  # the first frame is its own mean
    assert cfg.cmn_beta == pytest.approx(np.exp(-0.01 / 0.05))


def test_cmn_removes_the_input_gain_and_is_causal():
    """A gain g moves every log band by 2·ln g (where the energy is far above the floor);
    the running mean moves with it, so the frames do not change. Without the running
    mean they move by 2·ln g / σ."""
    x = torch.randn(1, 8000, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    x = x * 0.3
    on, off = LogMel(LogMelConfig(cmn_s=1.0)), LogMel(LogMelConfig())
    for g in (0.1, 10.0):
        # what the log floor ε = 1e-6 leaves (measured ≤ 1e-4 at g = 0.1), against a shift
        # of 2·|ln g| = 4.6 without the running mean
        assert (on(g * x) - on(x)).abs().max() < 5e-4
        assert (off(g * x) - off(x) - 2 * np.log(g)).abs().max() < 5e-4
    x2 = x.clone()
    x2[:, 4000:] *= 7.0
    assert torch.equal(on(x)[:, :24], on(x2)[:, :24])  # frame 24 ends at sample 3999


@pytest.mark.parametrize("cmn_s", [None, 0.3])
@pytest.mark.parametrize("chunks", [[1], [7], [160], [1600], [159, 161, 3, 1000], "random"])
def test_logmel_step_equals_forward(chunks, cmn_s):
    f = LogMel(LogMelConfig(cmn_s=cmn_s))
    x = torch.randn(2, 5000, 1, dtype=torch.float64) * 0.2
    ref = f(x)
    step = LogMelStep(f, torch.float64)
    state, out, pos = step.init_state(2), [], 0
    sizes = iter(np.random.default_rng(3).integers(1, 400, 1000)) if chunks == "random" else None
    while pos < 5000:
        c = int(next(sizes)) if sizes else chunks[len(out) % len(chunks)]
        y, state = step(x[:, pos : pos + c], state)
        out.append(y)
        pos += c
    y = torch.cat(out, 1)
    assert y.shape == ref.shape
    assert (y - ref).abs().max() <= 1e-12 * ref.abs().max()
    assert int(state["frontend.phase"][0]) == 5000 % 160
    assert ("frontend.cmn" in state) == (cmn_s is not None)


def test_hold_gives_each_sample_the_last_complete_frame():
    y = torch.arange(1, 4, dtype=torch.float64).reshape(1, 3, 1)  # frames 1, 2, 3
    out = hold(y, torch.zeros(1, 1, dtype=torch.float64), 0, 3 * 4 + 2, 4)[0, :, 0]
    # frame k completes at sample 4(k+1) − 1
    assert out.tolist() == [0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3]


def _model(liquid: str, mode: str, decoder: str, **kw) -> LiquidS4Model:
    torch.manual_seed(0)
    m = LiquidS4Model(
        1,
        5,
        d_model=16,
        n_layers=2,
        d_state=8,
        mode=mode,
        liquid=liquid,
        decoder=decoder,
        decoder_window=7,
        frontend={"kind": "logmel", **kw},
    )
    for b in m.modules():  # non-trivial BatchNorm statistics to fold
        if isinstance(b, torch.nn.BatchNorm1d):
            b.running_mean.uniform_(-0.5, 0.5)
            b.running_var.uniform_(0.5, 2.0)
    return m.eval()


CASES = [
    ("pb", "dplr", "window", {}),
    ("kb", "diag", "last", {}),
    ("ltc", "diag", "pool", {}),
    ("pb", "diag", "window", {"cmn_s": 0.2}),  # the running per-band mean in the state
]


@pytest.mark.slow
@pytest.mark.parametrize("liquid,mode,decoder,kw", CASES)
def test_model_step_equals_forward_float64(liquid, mode, decoder, kw):
    m = _model(liquid, mode, decoder, **kw).double()
    x = torch.randn(2, 4000, 1, dtype=torch.float64) * 0.1
    with torch.no_grad():
        ref = m.forward_steps(x)
        assert ref.shape == (2, 4000, 5)
        sm = m.streaming(dtype=torch.float64)
        rng = np.random.default_rng(0)
        for chunks in ([1], [7], [160], [1600], list(rng.integers(1, 500, 64))):
            state, out, pos = sm.init_state(2), [], 0
            while pos < 4000:
                c = int(chunks[len(out) % len(chunks)])
                y, state = sm(x[:, pos : pos + c], state)
                out.append(y)
                pos += c
            y = torch.cat(out, 1)
            assert (y - ref).abs().max() <= 1e-9 * ref.abs().max(), chunks[:3]


def test_frame_outputs_and_training_gradients():
    m = _model("pb", "dplr", "window").train()
    x = torch.randn(3, 1600, 1)
    y = m(x)
    assert y.shape == (3, 10, 5)  # one row per 10 ms frame
    y.square().mean().backward()
    missing = [n for n, p in m.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing
    assert not any("frontend" in k for k in m.state_dict())  # tables come from the config


@pytest.mark.slow
@pytest.mark.parametrize("liquid,mode,decoder,kw", CASES)
def test_onnx_takes_raw_samples_and_keeps_the_contract(tmp_path, liquid, mode, decoder, kw):
    m = _model(liquid, mode, decoder, **kw)
    meta = {"input_mean": 0.01, "input_std": 0.2, "sample_rate": SR}
    path = tmp_path / "m.onnx"
    export_model(m, path, chunk=1600, meta=meta)
    graph = onnx.load(str(path)).graph
    assert [d.dim_param or d.dim_value for d in graph.input[0].type.tensor_type.shape.dim] == [
        "batch",
        "T",
        1,
    ]
    s = OnnxStreamer(path)
    names = {sp["name"] for sp in s.state_spec}
    assert {"frontend.buffer", "frontend.phase", "frontend.held"} <= names
    assert ({"frontend.cmn", "frontend.cmn_weight"} <= names) == ("cmn_s" in kw)
    rng = np.random.default_rng(1)
    raw = (0.01 + 0.2 * 0.3 * rng.standard_normal((1, 16000, 1))).astype(np.float32)
    with torch.no_grad():
        ref = m.forward_steps((torch.from_numpy(raw).double() - 0.01).float() / 0.2).numpy()[0]
    for chunks in ([1], [7], [160], [1600], list(rng.integers(1, 1600, 40))):
        if chunks == [1]:
            n = 2000  # 2000 single-sample calls cover 12 frames; enough for the hop logic
        else:
            n = 16000
        s.reset()
        out, pos = [], 0
        while pos < n:
            c = int(chunks[len(out) % len(chunks)])
            out.append(s.process(raw[0, pos : min(pos + c, n)]))
            pos += c
        y = np.concatenate(out)
        assert y.shape == (n, 5)
        err = np.abs(y - ref[:n]).max()
        assert err <= 1e-4 * np.abs(ref).max(), (chunks[:3], err)


def test_frontend_config_errors():
    with pytest.raises(ValueError, match="frontend.kind"):
        LiquidS4Model(1, 2, frontend={"kind": "mfcc"})
    with pytest.raises(ValueError, match="mono audio"):
        LiquidS4Model(2, 2, frontend={"kind": "logmel"})
    with pytest.raises(ValueError, match="unknown field"):
        LiquidS4Model(1, 2, frontend={"kind": "logmel", "n_mel": 40})
    with pytest.raises(ValueError, match="hop ≤ win ≤ n_fft"):
        LogMelConfig(win_ms=50)
    with pytest.raises(ValueError, match="fmax"):
        LogMelConfig(fmax=9000)
    with pytest.raises(ValueError, match="frontend.std"):
        LogMelConfig(std=[1.0] * 39 + [0.0])
    for bad in (0, -1.0, float("inf"), "1", True):
        with pytest.raises(ValueError, match="frontend.cmn_s"):
            LogMelConfig(cmn_s=bad)
    m = LiquidS4Model(
        1, 2, d_model=8, n_layers=1, d_state=4, decoder="last", frontend={"kind": "logmel"}
    )
    with pytest.raises(ValueError, match="rate 1"):
        m(torch.zeros(1, 320, 1), rate=2.0)
    with pytest.raises(ValueError, match="rate 1"):
        m.streaming(rate=2.0)
