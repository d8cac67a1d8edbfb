"""The `speech-stream` task: SpeechStream crops with per-step labels, a causal window
decoder, trained through the CLI and exported to ONNX (on the TTS-free tiny fixture)."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner
from fixtures_speech import FIXTURE_WORDS, tiny_root

from liquid_stream.nn.checkpoint import load_checkpoint, model_from_checkpoint
from liquid_stream.training.cli import evaluate_cmd, train_cmd
from liquid_stream.training.config import load_config
from liquid_stream.training.data.speech.speech import SC10_WORDS
from liquid_stream.training.tasks import TASKS, build_task

SMALL = [
    "data.subset=sc10",
    "data.length=6000",
    "data.n_train=8",
    "data.n_val=4",
    "data.n_test=4",
    "model.d_model=8",
    "model.n_layers=1",
    "model.decoder_window=800",
    "optim.batch_size=4",
    "train.progress=false",
]


def test_config_presets():
    from liquid_stream.nn.frontend import LogMelConfig

    for name in ("cpu", "ship"):  # the log-mel recipe: stack at 100 frames/s, augmentation
        cpu = load_config("speech-stream", name)
        m = cpu["model"]
        assert m["decoder"] == "window" and m["bidirectional"] is False
        assert m["frontend"]["kind"] == "logmel"
        hop = LogMelConfig.from_dict(m["frontend"]).hop
        assert 0.2 <= m["decoder_window"] * hop / 16000 <= 0.5  # 0.2-0.5 s of audio
        assert cpu["data"]["length"] >= 32000 and cpu["data"]["clip_end"] == "speech"  # >= 2 s
        assert cpu["data"]["augment"] is not None and cpu["data"]["subset"] == "sc10"
        assert m["d_model"] == 128 and cpu["train"]["device"] == "cpu"
    paper = load_config("speech-stream", "paper")
    assert "frontend" not in paper["model"]  # the paper's setting: raw samples
    m = paper["model"]
    assert (m["n_layers"], m["d_model"], m["d_state"], m["liquid"], m["liquid_order"]) == (
        6,
        128,
        7,
        "pb",
        2,
    )
    assert m["decoder"] == "window" and m["bidirectional"] is False


def test_builder_shapes_labels_and_fixed_eval_sets(tmp_path):
    root = tiny_root(tmp_path / "sc", words=FIXTURE_WORDS)  # sc10 + two non-keywords
    cfg = load_config("speech-stream", "paper", [f"data.root={root}", *SMALL])
    train, val, test, meta, loss = build_task(cfg)
    assert loss == "ce_per_step"
    assert meta["labels"] == [*SC10_WORDS, "_silence_"] and meta["d_output"] == 11
    assert meta["silence_class"] == 10 and meta["task"] == "speech-stream"
    assert meta["input_std"][0] > 0 and meta["sample_rate"] == 16000
    assert (len(train), len(val), len(test)) == (8, 4, 4)
    seen = set()
    for ds in (train, val, test):
        for i in range(len(ds)):
            x, y = ds[i]
            assert x.shape == (6000, 1) and x.dtype == torch.float32
            assert y.shape == (6000,) and y.dtype == torch.int64
            assert int(y.min()) >= 0 and int(y.max()) < 11
            seen |= set(y.unique().tolist())
    assert 10 in seen and seen - {10}  # silence and at least one keyword span
    for ds in (val, test):  # deterministic: the same crop on every read
        assert torch.equal(ds[1][0], ds[1][0]) and torch.equal(ds[1][1], ds[1][1])
    again = build_task(cfg)
    assert torch.equal(again[1][0][0], val[0][0]) and torch.equal(again[2][3][1], test[3][1])
    # 8 kHz evaluation sets (x and y taken [::2]), same normaliser
    stats = (meta["input_mean"], meta["input_std"])
    _, val8, _, meta8, _ = TASKS["speech-stream"](cfg, stats=stats, rate=2)
    x8, y8 = val8[0]
    assert x8.shape == (3000, 1) and torch.equal(y8, val[0][1][::2])
    assert meta8["input_mean"] == meta["input_mean"]


LOGMEL_SMALL = [
    *SMALL[:5],
    "model.d_model=8",
    "model.n_layers=1",
    "model.decoder_window=5",
    "optim.batch_size=4",
    "train.progress=false",
]


def test_logmel_builder_frame_labels_raw_input_and_augmentation(tmp_path):
    root = tiny_root(tmp_path / "sc", words=FIXTURE_WORDS)
    cfg = load_config("speech-stream", "cpu", [f"data.root={root}", *LOGMEL_SMALL])
    train, val, test, meta, loss = build_task(cfg)
    assert meta["input_mean"] == [0.0] and meta["input_std"] == [1.0]  # raw samples
    stats = meta["frontend_stats"]
    assert len(stats["mean"]) == len(stats["std"]) == 40 and min(stats["std"]) > 0
    for ds in (val, test):
        x, y = ds[2]
        x_full, y_full, _ = ds.compose(2)
        assert x.shape == (6000, 1) and torch.equal(x[:, 0], torch.from_numpy(x_full))
        assert y.shape == (6000 // 160,)  # one label per completed 10 ms frame
        assert torch.equal(y, torch.from_numpy(y_full[159::160]))
    train.set_epoch(3)
    a = train[1][0]
    assert torch.equal(a, train[1][0])  # a function of (seed, epoch, index)
    train.set_epoch(4)
    assert not torch.equal(a, train[1][0])
    # the augmentation changes the audio, not the composition (speed off: same labels)
    cfg_off = load_config(
        "speech-stream", "cpu", [f"data.root={root}", *LOGMEL_SMALL, "data.augment=null"]
    )
    cfg_on = load_config(
        "speech-stream", "cpu", [f"data.root={root}", *LOGMEL_SMALL, "data.augment.speed=false"]
    )
    off, on = build_task(cfg_off)[0], build_task(cfg_on)[0]
    off.set_epoch(1)
    on.set_epoch(1)
    for i in range(4):
        xo, yo, eo = off.compose(i)
        xa, ya, ea = on.compose(i)
        assert eo == ea and (yo == ya).all() and not (xo == xa).all()


def test_logmel_cli_train_then_export_onnx(tmp_path):
    from liquid_stream.export.pipeline import export_model, verify_onnx

    root = tiny_root(tmp_path / "sc")
    out = tmp_path / "run"
    args = [
        "speech-stream",
        "--preset",
        "cpu",
        "--max-steps",
        "2",
        "--data",
        str(root),
        "--out",
        str(out),
    ]
    for item in LOGMEL_SMALL:
        args += ["--set", item]
    r = CliRunner().invoke(train_cmd, args)
    assert r.exit_code == 0, r.output + repr(r.exception)
    model, meta = model_from_checkpoint(load_checkpoint(out / "best.pt"))
    assert model.frontend is not None and len(model.frontend.cfg.mean) == 40
    path = tmp_path / "kws.onnx"
    export_model(model, path, chunk=160, meta=meta)
    report = verify_onnx(model, path, length=4000, meta=meta)
    assert report.ok, str(report)
    bad = CliRunner().invoke(
        train_cmd,
        [*args[:-2], "--out", str(tmp_path / "bad"), "--set", "data.augment.gain_db=[10, -10]"],
    )
    assert bad.exit_code != 0 and "data.augment" in bad.output
    assert "Traceback" not in bad.output and not (tmp_path / "bad").exists()


@pytest.mark.slow
def test_cli_train_then_export_onnx(tmp_path):
    from liquid_stream.export.pipeline import export_model, verify_onnx

    root = tiny_root(tmp_path / "sc")
    out = tmp_path / "run"
    args = [
        "speech-stream",
        "--preset",
        "paper",
        "--max-steps",
        "2",
        "--data",
        str(root),
        "--out",
        str(out),
        "--set",
        "train.device=cpu",
    ]
    for item in SMALL:
        args += ["--set", item]
    r = CliRunner().invoke(train_cmd, args)
    assert r.exit_code == 0, r.output + repr(r.exception)
    assert "test (best.pt)" in r.output
    ckpt = load_checkpoint(out / "best.pt")
    assert ckpt["trainer"]["step"] == 2 and ckpt["meta"]["labels"][-1] == "_silence_"
    model, meta = model_from_checkpoint(ckpt)
    assert model.decoder == "window" and model.decoder_window == 800 and model.is_causal
    path = tmp_path / "kws.onnx"
    export_model(model, path, chunk=160, meta=meta)
    report = verify_onnx(model, path, length=3000, meta=meta)
    assert report.ok, str(report)
    r = CliRunner().invoke(evaluate_cmd, [str(out / "best.pt"), "--device", "cpu"])
    assert r.exit_code == 0, r.output + repr(r.exception)
    assert "accuracy" in r.output and "_silence_" in r.output
