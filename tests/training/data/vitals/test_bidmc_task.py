"""The ``bidmc`` task end to end: config presets, training through the CLI on simulated
WFDB records, evaluation (both split protocols, NeuroKit2 baseline, plots) and export of
the trained regressor to ONNX in physical units."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from liquid_stream.nn.checkpoint import (
    load_checkpoint,
    model_from_checkpoint,
    split_records,
)
from liquid_stream.training.cli import evaluate_cmd, train_cmd
from liquid_stream.training.config import load_config

TINY = [
    "--set",
    "model.d_model=8",
    "--set",
    "model.n_layers=1",
    "--set",
    "model.d_state=4",
    "--set",
    "optim.batch_size=8",
    "--set",
    "optim.eval_batch_size=32",
    "--set",
    "optim.epochs=1",
    "--set",
    "data.hop=500",
    "--set",
    "optim.warmup_steps=1",
]


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    from liquid_stream.training.data.vitals.bidmc_sim import write_bidmc_sim

    root = tmp_path_factory.mktemp("bidmc") / "sim"
    write_bidmc_sim(root, records=4, minutes=1.5, seed=3, progress=False)
    return root


def test_presets_follow_the_paper_per_target():
    for target, lr, order in (("hr", 0.005, 3), ("rr", 0.01, 2), ("spo2", 0.01, 4)):
        cfg = load_config("bidmc", "paper", [f"data.target={target}"])
        assert cfg["optim"]["lr"] == lr and cfg["model"]["liquid_order"] == order
        assert cfg["model"]["d_state"] == 256 and cfg["model"]["norm"] == "layer"
        assert cfg["model"]["decoder_window"] == cfg["data"]["window"] == 4000
    # a command-line override beats the preset's per-target value
    cfg = load_config("bidmc", "paper", ["data.target=rr", "optim.lr=0.02"])
    assert cfg["optim"]["lr"] == 0.02


def _train(tmp_path, records, name, *extra):
    out = tmp_path / name
    args = ["bidmc", "--preset", "cpu", "--data", str(records), "--out", str(out), *TINY, *extra]
    r = CliRunner().invoke(train_cmd, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return out, r.output


@pytest.mark.slow
def test_train_evaluate_export(tmp_path, records):
    out, text = _train(tmp_path, records, "hr", "--target", "hr", "--max-steps", "3")
    assert (out / "best.pt").is_file() and (out / "metrics.csv").is_file()
    test = json.loads((out / "test_metrics.json").read_text())
    assert np.isfinite(test["rmse"]) and test["rmse"] > 0
    ckpt = load_checkpoint(out / "best.pt")  # weights_only
    meta = ckpt["meta"]
    assert meta["target"] == "hr" and meta["units"] == "bpm"
    assert meta["channels"] == ["PLETH", "II"] and meta["sample_rate"] == 125
    # the output affine is the train targets' mean / std: an untrained-ish model already
    # answers in bpm, around the mean heart rate
    model, _ = model_from_checkpoint(ckpt)
    assert model.config["output_shift"] == pytest.approx(meta["target_mean"])
    assert 40 < meta["target_mean"] < 140
    # the held-out recordings it names are real WFDB records of the data, none trained on
    test_recs, val_recs = split_records(out / "best.pt"), split_records(out / "best.pt", "val")
    assert test_recs and all(r.with_suffix(".hea").is_file() for r in test_recs + val_recs)
    assert {r.parent for r in test_recs} == {records}
    assert not {r.name for r in test_recs} & set(meta["records"]["train"])
    assert not {r.name for r in test_recs} & {r.name for r in val_recs}

    # the shuffled protocol, then both in one evaluate table with the baseline
    out2, _ = _train(
        tmp_path,
        records,
        "hr-shuffled",
        "--target",
        "hr",
        "--max-steps",
        "2",
        "--set",
        "data.protocol=shuffled",
    )
    r = CliRunner().invoke(
        evaluate_cmd,
        [str(out / "best.pt"), str(out2 / "best.pt"), "--baseline", "--device", "cpu"],
        catch_exceptions=False,
    )
    assert r.exit_code == 0, r.output
    assert "record split" in r.output and "shuffled split" in r.output
    assert "NeuroKit2 baseline: RMSE" in r.output
    table = r.output.strip().splitlines()[-3:]
    assert table[0].split()[:3] == ["model", "target", "protocol"]
    assert {table[1].split()[2], table[2].split()[2]} == {"record", "shuffled"}
    assert (out / "agreement_hr_record_test.png").stat().st_size > 0

    # export: ONNX in physical units, same numbers as the torch model (docs/design.md §5)
    from liquid_stream.export.pipeline import export_model, verify_onnx
    from liquid_stream.runtime.onnx_streamer import OnnxStreamer

    info = export_model(model, tmp_path / "hr.onnx", chunk=125, meta=meta)
    report = verify_onnx(model, info["path"], length=3000, meta=meta)
    assert report.ok, str(report)
    s = OnnxStreamer(info["path"])
    assert s.task == "bidmc" and s.meta_json("channels") == ["PLETH", "II"]
    assert s.metadata["target"] == "hr" and s.metadata["units"] == "bpm"


def test_spo2_has_no_classical_baseline(tmp_path, records):
    out, _ = _train(tmp_path, records, "spo2", "--target", "spo2", "--max-steps", "1")
    r = CliRunner().invoke(
        evaluate_cmd,
        [str(out / "best.pt"), "--baseline", "--device", "cpu"],
        catch_exceptions=False,
    )
    assert r.exit_code == 0, r.output
    assert "baseline: n/a" in r.output


def test_training_reduces_the_loss(records):
    """A few optimiser steps on the same batch reduce the (standardised) MSE."""
    from liquid_stream.nn.model import LiquidS4Model, make_optimizer
    from liquid_stream.training.metrics import compute_loss
    from liquid_stream.training.tasks import build_bidmc

    cfg = load_config("bidmc", "cpu", ["data.target=hr", "data.hop=500", f"data.root={records}"])
    train, _, _, meta, kind = build_bidmc(cfg)
    x = torch.stack([train[i][0] for i in range(8)])
    y = torch.stack([train[i][1] for i in range(8)])
    torch.manual_seed(0)
    model = LiquidS4Model(
        2,
        1,
        d_model=8,
        n_layers=1,
        d_state=4,
        decoder="window",
        decoder_window=4000,
        norm="layer",
        output_shift=meta["target_mean"],
        output_scale=meta["target_std"],
    )
    opt = make_optimizer(model, lr=0.01, weight_decay=0.0)
    losses = []
    for _ in range(15):
        loss, _ = compute_loss(model(x), y, kind, model.output_scale)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]


def test_bad_target_is_a_clear_error(tmp_path, records):
    r = CliRunner().invoke(
        train_cmd,
        ["bidmc", "--target", "bp", "--data", str(records), "--out", str(tmp_path / "x"), *TINY],
    )
    assert r.exit_code != 0 and "data.target must be one of" in r.output


def test_spo2_presets_read_the_oximeter_through_the_log_front_end():
    for preset in ("ppg", "ppg+ecg"):
        cfg = load_config("bidmc", preset, ["data.target=spo2"])
        fe = cfg["model"]["frontend"]
        assert cfg["data"]["channels"] == ["IR", "RED"]
        assert fe["kind"] == "scalenorm" and fe["log"] and fe["shared_scale"]
        hr = load_config("bidmc", preset, ["data.target=hr"])
        assert "log" not in hr["model"]["frontend"] and "IR" not in hr["data"]["channels"]
    assert load_config("bidmc", "ecg", ["data.target=spo2"])["data"]["channels"] == ["II"]


@pytest.mark.slow
def test_spo2_from_the_oximeter_trains_exports_and_has_the_ratio_baseline(tmp_path):
    """`--preset ppg --target spo2` on randomised records (IR and RED channels): trains,
    evaluates next to the classical ratio of ratios on the same windows, and exports a graph
    that reads IR and RED; an ECG-only SpO2 model is refused with the channels named."""
    from liquid_stream.training.data.vitals.vitals_sim import write_vitals_sim

    root = tmp_path / "ox"
    write_vitals_sim(root, records=4, minutes=1.5, seed=4, progress=False)
    out = tmp_path / "spo2"
    args = [
        "bidmc",
        "--preset",
        "ppg",
        "--target",
        "spo2",
        "--data",
        str(root),
        "--out",
        str(out),
        *TINY,
        "--max-steps",
        "2",
    ]
    r = CliRunner().invoke(train_cmd, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(
        evaluate_cmd,
        [str(out / "best.pt"), "--baseline", "--device", "cpu"],
        catch_exceptions=False,
    )
    assert r.exit_code == 0, r.output
    assert "ratio of ratios baseline: RMSE" in r.output
    res = json.loads(next(out.glob("agreement_spo2_*_test.json")).read_text())
    assert res["baseline_n"] == res["n"] > 0  # an estimate for every window
    from liquid_stream.cli import main
    from liquid_stream.runtime.onnx_streamer import OnnxStreamer

    onnx = tmp_path / "spo2.onnx"
    r = CliRunner().invoke(
        main, ["export", str(out / "best.pt"), "--onnx", str(onnx), "--chunk", "125", "--verify"]
    )
    assert r.exit_code == 0, r.output
    s = OnnxStreamer(onnx)
    assert s.meta_json("channels") == ["IR", "RED"] and s.metadata["target"] == "spo2"
    r = CliRunner().invoke(
        train_cmd,
        [
            "bidmc",
            "--preset",
            "ecg",
            "--target",
            "spo2",
            "--data",
            str(root),
            "--out",
            str(tmp_path / "e"),
            *TINY,
            "--max-steps",
            "1",
        ],
    )
    assert r.exit_code != 0 and "needs the oximeter's IR and RED" in r.output


def _test_records(records, seed: int) -> list[str]:
    from liquid_stream.training.tasks import build_bidmc

    cfg = load_config(
        "bidmc",
        "cpu",
        ["data.target=hr", "data.hop=500", f"data.root={records}", f"train.seed={seed}"],
    )
    return build_bidmc(cfg)[3]["records"]["test"]


def test_split_seed_holds_out_the_same_records_for_every_training_seed(records):
    """``data.split_seed`` fixes the record split whatever ``train.seed`` is (so models of
    different seeds can be averaged on records none of them saw); null keeps the split of
    ``train.seed``, as before the option."""
    from liquid_stream.training.tasks import build_bidmc

    def split(*sets):
        cfg = load_config(
            "bidmc", "cpu", ["data.target=hr", "data.hop=500", f"data.root={records}", *sets]
        )
        return build_bidmc(cfg)[3]["records"]

    base = split("train.seed=0")
    other = next(s for s in range(1, 20) if split(f"train.seed={s}") != base)
    assert split(f"train.seed={other}", "data.split_seed=0") == base
    assert split("train.seed=0", f"data.split_seed={other}") == split(f"train.seed={other}")
    assert split(f"train.seed={other}", "data.split_seed=null") != base


@pytest.mark.slow
def test_evaluate_mean_scores_the_members_mean_estimate(tmp_path, records):
    """``evaluate A.pt B.pt --mean``: one row whose window RMSE is that of the mean of the
    two models' window estimates (computed here from each model alone); members that hold
    out other records, or no --out, are refused with a one-line error."""
    from liquid_stream.training.data.vitals.bidmc_baseline import agreement
    from liquid_stream.training.evaluate_vitals import predict_windows
    from liquid_stream.training.tasks import build_bidmc

    outs = [
        _train(
            tmp_path,
            records,
            f"s{s}",
            "--target",
            "hr",
            "--max-steps",
            "2",
            "--set",
            f"train.seed={s}",
            "--set",
            "data.split_seed=0",
        )[0]
        for s in (0, 1)
    ]
    ev = tmp_path / "mean"
    args = [str(o / "best.pt") for o in outs] + ["--mean", "--out", str(ev), "--device", "cpu"]
    r = CliRunner().invoke(evaluate_cmd, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    row = json.loads((ev / "agreement_hr_record_test.json").read_text())
    assert row["model"] == "mean of 2" and "stream" in row
    preds = []
    for o in outs:
        model, meta = model_from_checkpoint(o / "best.pt")
        cfg = load_checkpoint(o / "best.pt")["config"]
        test = build_bidmc(cfg)[2]
        pred, y = predict_windows(model, test, torch.device("cpu"))
        preds.append(pred)
    assert np.abs(preds[0] - preds[1]).max() > 0.1  # two different models
    want = agreement((preds[0] + preds[1]) / 2, y)
    assert abs(row["rmse"] - want["rmse"]) <= 1e-6 * want["rmse"] and row["n"] == want["n"]
    for solo in agreement(preds[0], y)["rmse"], agreement(preds[1], y)["rmse"]:
        assert abs(row["rmse"] - solo) > 1e-6  # not one member's score
    # --weights 1,3: the weighted mean 0.25 f0 + 0.75 f1, as `export --weights` computes it
    r = CliRunner().invoke(
        evaluate_cmd,
        [*args[:2], "--mean", "--weights", "1,3", "--out", str(tmp_path / "w"), "--device", "cpu"],
    )
    assert r.exit_code == 0, r.output
    row = json.loads((tmp_path / "w" / "agreement_hr_record_test.json").read_text())
    want = agreement(0.25 * preds[0] + 0.75 * preds[1], y)
    assert row["model"] == "weighted mean of 2"
    assert abs(row["rmse"] - want["rmse"]) <= 1e-6 * want["rmse"]
    for bad, msg in [
        (["--weights", "1,3"], "--weights weigh the members of --mean"),
        (
            ["--mean", "--weights", "1,2,3", "--out", str(tmp_path / "x")],
            "3 ensemble weights for 2 members",
        ),
    ]:
        r = CliRunner().invoke(evaluate_cmd, [*args[:2], *bad])
        assert r.exit_code != 0 and msg in r.output, r.output
    # a member with its own split (train.seed 3, no split_seed), and --mean without --out
    seed = next(s for s in range(2, 40) if _test_records(records, s) != _test_records(records, 0))
    other = _train(
        tmp_path,
        records,
        "other",
        "--target",
        "hr",
        "--max-steps",
        "1",
        "--set",
        f"train.seed={seed}",
    )[0]
    assert split_records(other / "best.pt") != split_records(outs[0] / "best.pt")
    r = CliRunner().invoke(
        evaluate_cmd,
        [str(outs[0] / "best.pt"), str(other / "best.pt"), "--mean", "--out", str(tmp_path / "x")],
    )
    assert r.exit_code != 0 and "holds out other test records" in r.output
    r = CliRunner().invoke(evaluate_cmd, [str(o / "best.pt") for o in outs] + ["--mean"])
    assert r.exit_code != 0 and "--mean needs two or more checkpoints and --out" in r.output


def test_mean_of_members_with_different_hops_is_taken_per_sample():
    """Members pooling by 5 and by 10 samples: ``MeanOf`` averages what each one's graph
    emits per input sample (the last frame it completed), so its last row is the mean of
    the members' last frames and row t is the ensemble graph's output at sample t."""
    from liquid_stream.nn.model import LiquidS4Model
    from liquid_stream.training.evaluate_vitals import MeanOf

    torch.manual_seed(0)
    members = [
        LiquidS4Model(
            d_input=2,
            d_output=1,
            d_model=8,
            n_layers=1,
            d_state=4,
            mode="diag",
            decoder="window",
            decoder_window=20,
            frontend={"kind": "scalenorm", "tau_s": 8.0, "hop": h},
        ).eval()
        for h in (5, 10)
    ]
    x = torch.randn(2, 400, 2)  # (B, L, d)
    with torch.no_grad():
        y = MeanOf(members)(x)
        steps = [m.forward_steps(x) for m in members]  # (B, L, 1) each
        frames = [m(x) for m in members]  # (B, 80, 1), (B, 40, 1)
    assert y.shape == (2, 400, 1) and torch.equal(y, (steps[0] + steps[1]) / 2)
    assert torch.allclose(y[:, -1], (frames[0][:, -1] + frames[1][:, -1]) / 2)
    t = 123  # the member with hop 10 holds its frame 11 (samples 110-119) at sample 123
    assert torch.equal(steps[1][:, t], frames[1][:, (t + 1) // 10 - 1])
    same = MeanOf([members[0], members[0]])
    with torch.no_grad():
        assert torch.equal(same(x), frames[0])  # equal hops: per frame, as before
