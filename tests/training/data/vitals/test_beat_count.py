"""The per-beat target of HR training (``data.beats``, training/data/vitals/bidmc_crops.py): the
simulator's beat times on disk, the beat density whose window mean is the counted rate,
the model's per-frame readout whose causal window mean is its window output, the
``mse_beats`` loss against a brute-force sum, and a tiny ECG-only run that trains with it
and exports a plain vital-sign graph."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from fixtures_vitals import tiny_model

from liquid_stream.training.data.vitals.bidmc_crops import (
    BEAT_SHIFT_S,
    BidmcDataError,
    beat_density,
    load_wfdb_crops,
    read_beats,
)
from liquid_stream.training.data.vitals.vitals_sim import simulate_randomised, write_vitals_sim
from liquid_stream.training.metrics import compute_loss

FS = 125


@pytest.fixture(scope="module")
def rich(tmp_path_factory):
    """Four 1.5-min ectopy-rich randomised records, with their beat times."""
    root = tmp_path_factory.mktemp("rich")
    write_vitals_sim(root, records=4, minutes=1.5, seed=3, progress=False, ectopy="rich")
    return root


def test_the_simulator_writes_each_records_beat_times(rich):
    """``bidmcN.beats.npy`` holds the R-peak times the record was drawn with (the same draw
    again), strictly increasing."""
    rng = np.random.default_rng([3, 0])
    again = simulate_randomised(rng, 1.5, family="nk2", ectopy="rich")["params"]["beats"]
    beats = read_beats(rich, "bidmc01")
    np.testing.assert_array_equal(beats, again)
    assert (np.diff(beats) > 0).all()


def test_beat_density_counts_beats_in_any_window():
    """Each bump has area 60 bpm·s, so the density's mean over a window that holds k whole
    bumps is 60 k / window (the counted rate), wherever the beats fall; the bump follows its
    beat by BEAT_SHIFT_S."""
    rng = np.random.default_rng(0)
    beats = np.cumsum(rng.uniform(0.3, 1.4, 200))  # irregular, couplet-close intervals
    n = int((beats[-1] + 5) * FS)
    b = beat_density(beats, n, FS)
    assert abs(np.argmax(b[: int(beats[0] * FS) + 60]) / FS - (beats[0] + BEAT_SHIFT_S)) < 1 / FS
    for lo, hi in [(10.0, 42.0), (33.3, 41.9), (50.0, 130.0)]:
        inside = ((beats + BEAT_SHIFT_S > lo + 0.5) & (beats + BEAT_SHIFT_S < hi - 0.5)).sum()
        edge = ((beats + BEAT_SHIFT_S > lo - 0.5) & (beats + BEAT_SHIFT_S < lo + 0.5)).sum()
        edge += ((beats + BEAT_SHIFT_S > hi - 0.5) & (beats + BEAT_SHIFT_S < hi + 0.5)).sum()
        seg = b[int(lo * FS) : int(hi * FS)]
        got = seg.mean() * (len(seg) / FS) / 60  # beats counted in the window
        assert inside - 1e-4 <= got <= inside + edge + 1e-4  # (a sampled Gaussian's area)


def test_crops_carry_the_density_and_refuse_records_without_beat_times(rich, tmp_path):
    sig_crop = 60 * FS
    c = load_wfdb_crops(rich, "hr", ["bidmc01"], ["II"], sig_crop, 20 * FS, 32 * FS, FS, beats=True)
    assert c.y.shape == (len(c), sig_crop, 2)
    plain = load_wfdb_crops(rich, "hr", ["bidmc01"], ["II"], sig_crop, 20 * FS, 32 * FS, FS)
    np.testing.assert_array_equal(c.y[..., 0], plain.y)  # the labels are unchanged
    from liquid_stream.training.data.vitals.bidmc import read_record

    n = read_record(rich, "bidmc01", ["II"], FS)[0].shape[0]
    dens = beat_density(read_beats(rich, "bidmc01"), n, FS)
    for k, s in enumerate(c.start):
        np.testing.assert_allclose(c.y[k, :, 1], dens[s : s + sig_crop], rtol=1e-6)
    late = load_wfdb_crops(
        rich, "hr", ["bidmc01"], ["II"], sig_crop, 20 * FS, 32 * FS, FS, beats=True, beat_shift=0.7
    )  # a PPG's bumps (data.beats_shift_s)
    dens = beat_density(read_beats(rich, "bidmc01"), n, FS, shift=0.7)
    np.testing.assert_allclose(
        late.y[0, :, 1], dens[late.start[0] : late.start[0] + sig_crop], rtol=1e-6
    )
    (tmp_path / "r").mkdir()
    for f in rich.iterdir():
        if not f.name.endswith(".beats.npy"):
            (tmp_path / "r" / f.name).write_bytes(f.read_bytes())
    with pytest.raises(BidmcDataError, match=r"bidmc01: no beat times \(bidmc01.beats.npy\)"):
        load_wfdb_crops(
            tmp_path / "r", "hr", ["bidmc01"], ["II"], sig_crop, 20 * FS, 32 * FS, FS, beats=True
        )


def test_readout_window_mean_is_the_window_output_in_float64():
    """``window_and_readout``: column 0 is ``forward``'s output, and it is the causal mean of
    column 1 over the last W frames (fewer at the start), summed by brute force."""
    torch.manual_seed(0)
    m = tiny_model(d_input=1, window=7).double()
    x = torch.randn(2, 40, 1, dtype=torch.float64)
    both = m(x, readout=True)
    torch.testing.assert_close(both[..., :1], m(x), rtol=1e-12, atol=1e-12)
    p = both[..., 1]
    for t in range(40):
        lo = max(0, t - 6)
        torch.testing.assert_close(both[:, t, 0], p[:, lo : t + 1].mean(1), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="needs the window decoder"):
        tiny_model(d_input=1, decoder="last")(x.float(), readout=True)


def test_mse_beats_is_the_label_loss_plus_the_weighted_frame_loss_and_trains_every_parameter():
    torch.manual_seed(1)
    m = tiny_model(d_input=1, window=5, frontend={"kind": "scalenorm", "hop": 4})
    x = torch.randn(3, 48, 1)
    out = m(x, readout=True)  # (3, 12, 2)
    y = torch.full((3, 48, 2), float("nan"))
    y[:, 23::8, 0] = torch.randn(3, 4) * 3 + 80
    y[..., 1] = torch.rand(3, 48) * 200
    scale = torch.tensor([7.0])
    loss, sums = compute_loss(out, y, "mse_beats", scale, beat_weight=0.3)
    # brute force
    lab = y[:, 3::4, 0]
    ok = torch.isfinite(lab)
    want = ((out[..., 0][ok] - lab[ok]) / 7).pow(2).mean()
    frame = y[..., 1].reshape(3, 12, 4).mean(-1)
    want = want + 0.3 * ((out[..., 1] - frame) / 7).pow(2).mean()
    torch.testing.assert_close(loss, want)
    assert sums["count"] == int(ok.sum())
    # beat_box 3: both sides as causal means over the last 3 frames (zeros before the start)
    loss3, _ = compute_loss(out, y, "mse_beats", scale, beat_weight=0.3, beat_box=3)

    def box(v):
        return torch.stack([v[:, max(0, t - 2) : t + 1].sum(1) / 3 for t in range(12)], 1)

    want3 = want - 0.3 * ((out[..., 1] - frame) / 7).pow(2).mean()
    want3 = want3 + 0.3 * ((box(out[..., 1]) - box(frame)) / 7).pow(2).mean()
    torch.testing.assert_close(loss3, want3)
    m.train()
    loss, _ = compute_loss(m(x, readout=True), y, "mse_beats", scale, beat_weight=0.3)
    loss.backward()

    def dead(p) -> bool:
        return p.grad is None or not torch.isfinite(p.grad).all() or p.grad.abs().sum() == 0

    missing = [n for n, p in m.named_parameters() if p.requires_grad and dead(p)]
    assert not missing, missing


def test_an_ecg_only_run_with_beats_trains_and_exports_a_plain_vital_sign_graph(rich, tmp_path):
    from liquid_stream.cli import main
    from liquid_stream.runtime.onnx_streamer import OnnxStreamer
    from liquid_stream.training.cli import train_cmd

    out = tmp_path / "b"
    tiny = [
        "--set",
        "model.d_model=8",
        "--set",
        "model.n_layers=1",
        "--set",
        "model.d_state=4",
        "--set",
        "optim.batch_size=4",
        "--set",
        "optim.epochs=1",
        "--set",
        "data.hop=500",
        "--set",
        "data.crop_s=64",
        "--set",
        "data.crop_hop_s=8",
        "--set",
        "data.beats=0.5",
        "--set",
        "optim.warmup_steps=1",
        "--set",
        "data.split_seed=0",
    ]
    r = CliRunner().invoke(
        train_cmd,
        [
            "bidmc",
            "--preset",
            "ecg",
            "--target",
            "hr",
            "--data",
            str(rich),
            "--out",
            str(out),
            *tiny,
            "--max-steps",
            "2",
        ],
        catch_exceptions=False,
    )
    assert r.exit_code == 0, r.output
    onnx = tmp_path / "b.onnx"
    r = CliRunner().invoke(
        main, ["export", str(out / "last.pt"), "--onnx", str(onnx), "--chunk", "125", "--verify"]
    )
    assert r.exit_code == 0, r.output
    s = OnnxStreamer(onnx)
    assert s.meta_json("channels") == ["II"] and s.d_output == 1
    assert json.loads(s.metadata["beats"])["weight"] == 0.5
    r = CliRunner().invoke(
        train_cmd,
        [
            "bidmc",
            "--preset",
            "ecg",
            "--target",
            "rr",
            "--data",
            str(rich),
            "--out",
            str(tmp_path / "rr"),
            *tiny,
            "--max-steps",
            "1",
        ],
    )
    assert r.exit_code != 0 and "data.beats (a per-beat target) needs data.target hr" in r.output
