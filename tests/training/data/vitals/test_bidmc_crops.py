"""Training and scoring a vital-sign model as a stream (training/data/vitals/bidmc_crops.py): the
per-second labels of a long crop are exactly the window labels of the windows ending there,
the per-step loss scores only those steps at the frame that answers for them, a crop run
trains end to end, and `evaluate` reports the streamed score of whole records. Real WFDB
files (tests/fixtures_vitals.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fixtures_vitals import write_record

from liquid_stream.training.config import load_config
from liquid_stream.training.data.vitals.bidmc import load_wfdb_windows
from liquid_stream.training.data.vitals.bidmc_crops import (
    OFF_SECONDS,
    CropDataset,
    crop_targets,
    load_wfdb_crops,
)
from liquid_stream.training.metrics import TargetBalance, compute_loss
from liquid_stream.training.run import train
from liquid_stream.training.trainer import Trainer

FS, W = 125, 4000


def test_crop_labels_are_the_window_labels_of_the_windows_ending_there(tmp_path):
    write_record(tmp_path, "bidmc01", seconds=150, numerics_nan_seconds=[70, 71, 72], seed=3)
    crops = load_wfdb_crops(
        tmp_path, "hr", ["bidmc01"], ["PLETH"], crop=80 * FS, hop=25 * FS, window=W, sample_rate=FS
    )
    assert len(crops) == 3 and crops.start.tolist() == [0, 25 * FS, 50 * FS]
    wins = load_wfdb_windows(tmp_path, "hr", ["PLETH"], W, hop=5, sample_rate=FS)
    by_start = dict(zip(wins.start.tolist(), wins.y.tolist(), strict=True))
    for x, y, s in zip(crops.x, crops.y, crops.start, strict=True):
        np.testing.assert_array_equal(x[:W], wins.x[wins.start.tolist().index(int(s))])
        at = np.flatnonzero(np.isfinite(y))
        assert len(at) > 0 and (at >= W - 1).all() and ((s + at + 1) % FS == 0).all()
        for p in at:  # the window [s + p + 1 - W, s + p + 1)
            assert y[p] == pytest.approx(by_start[int(s + p + 1 - W)], abs=1e-4)
        # every second end with a full window behind it has its label (none missing)
        ends = [p for p in range(W - 1, len(y)) if (s + p + 1) % FS == 0]
        want = [p for p in ends if int(s + p + 1 - W) in by_start]
        assert at.tolist() == want
    # the labels of one crop depend on its start only through the record's numerics
    v = np.arange(200.0)
    lab = crop_targets(v, 3 * FS, 40 * FS, W, FS, 0.5)
    assert np.flatnonzero(np.isfinite(lab)).tolist() == [W - 1 + k * FS for k in range(9)]
    assert lab[W - 1] == pytest.approx(np.mean(v[3:35]))


def test_crops_with_a_nan_sample_are_skipped(tmp_path):
    write_record(tmp_path, "bidmc02", seconds=120, nan_spans=[("PLETH", 10, 2.0)])
    crops = load_wfdb_crops(
        tmp_path, "hr", ["bidmc02"], ["PLETH"], crop=40 * FS, hop=20 * FS, window=W, sample_rate=FS
    )
    assert crops.start.tolist() == [20 * FS, 40 * FS, 60 * FS, 80 * FS]  # [0, 40) holds the gap


def test_channel_off_holds_one_channel_flat_over_a_stretch_per_seed_and_epoch(tmp_path):
    write_record(tmp_path, "bidmc03", seconds=150, seed=5)
    crops = load_wfdb_crops(
        tmp_path,
        "hr",
        ["bidmc03"],
        ["PLETH", "II"],
        crop=100 * FS,
        hop=25 * FS,
        window=W,
        sample_rate=FS,
    )
    mean, std = [0.5, -0.2], [2.0, 0.5]
    plain = CropDataset(crops, mean, std)
    ds = CropDataset(crops, mean, std, channel_off=1.0, seed=7, sample_rate=FS)
    seen = set()
    for epoch in range(6):
        ds.set_epoch(epoch)
        for i in range(len(crops)):
            x, y = ds[i]
            ref, y_ref = plain[i]
            torch.testing.assert_close(y, y_ref, equal_nan=True)  # labels unchanged
            assert torch.equal(x, ds[i][0])  # a function of (seed, epoch, index)
            changed = (x != ref).any(dim=0).tolist()
            assert sum(changed) == 1  # exactly one channel is touched
            c = changed.index(True)
            seen.add(c)
            diff = torch.nonzero(x[:, c] != ref[:, c]).flatten()
            run = x[diff[0] : diff[-1] + 1, c]
            assert (run == run[0]).all()  # held at one constant over one stretch
            assert diff[-1] - diff[0] + 1 <= OFF_SECONDS[1] * FS
            assert torch.equal(x[:, 1 - c], ref[:, 1 - c])  # the other channel intact
    assert seen == {0, 1}
    ds.set_epoch(0)
    a = ds[0][0]
    ds.set_epoch(1)
    assert not torch.equal(a, ds[0][0])  # a new stretch every epoch
    one = load_wfdb_crops(
        tmp_path, "hr", ["bidmc03"], ["PLETH"], crop=100 * FS, hop=25 * FS, window=W, sample_rate=FS
    )
    single = CropDataset(one, [0.0], [1.0], channel_off=1.0, sample_rate=FS)
    torch.testing.assert_close(single[0][0], CropDataset(one, [0.0], [1.0])[0][0])  # C = 1


def test_mse_per_step_scores_the_labelled_steps_at_their_frames():
    y = torch.full((2, 20), float("nan"))
    y[0, 9], y[1, 4], y[1, 19] = 1.0, 2.0, 4.0  # labels at frame ends of a 5x pooled output
    out = torch.zeros(2, 4, 1)
    out[0, 1, 0], out[1, 0, 0], out[1, 3, 0] = 3.0, 2.0, 0.0
    out[0, 0, 0] = 100.0  # an unlabelled frame: must not count
    loss, sums = compute_loss(out, y, "mse_per_step", torch.tensor([2.0]))
    d = torch.tensor([2.0, 0.0, -4.0])
    assert loss.item() == pytest.approx(((d / 2) ** 2).mean().item())
    assert sums["count"] == 3 and sums["se"] == pytest.approx(20.0)
    with pytest.raises(ValueError, match="targets of 21 steps for 4 outputs"):
        compute_loss(out, torch.zeros(2, 21), "mse_per_step")


def test_a_crop_run_trains_and_evaluate_scores_the_stream(tmp_path):
    """With the train crops' augmentations on (``pulse_eq``, ``channel_off``): evaluate
    scores windows and whole records, which they do not touch (it refused such a run)."""
    for i in range(1, 7):
        write_record(tmp_path / "rec", f"bidmc{i:02d}", seconds=100, seed=i)
    cfg = load_config(
        "bidmc",
        "ppg",
        [
            f"data.root={tmp_path / 'rec'}",
            "data.crop_s=64",
            "data.crop_hop_s=18",
            "data.pulse_eq=0.5",
            "data.channel_off=0.3",
            "optim.batch_size=2",
            "train.max_steps=2",
            "train.threads=1",
            "train.progress=false",
            "model.d_model=8",
            "model.n_layers=1",
        ],
    )
    summary = train(cfg, tmp_path / "run")
    assert np.isfinite(summary["val_rmse"]) and np.isfinite(summary["test"]["rmse"])
    from click.testing import CliRunner

    from liquid_stream.training.cli import evaluate_cmd

    r = CliRunner().invoke(
        evaluate_cmd,
        [str(tmp_path / "run" / "best.pt"), "--device", "cpu", "--out", str(tmp_path / "ev")],
    )
    assert r.exit_code == 0, r.output
    assert "streamed over the whole test records" in r.output


def test_target_balance_weighs_rare_targets_more_and_keeps_the_mean():
    """w(y) = (p(y)/p̄)^(−α) on 1-unit bins of a smoothed density: mean 1 over the training
    targets, larger where targets are rare, all ones at α = 0; the per-step loss is the
    weighted mean of the squared errors, the RMSE sums stay unweighted."""
    rng = np.random.default_rng(0)
    y = np.concatenate([rng.uniform(8, 35, 5000), rng.uniform(6, 8, 100), [np.nan]])
    tb = TargetBalance.from_targets(y, 0.5)
    w = tb(torch.from_numpy(y[np.isfinite(y)]).float()).double()
    assert w.mean().item() == pytest.approx(1.0, rel=1e-5)
    assert tb(torch.tensor([6.5])).item() > 1.5 * tb(torch.tensor([20.0])).item()
    assert tb(torch.tensor([-100.0, 1e6])).tolist() == [tb.table[0].item(), tb.table[-1].item()]
    flat = TargetBalance.from_targets(y, 0.0)
    assert torch.allclose(flat.table, torch.ones_like(flat.table))
    target = torch.full((1, 4), float("nan"))
    target[0, 1], target[0, 3] = 6.5, 20.0
    out = torch.zeros(1, 4, 1)
    out[0, 1, 0], out[0, 3, 0] = 8.5, 17.0
    loss, sums = compute_loss(out, target, "mse_per_step", None, None, tb)
    want = (tb(torch.tensor([6.5])) * 4.0 + tb(torch.tensor([20.0])) * 9.0).item() / 2
    assert loss.item() == pytest.approx(want, rel=1e-6)
    assert sums["se"] == pytest.approx(13.0)
    narrow = TargetBalance.from_targets(np.array([97.2, 98.5, 98.5, 98.5]), 0.5)  # 2 bins
    assert narrow.table.shape == (2,)
    assert narrow(torch.tensor([97.5])) > narrow(torch.tensor([98.0]))
    with pytest.raises(ValueError, match="no finite target"):
        TargetBalance.from_targets(np.array([np.nan]), 0.5)


def test_target_balance_trains_a_crop_run_and_refuses_what_it_cannot_weigh(tmp_path):
    for i in range(1, 5):
        write_record(tmp_path / "rec", f"bidmc{i:02d}", seconds=100, seed=i)
    over = [
        f"data.root={tmp_path / 'rec'}",
        "data.crop_s=64",
        "data.crop_hop_s=18",
        "optim.batch_size=2",
        "train.max_steps=2",
        "train.threads=1",
        "train.progress=false",
        "model.d_model=8",
        "model.n_layers=1",
    ]
    summary = train(
        load_config("bidmc", "ppg", over + ["optim.target_balance=0.5"]), tmp_path / "run"
    )
    assert np.isfinite(summary["val_rmse"])
    with pytest.raises(ValueError, match="optim.target_balance"):
        load_config("bidmc", "ppg", over + ["optim.target_balance=2"])
    with pytest.raises(ValueError, match="weighs a regression loss"):
        Trainer._target_balance(0.5, "ce_per_step", None)


def test_extra_train_records_join_the_train_split_only(tmp_path):
    """``data.extra_train``: every record of another folder is added to the train crops
    (named ``1:bidmcN``), after data.root's own train crops, which are unchanged, as are the
    val / test splits; the output affine is fitted on both folders' train windows; evaluate
    scores such a run on data.root's test records."""
    for i in range(1, 7):
        write_record(tmp_path / "rec", f"bidmc{i:02d}", seconds=100, seed=i)
    for i in range(1, 3):
        write_record(tmp_path / "edge", f"bidmc{i:02d}", seconds=100, seed=10 + i)
    over = [
        f"data.root={tmp_path / 'rec'}",
        "data.crop_s=64",
        "data.crop_hop_s=18",
        "optim.batch_size=2",
        "train.max_steps=1",
        "train.threads=1",
        "train.progress=false",
        "model.d_model=8",
        "model.n_layers=1",
    ]
    from liquid_stream.training.tasks import build_bidmc

    cfg0 = load_config("bidmc", "ppg", over)
    cfg1 = load_config("bidmc", "ppg", over + [f"data.extra_train=[{tmp_path / 'edge'}]"])
    tr0, va0, te0, m0, _ = build_bidmc(cfg0)
    tr1, va1, te1, m1, _ = build_bidmc(cfg1)
    assert m1["records"]["val"] == m0["records"]["val"]
    assert m1["records"]["test"] == m0["records"]["test"]
    assert m1["records"]["train"] == sorted(m0["records"]["train"] + ["1:bidmc01", "1:bidmc02"])
    assert m1["extra_train"] == {str(tmp_path / "edge"): 2}
    n0 = len(tr0)
    np.testing.assert_array_equal(tr1.windows.x[:n0], tr0.windows.x)
    d = cfg0["data"]
    edge = load_wfdb_crops(
        tmp_path / "edge",
        "hr",
        ["bidmc01", "bidmc02"],
        ["PLETH"],
        64 * FS,
        18 * FS,
        d["window"],
        FS,
    )
    assert len(edge) > 0 and len(tr1) == n0 + len(edge)
    np.testing.assert_array_equal(tr1.windows.x[n0:], edge.x)
    np.testing.assert_array_equal(tr1.windows.y[n0:], edge.y, strict=True)
    assert set(tr1.windows.record[n0:]) == {"1:bidmc01", "1:bidmc02"}
    np.testing.assert_array_equal(va1.windows.x, va0.windows.x)
    np.testing.assert_array_equal(te1.windows.x, te0.windows.x)
    ys = [
        load_wfdb_windows(
            tmp_path / "rec", "hr", ["PLETH"], d["window"], d["hop"], records=m0["records"]["train"]
        ).y,
        load_wfdb_windows(tmp_path / "edge", "hr", ["PLETH"], d["window"], d["hop"]).y,
    ]
    assert m1["target_mean"] == pytest.approx(float(np.concatenate(ys).mean()), rel=1e-6)
    assert m1["target_mean"] != pytest.approx(m0["target_mean"], rel=1e-6)
    # without crops the extra windows join the train windows the same way
    w0, *_ = build_bidmc(load_config("bidmc", "ppg", over[:1] + ["data.crop_s=null"]))
    w1, *_ = build_bidmc(
        load_config(
            "bidmc",
            "ppg",
            over[:1] + ["data.crop_s=null", f"data.extra_train=[{tmp_path / 'edge'}]"],
        )
    )
    assert len(w1) == len(w0) + len(ys[1])
    summary = train(cfg1, tmp_path / "run")
    assert np.isfinite(summary["test"]["rmse"])
    from click.testing import CliRunner

    from liquid_stream.training.cli import evaluate_cmd

    r = CliRunner().invoke(
        evaluate_cmd,
        [str(tmp_path / "run" / "best.pt"), "--device", "cpu", "--out", str(tmp_path / "ev")],
    )
    assert r.exit_code == 0, r.output


def test_a_crop_run_of_a_self_normalising_model_holds_no_window_samples(tmp_path):
    """A crop run whose model normalises its own input (the ``scalenorm`` front end) reads
    the windows as an index only: the same crops, targets and output affine as with every
    window's samples in memory."""
    for i in range(1, 7):
        write_record(tmp_path / "rec", f"bidmc{i:02d}", seconds=100, seed=i)
    cfg = load_config(
        "bidmc",
        "ppg",
        [
            f"data.root={tmp_path / 'rec'}",
            "data.crop_s=64",
            "data.crop_hop_s=18",
            "model.frontend.kind=scalenorm",
            "model.d_model=8",
            "model.n_layers=1",
        ],
    )
    from liquid_stream.training.tasks import bidmc_split_seed, bidmc_windows, build_bidmc

    full = bidmc_windows(cfg["data"], bidmc_split_seed(cfg))
    index = bidmc_windows(cfg["data"], bidmc_split_seed(cfg), signals=False)
    assert full[2].x.shape[1] == cfg["data"]["window"] and index[2].x.shape[1] == 0
    a, b = build_bidmc(cfg, windows=full), build_bidmc(cfg)
    for sa, sb in zip(a[:3], b[:3], strict=True):
        np.testing.assert_array_equal(sa.windows.x, sb.windows.x)
        np.testing.assert_array_equal(sa.windows.y, sb.windows.y)
    assert a[3] == b[3] and len(a[0]) > 0
