"""The streaming input guard (liquid_stream.runtime.validate): huge, NaN and malformed input is
refused by the ONNX streamer, the torch step form and the keyword-spotting app, with a
clear error, and never leaves the model's state non-finite or changed."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import scipy.io.wavfile
import torch
from click.testing import CliRunner
from fixtures_kws import (
    EVENTS,
    SR,
    parse_detections,
    tone_signal,
    train_tone_spotter,
    write_labels_csv,
)

from liquid_stream import LiquidS4Model, OnnxStreamer
from liquid_stream.apps.kws.cli import kws_cmd, kws_eval_cmd
from liquid_stream.apps.kws.spotter import KeywordSpotter, KwsInputError
from liquid_stream.export.pipeline import export_model
from liquid_stream.runtime.validate import MAX_STD, StreamInputError

MEAN, STD = 0.5, 2.0  # the exported model's input standardisation: bound 0.5 ± 2e6
SPIKE_S = 5.5  # the 1e30 sample of the spike WAVs: after three tone keywords (≤ 4.9 s)


def small_model(liquid_order: int = 2, seed: int = 0) -> LiquidS4Model:
    torch.manual_seed(seed)
    m = LiquidS4Model(
        1,
        3,
        d_model=8,
        n_layers=1,
        d_state=4,
        liquid="pb",
        liquid_order=liquid_order,
        norm="batch",
        decoder="window",
        decoder_window=8,
    )
    return m.eval()


@pytest.fixture(scope="module")
def onnx_paths(tmp_path_factory):
    d = tmp_path_factory.mktemp("guard")
    meta = {"input_mean": [MEAN], "input_std": [STD]}
    paths = {"pb2": d / "pb2.onnx", "pb8": d / "pb8.onnx"}
    export_model(small_model(2), paths["pb2"], chunk=32, meta=meta)
    export_model(small_model(8), paths["pb8"], chunk=32, meta=meta)
    return paths


@pytest.fixture(scope="module")
def tone_model(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        info = train_tone_spotter(tmp_path_factory.mktemp("kws") / "tone.onnx")
    finally:
        torch.set_num_threads(threads)
    assert info["accuracy"] > 0.9
    return info["path"]


def raw_blocks(n: int, length: int = 40, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(MEAN + STD * rng.standard_normal((length, 1))).astype(np.float32) for _ in range(n)]


def snapshot(state: dict) -> dict:
    if isinstance(next(iter(state.values())), torch.Tensor):
        return {k: v.clone() for k, v in state.items()}
    return {k: v.copy() for k, v in state.items()}


def assert_same_state(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        va, vb = (v.detach().cpu().numpy() if torch.is_tensor(v) else v for v in (a[k], b[k]))
        assert np.array_equal(va, vb), k
        if np.issubdtype(va.dtype, np.floating):
            assert np.isfinite(va).all(), k


# ------------------------------------------------------------------ OnnxStreamer


@pytest.mark.parametrize("value", [1e20, 1e18, -3e9, np.inf, np.nan])
def test_onnx_refuses_bad_block_and_continues_as_if_it_never_came(onnx_paths, value):
    good = raw_blocks(3)
    ref = OnnxStreamer(onnx_paths["pb2"], threads=1)
    expected = [ref.process(b) for b in good]

    s = OnnxStreamer(onnx_paths["pb2"], threads=1)
    np.testing.assert_array_equal(s.process(good[0]), expected[0])
    before = snapshot(s.state)
    bad = good[1].copy()
    bad[7, 0] = value
    with pytest.raises(StreamInputError, match=r"input step 7 of the chunk") as err:
        s.process(bad)
    assert isinstance(err.value, ValueError) and err.value.index == 7
    assert "state left unchanged" in str(err.value) and "\n" not in str(err.value)
    if np.isfinite(value):
        assert "outside the accepted range" in str(err.value)
    else:
        assert "NaN or infinite" in str(err.value)
    assert_same_state(s.state, before)  # unchanged and finite
    # the stream goes on exactly as if the refused block had never been sent
    np.testing.assert_array_equal(s.process(good[1]), expected[1])
    np.testing.assert_array_equal(s.process(good[2]), expected[2])


def test_onnx_bound_comes_from_the_input_standardisation(onnx_paths):
    s = OnnxStreamer(onnx_paths["pb2"], threads=1)
    np.testing.assert_allclose(s.input_center, [MEAN])
    np.testing.assert_allclose(s.input_half_width, [MAX_STD * STD])
    x = raw_blocks(1)[0]
    x[3, 0] = MEAN + 0.9 * MAX_STD * STD  # 1.8e6: beyond a fixed 1e6, inside 0.9e6 σ
    y = s.process(x)
    assert np.isfinite(y).all() and all(np.isfinite(v).all() for v in s.state.values())
    x[3, 0] = MEAN - 1.1 * MAX_STD * STD
    with pytest.raises(StreamInputError, match=r"input step 3 .*outside the accepted range"):
        s.process(x)
    # several streams: the message names the stream of the first bad step
    s2 = OnnxStreamer(onnx_paths["pb2"], batch=2)
    xb = np.stack(raw_blocks(2))
    xb[1, 9, 0] = 1e30
    with pytest.raises(StreamInputError, match=r"input step 9 \(stream 1\) of the chunk"):
        s2.process(xb)


def test_onnx_overflow_inside_the_model_is_refused_state_kept(onnx_paths):
    """Inputs within the bound that overflow float32 inside the model (liquid order 8:
    products of 8 samples) are refused by the output/state check; the state stays."""
    good = raw_blocks(2, seed=1)
    ref = OnnxStreamer(onnx_paths["pb8"], threads=1)
    expected = [ref.process(b) for b in good]
    s = OnnxStreamer(onnx_paths["pb8"], threads=1)
    s.process(good[0])
    before = snapshot(s.state)
    loud = good[1].copy()
    loud[10:30, 0] = MEAN + 0.9 * MAX_STD * STD  # in range, but its 8-fold products are not
    with pytest.raises(StreamInputError, match="non-finite"):
        s.process(loud)
    assert_same_state(s.state, before)
    np.testing.assert_array_equal(s.process(good[1]), expected[1])


def test_onnx_shape_errors_name_the_problem(onnx_paths):
    s = OnnxStreamer(onnx_paths["pb2"], threads=1)
    with pytest.raises(StreamInputError, match=r"1 input channel\(s\).*got 2"):
        s.process(np.zeros((5, 2), np.float32))
    with pytest.raises(StreamInputError, match=r"holds 3 stream\(s\).*state holds 1"):
        s.process(np.zeros((3, 5, 1), np.float32))
    assert s.process(np.zeros((0, 1), np.float32)).shape == (0, 3)  # T = 0: a no-op


# ------------------------------------------------------------ torch StreamingModel


@pytest.fixture(scope="module")
def torch_stream():
    m = small_model(2).double()
    return m, m.streaming(dtype=torch.float64)


def test_torch_refuses_bad_chunks_with_clear_errors(torch_stream):
    m, sm = torch_stream
    x = torch.randn(1, 60, 1, dtype=torch.float64)
    state0 = sm.init_state(1)
    _, state = sm(x[:, :20], state0)
    before = snapshot(state)
    nan = x[:, 20:40].clone()
    nan[0, 4, 0] = float("nan")
    huge = x[:, 20:40].clone()
    huge[0, 6, 0] = 1e20
    cases = [
        (nan, r"input step 4 of the chunk: sample value nan \(NaN or infinite"),
        (huge, r"input step 6 of the chunk: sample value 1e\+20 is outside the accepted range"),
        (x[:, 20:20], r"no time steps \(shape \(1, 0, 1\)\)"),
        (torch.zeros(1, 5, 2, dtype=torch.float64), r"1 input channel\(s\).*got 2"),
        (torch.zeros(2, 5, 1, dtype=torch.float64), r"holds 2 stream\(s\).*state holds 1"),
        (torch.zeros(5, 1, dtype=torch.float64), r"expected input of shape \(1, T, 1\)"),
        (torch.zeros(1, 5, 1, dtype=torch.float32), r"must be torch.float64"),
    ]
    for bad, message in cases:
        with pytest.raises(StreamInputError, match=message) as err:
            sm(bad, state)
        assert isinstance(err.value, ValueError) and "state left unchanged" in str(err.value)
        assert_same_state(state, before)
    with pytest.raises(StreamInputError, match=r"state does not belong to this model"):
        sm(x[:, 20:40], {k: v for k, v in state.items() if "decoder" not in k})
    # the stream continues as if nothing had been refused: still the exact forward
    y_a, _ = sm(x[:, :20], state0)
    y_b, _ = sm(x[:, 20:], state)
    ref = m.forward_steps(x)
    assert (torch.cat([y_a, y_b], 1) - ref).abs().max() <= 1e-9 * ref.abs().max()


def test_torch_overflow_is_refused_and_state_stays_finite():
    m = small_model(8)
    sm = m.streaming()
    x = torch.randn(1, 40, 1)
    _, state = sm(x[:, :10], sm.init_state(1))
    before = snapshot(state)
    loud = x[:, 10:].clone()
    loud[0, 5:25, 0] = 0.9 * MAX_STD  # within |x| <= 1e6; 8-fold products overflow
    with pytest.raises(StreamInputError, match="non-finite"):
        sm(loud, state)
    assert_same_state(state, before)
    y, state = sm(x[:, 10:], state)
    assert torch.isfinite(y).all() and all(torch.isfinite(v).all() for v in state.values())


def test_torch_and_onnx_refuse_the_same_chunk_the_same_way(onnx_paths):
    """One shared check: the same bad standardised chunk gets the same message."""
    sm = small_model(2).streaming()
    s = OnnxStreamer(onnx_paths["pb2"], threads=1)
    z = np.zeros((12, 1), np.float32)
    z[5, 0] = 2 * MAX_STD  # standardised units
    with pytest.raises(StreamInputError) as e_torch:
        sm(torch.from_numpy(z)[None], sm.init_state(1))
    with pytest.raises(StreamInputError) as e_onnx:
        s.process(MEAN + STD * z)
    assert e_torch.value.index == e_onnx.value.index == 5
    assert e_torch.value.reason.split(" is outside")[0] == "sample value 2e+06"
    assert e_onnx.value.reason.split(" is outside")[0] == "sample value 4e+06"


# -------------------------------------------------------------- keyword spotting


def write_float_wav(path, x: np.ndarray, rate: int):
    scipy.io.wavfile.write(path, rate, np.asarray(x, np.float32))  # IEEE float WAV
    return path


def spike_signal(rate: int = SR) -> np.ndarray:
    x = tone_signal(rate).astype(np.float32)
    x[int(round(SPIKE_S * rate))] = 1e30
    return x


def before_spike():
    return [e for e in EVENTS if e[0] < SPIKE_S]


@pytest.mark.slow
def test_kws_cli_spike_wav_one_line_error_keeps_earlier_detections(tone_model, tmp_path):
    wav = write_float_wav(tmp_path / "spike.wav", spike_signal(), SR)
    r = CliRunner().invoke(kws_cmd, [str(tone_model), "--input", str(wav), "--fast", "--no-ui"])
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output and isinstance(r.exception, SystemExit)
    dets = parse_detections(r.output, with_score=False)
    assert [d[1] for d in dets] == [e[2] for e in before_spike()], r.output
    for (t, _), (start, _, _) in zip(dets, before_spike(), strict=True):
        assert start <= t <= start + 0.25
    assert "stopped at a refused sample" in r.output
    errors = [ln for ln in r.output.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1, r.output
    assert errors[0].startswith(f"Error: {wav}: input refused at 5.500 s: sample value 1e+30")
    assert "outside the accepted range" in errors[0]


def test_kws_cli_spike_time_is_file_time_when_resampled(tone_model, tmp_path):
    wav = write_float_wav(tmp_path / "spike16k.wav", spike_signal(16000), 16000)
    r = CliRunner().invoke(kws_cmd, [str(tone_model), "--input", str(wav), "--fast", "--no-ui"])
    assert r.exit_code == 1, r.output
    m = re.search(r"input refused at ([0-9.]+) s", r.output)
    assert m and abs(float(m.group(1)) - SPIKE_S) <= 0.003, r.output
    assert "(after resampling to 8000 Hz)" in r.output
    heard = [d[1] for d in parse_detections(r.output, with_score=False)]
    assert heard == [e[2] for e in before_spike()]


def test_kws_eval_spike_wav_writes_partial_results(tone_model, tmp_path):
    wav = write_float_wav(tmp_path / "spike.wav", spike_signal(), SR)
    labels = write_labels_csv(tmp_path / "labels.csv")
    out = tmp_path / "eval.json"
    r = CliRunner().invoke(
        kws_eval_cmd,
        [str(tone_model), "--stream", str(wav), "--labels", str(labels), "--out", str(out)],
    )
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output and isinstance(r.exception, SystemExit)
    assert f"Error: {wav}: input refused at 5.500 s" in r.output
    res = json.loads(out.read_text())
    assert res["partial"] is True and res["duration_s"] == pytest.approx(SPIKE_S)
    assert res["error"].startswith(f"{wav}: input refused at 5.500 s")
    assert res["targets"] == len(before_spike()) and res["detection_rate"] == 1.0
    assert res["false_accepts"] == 0
    assert out.with_suffix(".png").stat().st_size > 10_000


def test_spotter_refuses_frame_keeps_state_and_continues(tone_model):
    x = spike_signal()
    frames = [x[i : i + 80] for i in range(0, len(x), 80)]
    bad = int(round(SPIKE_S * SR)) // 80
    sp = KeywordSpotter(tone_model, threads=1)
    ref = KeywordSpotter(tone_model, threads=1)
    got, want = [], []
    for k, f in enumerate(frames):
        if k == bad:
            before = snapshot(sp.streamer.state)
            n, scores = sp.time_s, dict(sp.scores)
            with pytest.raises(KwsInputError, match=r"input refused at 5\.500 s") as err:
                sp.predict(f)
            assert err.value.time_s == pytest.approx(SPIKE_S)
            assert_same_state(sp.streamer.state, before)
            assert sp.time_s == n and sp.scores == scores
            continue
        got += sp.detect(f)
        want += ref.detect(f)
    assert got == want and len(got) == len(EVENTS)  # later keywords still found
